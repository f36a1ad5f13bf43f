"""The record of a training run, kept next to its checkpoints: what ran, with which settings.

``run.json`` in the output directory says which stage ran (``sft`` or ``grpo``), on which model
and data (with digests), with which hyperparameters — the paper defaults and the overrides
spelled out apart — and how it ended. It is written when the run starts and rewritten when it
finishes, so an interrupted run leaves one that says ``"status": "running"``; the next start with
the same output directory resumes from the last checkpoint, and refuses when the settings
differ (resuming a run with other settings would be a different run wearing its name).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "RUN_FILE",
    "ResumeError",
    "file_digest",
    "last_checkpoint",
    "library_versions",
    "now",
    "precheck",
    "read_run",
    "write_run",
]

RUN_FILE = "run.json"
LIBRARIES = ("envharness", "torch", "transformers", "trl", "datasets", "tokenizers", "accelerate")


class ResumeError(ValueError):
    """An output directory holds a run that cannot be continued as asked."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def library_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def read_run(out: Path) -> dict[str, Any] | None:
    path = out / RUN_FILE
    if not path.is_file():
        return None
    value = json.loads(path.read_text())
    return value if isinstance(value, dict) else None


def write_run(out: Path, record: Mapping[str, Any]) -> None:
    """Write ``run.json`` atomically (a crash mid-write leaves the previous one)."""
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{RUN_FILE}.partial"
    staging.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    staging.replace(out / RUN_FILE)


def last_checkpoint(out: Path) -> Path | None:
    """The ``checkpoint-N`` directory with the highest N that holds a complete trainer state."""
    best: tuple[int, Path] | None = None
    for child in out.glob("checkpoint-*"):
        suffix = child.name.removeprefix("checkpoint-")
        if not suffix.isdigit() or not (child / "trainer_state.json").is_file():
            continue
        if best is None or int(suffix) > best[0]:
            best = (int(suffix), child)
    return best[1] if best else None


def precheck(out: Path, stage: str) -> dict[str, Any] | None:
    """The earlier record in ``out`` if a run of ``stage`` may go on there (else ResumeError).

    Refused: a non-empty directory without ``run.json``, another stage's run, a finished run.
    Cheap, so scripts call it before spending anything (a GRPO baseline, a model load).
    """
    earlier = read_run(out)
    if earlier is None:
        if out.exists() and any(out.iterdir()):
            raise ResumeError(
                f"{out} is not empty and holds no {RUN_FILE}: choose a new --out directory"
            )
        return None
    if earlier.get("stage") != stage:
        raise ResumeError(
            f"{out} holds a {earlier.get('stage')!r} run, not {stage!r}: choose a new --out"
        )
    if earlier.get("status") == "finished":
        raise ResumeError(
            f"{out} holds a finished {stage} run (step {earlier.get('global_step')}); "
            "choose a new --out directory to train again"
        )
    return earlier


def check_resumable(
    out: Path, stage: str, settings: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, Path | None]:
    """The earlier record and the checkpoint to resume from, or ``(None, None)`` for a new run.

    Raises :class:`ResumeError` for what :func:`precheck` refuses, and for a run with a
    checkpoint whose settings differ from ``settings`` (each differing key is named); a run
    stopped before its first checkpoint simply starts again.
    """
    earlier = precheck(out, stage)
    if earlier is None:
        return None, None
    checkpoint = last_checkpoint(out)
    if checkpoint is None:  # stopped before its first checkpoint: nothing to continue from
        return earlier, None
    before = earlier.get("settings", {})
    changed = sorted(
        key for key in set(before) | set(settings) if before.get(key) != settings.get(key)
    )
    if changed:
        detail = ", ".join(f"{k}: {before.get(k)!r} -> {settings.get(k)!r}" for k in changed)
        raise ResumeError(
            f"{out} holds an interrupted {stage} run with other settings ({detail}); resume it "
            "with the same arguments, or choose a new --out directory"
        )
    return earlier, checkpoint


def describe_invocation() -> list[str]:
    """The command line as run (``python research/train_engineer.py sft …``)."""
    return [Path(sys.executable).name, *sys.argv]
