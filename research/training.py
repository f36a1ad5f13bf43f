"""SFT and GRPO of the patch engineer with TRL, on CPU or GPU, resumable.

:func:`train_sft` fine-tunes a chat model on failure packet → accepted patch pairs
(``SFTTrainer``, conversational rows, loss on the answer); :func:`train_grpo` then samples K
patches per failure batch and follows the measured rerun improvement (``GRPOTrainer`` with
:class:`research.reward.RerunReward`). Defaults are the paper's (:data:`SFT_PAPER`,
:data:`GRPO_PAPER`); every run records them, the overrides and the library versions in
``run.json`` next to its checkpoints (:mod:`research.runs`).

The same code runs on a GPU: :func:`research.models.device` picks ``cuda`` when one is visible,
``--dtype auto`` then trains in bf16, and activation checkpointing is switched on there (it only
costs time on a CPU, where memory is not the limit).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from research.conversations import DataError, check_prompt_rows, texts_of
from research.models import device, load_model, load_tokenizer, offline, resolve_model, torch_dtype
from research.reward import RerunReward
from research.runs import (
    check_resumable,
    describe_invocation,
    library_versions,
    now,
    write_run,
)

__all__ = [
    "GRPO_PAPER",
    "SFT_PAPER",
    "GRPOSettings",
    "NothingToLearn",
    "SFTSettings",
    "train_grpo",
    "train_sft",
]


class NothingToLearn(Exception):
    """There are no failures (or no accepted patches) to learn from; nothing was trained."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTSettings:
    """Supervised fine-tuning; ``max_steps`` > 0 overrides ``epochs`` (the smoke runs use it)."""

    learning_rate: float = 1e-5
    lr_scheduler: str = "cosine"
    epochs: float = 2.0
    max_steps: int = -1
    batch_size: int = 1
    gradient_accumulation: int = 1
    warmup_steps: int = 0
    max_length: int = 4096
    save_steps: int = 50
    seed: int = 0
    dtype: str = "auto"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GRPOSettings:
    """GRPO: ``num_generations`` patches (K) per failure batch, one batch per step by default."""

    num_generations: int = 8
    learning_rate: float = 1e-6
    epsilon: float = 0.20
    epsilon_high: float = 0.28
    temperature: float = 0.7
    top_p: float = 0.95
    max_completion_length: int = 1024
    beta: float = 0.0
    epochs: float = 1.0
    max_steps: int = -1
    prompts_per_step: int = 1
    crash_penalty: float = 1.0
    save_steps: int = 10
    seed: int = 0
    dtype: str = "auto"


SFT_PAPER: Mapping[str, Any] = {"learning_rate": 1e-5, "lr_scheduler": "cosine", "epochs": 2.0}
"""The SFT settings Harness-R1 reports (as given in the research issue)."""
GRPO_PAPER: Mapping[str, Any] = {
    "num_generations": 8,
    "learning_rate": 1e-6,
    "epsilon": 0.20,
    "epsilon_high": 0.28,
    "temperature": 0.7,
    "top_p": 0.95,
}
"""The GRPO settings Harness-R1 reports (K, lr, clip low/high, sampling), as in the issue."""


def _overrides(settings: Any, paper: Mapping[str, Any]) -> dict[str, Any]:
    values = dataclasses.asdict(settings)
    return {k: values[k] for k in paper if values[k] != paper[k]}


def _common_args(settings: SFTSettings | GRPOSettings, out: Path) -> dict[str, Any]:
    """TrainingArguments both trainers share: device, precision, saving, logging."""
    import torch
    from trl import SFTConfig

    on_gpu = device() == "cuda"
    dtype = torch_dtype(settings.dtype)
    args: dict[str, Any] = {
        "output_dir": str(out),
        "learning_rate": settings.learning_rate,
        "num_train_epochs": settings.epochs,
        "max_steps": settings.max_steps,
        "save_strategy": "steps",
        "save_steps": settings.save_steps,
        "save_total_limit": 2,
        "logging_steps": 1,
        "report_to": [],
        "disable_tqdm": True,
        "seed": settings.seed,
        "data_seed": settings.seed,
        "use_cpu": not on_gpu,
        "bf16": on_gpu and dtype == torch.bfloat16,
        "dataloader_num_workers": 0,
    }
    # ``activation_checkpointing`` is the newer name of ``gradient_checkpointing``.
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    key = (
        "activation_checkpointing"
        if "activation_checkpointing" in fields
        else "gradient_checkpointing"
    )
    args[key] = on_gpu
    return args


def _settings_record(
    stage: str, model: str, settings: Any, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """What must match for a run to be resumed: the stage, model, settings and data digest."""
    return {"stage": stage, "model": model, **dataclasses.asdict(settings), **extra}


def _finish(
    record: dict[str, Any], trainer: Any, out: Path, tokenizer: Any, started: float
) -> dict[str, Any]:
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    history = trainer.state.log_history
    losses = [h["loss"] for h in history if "loss" in h]
    record.update(
        status="finished",
        finished_at=now(),
        global_step=trainer.state.global_step,
        seconds=round(time.perf_counter() - started, 3),
        first_loss=losses[0] if losses else None,
        last_loss=losses[-1] if losses else None,
        train_metrics=next((h for h in reversed(history) if "train_runtime" in h), None),
    )
    write_run(out, record)
    return record


def train_sft(
    model: str,
    rows: Sequence[dict[str, Any]],
    out: Path,
    settings: SFTSettings | None = None,
    *,
    data_digest: str | None = None,
    callbacks: Sequence[Any] = (),
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``rows``; write the model and ``run.json`` to ``out``.

    Resumes from ``out``'s last checkpoint when ``out`` holds an interrupted run with the same
    settings. Raises :class:`NothingToLearn` when ``rows`` is empty.
    """
    settings = settings or SFTSettings()
    if not rows:
        raise NothingToLearn(
            "the SFT data holds no failure packet → accepted patch pair: nothing to learn"
        )
    shapes = {"messages" in row for row in rows}
    if len(shapes) > 1:
        raise DataError(
            "the SFT rows mix the 'messages' and the 'prompt'/'completion' shapes; use one"
        )
    key = _settings_record("sft", model, settings, {"data": data_digest})
    earlier, checkpoint = check_resumable(out, "sft", key)
    location = _reuse_or_resolve(model, texts_of(rows), out)
    offline()
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    record = _start_record(
        earlier, "sft", model, location, key, settings, SFT_PAPER, checkpoint, out
    )
    tokenizer = load_tokenizer(location)
    too_long = _too_long(tokenizer, rows, settings.max_length)
    if len(too_long) == len(rows):
        raise DataError(
            f"every one of the {len(rows)} rows is longer than max_length "
            f"{settings.max_length} tokens (the answer would be cut off); raise --max-length"
        )
    if too_long:
        record["rows_too_long"] = too_long
        write_run(out, record)
        print(
            f"warning: {len(too_long)} of {len(rows)} rows are longer than {settings.max_length} "
            "tokens and are cut (their answers lose their end)",
            file=sys.stderr,
        )
    args = SFTConfig(
        **_common_args(settings, out),
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup_steps,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation,
        max_length=settings.max_length,
    )
    record["trainer_config"] = _config_record(args)
    write_run(out, record)
    started = time.perf_counter()
    trainer = SFTTrainer(
        model=load_model(location, dtype=settings.dtype),
        args=args,
        train_dataset=Dataset.from_list([_sft_columns(row) for row in rows]),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return _finish(record, trainer, out, tokenizer, started)


def train_grpo(
    model: str,
    rows: Sequence[dict[str, Any]],
    reward: RerunReward,
    out: Path,
    settings: GRPOSettings | None = None,
    *,
    data_digest: str | None = None,
    callbacks: Sequence[Any] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """GRPO of ``model`` on failure-batch prompts ``rows`` (``prompt`` + ``batch`` columns).

    ``reward`` measures each sampled patch (see :mod:`research.reward`). Resumes like
    :func:`train_sft`; raises :class:`NothingToLearn` when ``rows`` is empty.
    """
    settings = settings or GRPOSettings()
    if not rows:
        raise NothingToLearn("there is no failure batch to learn from: nothing to train")
    check_prompt_rows(rows, "GRPO prompts")
    key = _settings_record("grpo", model, settings, {"data": data_digest})
    earlier, checkpoint = check_resumable(out, "grpo", key)
    location = _reuse_or_resolve(model, texts_of(rows), out)
    offline()
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    record = _start_record(
        earlier, "grpo", model, location, key, settings, GRPO_PAPER, checkpoint, out
    )
    record["batches"] = sorted({str(row["batch"]) for row in rows})
    record.update(extra or {})
    write_run(out, record)
    tokenizer = load_tokenizer(location)
    per_step = settings.num_generations * settings.prompts_per_step
    args = GRPOConfig(
        **_common_args(settings, out),
        lr_scheduler_type="constant",
        per_device_train_batch_size=per_step,
        num_generations=settings.num_generations,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_completion_length=settings.max_completion_length,
        beta=settings.beta,
    )
    record["trainer_config"] = _config_record(args)
    write_run(out, record)
    started = time.perf_counter()
    trainer = GRPOTrainer(
        model=load_model(location, dtype=settings.dtype),
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list([_grpo_columns(row) for row in rows]),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    record["reward_stats"] = dict(reward.stats)
    common = sorted(reward.invalid_reasons.items(), key=lambda item: -item[1])[:10]
    record["invalid_reasons"] = dict(common)
    return _finish(record, trainer, out, tokenizer, started)


def _config_record(args: Any) -> dict[str, Any]:
    """Every field of the TRL config as run (its own defaults included: loss type, scaling)."""
    found = {}
    for key, value in args.to_dict().items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            value = repr(value)
        found[key] = value
    return found


def _too_long(tokenizer: Any, rows: Sequence[Mapping[str, Any]], limit: int) -> list[int]:
    """Indexes of rows whose full conversation is over ``limit`` tokens."""
    found = []
    for index, row in enumerate(rows):
        messages = row.get("messages") or [*row["prompt"], *row["completion"]]
        ids = tokenizer.apply_chat_template(messages, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        if len(ids) > limit:
            found.append(index)
    return found


def _reuse_or_resolve(model: str, texts: Any, out: Path) -> str:
    """Resolve ``model``; a ``tiny`` base already built in ``out`` (a resumed run) is reused."""
    if model == "tiny" and (out / "tiny-base" / "config.json").is_file():
        return str(out / "tiny-base")
    return resolve_model(model, texts=texts, work=out)


def _start_record(
    earlier: dict[str, Any] | None,
    stage: str,
    model: str,
    location: str,
    key: Mapping[str, Any],
    settings: Any,
    paper: Mapping[str, Any],
    checkpoint: Path | None,
    out: Path,
) -> dict[str, Any]:
    record: dict[str, Any] = dict(earlier or {})
    record.update(
        stage=stage,
        status="running",
        model=model,
        resolved_model=location,
        settings=dict(key),
        paper_defaults=dict(paper),
        overrides=_overrides(settings, paper),
        command=describe_invocation(),
        versions=library_versions(),
        device=device(),
    )
    record.setdefault("started_at", now())
    if checkpoint is not None:
        record.setdefault("resumes", []).append({"from": checkpoint.name, "at": now()})
    write_run(out, record)
    return record


def _sft_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    if "messages" in row:
        return {"messages": row["messages"]}
    return {"prompt": row["prompt"], "completion": row["completion"]}


def _grpo_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"prompt": row["prompt"], "batch": str(row["batch"])}
