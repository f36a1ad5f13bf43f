"""Failure packet -> accepted patch pairs from a store's optimizer runs, for SFT.

    python research/build_sft_dataset.py --store S --environment module:Env \\
        --entitle-training "own evaluation data" --out sft.jsonl

One JSON line per accepted harness version (from any engineer: mining, scripted, or an
OpenAI-compatible teacher): ``{"prompt": [system, user], "completion": [assistant], ...}``, the
conversational prompt-completion format TRL's SFTTrainer takes. The prompt is the one the model
engineer sends for that failure packet (``--prompt``, default ``engineer-v1``), so training and
inference see the same text. The sessions the pairs rest on are admitted as an envharness
dataset first (frozen with the declared entitlement, or from ``--snapshot``); a refused
trajectory is named and nothing is written. Exit status: 0 (also when there is nothing to learn
from, said on stderr), 2 for bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``research`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

__all__ = ["build", "main"]

BAD_INPUT = 2


async def build(
    store_path: Path,
    environment: Any,
    out: Path,
    *,
    runs: Sequence[str] | None,
    prompt: str,
    entitlement: str | None,
    snapshot: str | None,
) -> tuple[int, list[str], str | None]:
    """Write ``out``; returns (pairs written, notes, dataset id)."""
    from envharness.store import open_store
    from research.sft_data import admit_evidence, sft_pairs

    async with open_store(store_path, create=False) as store:
        pairs, notes = await sft_pairs(store, environment, runs=runs, prompt=prompt)
        dataset = snapshot_id = None
        if pairs:
            sessions = sorted({s for pair in pairs for s in pair.evidence})
            name = "sft-" + hashlib.sha256("\n".join(sessions).encode()).hexdigest()[:16]
            dataset, snapshot_id = await admit_evidence(
                store, sessions, name=name, entitlement=entitlement, snapshot=snapshot
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(out.name + ".partial")
    with staging.open("w", encoding="utf-8") as handle:
        for pair in pairs:
            row = pair.row(dataset=dataset, snapshot=snapshot_id)
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    staging.replace(out)
    return len(pairs), notes, dataset


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="build_sft_dataset.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument(
        "--environment",
        required=True,
        metavar="module:attribute",
        help="the environment the runs optimized (its hook view rebuilds the packets)",
    )
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--run", action="append", default=None, help="only this run (repeat)")
    parser.add_argument("--prompt", default="engineer-v1", help="the engineer prompt")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--entitle-training", metavar="BASIS", default=None)
    group.add_argument("--snapshot", metavar="ID", default=None)
    args = parser.parse_args(argv)

    from envharness.cli.edge import CliError
    from envharness.cli.loading import guard_factory, load_reference, make_cwd_importable
    from envharness.errors import EnvharnessError

    if not (args.store / "evidence.sqlite3").is_file():
        print(f"error: there is no store at {args.store}", file=sys.stderr)
        return BAD_INPUT
    try:
        make_cwd_importable()
        factory = guard_factory(
            load_reference(args.environment, what="--environment"), args.environment
        )
        environment = factory()
        count, notes, dataset = anyio.run(
            lambda: build(
                args.store,
                environment,
                args.out,
                runs=args.run,
                prompt=args.prompt,
                entitlement=args.entitle_training,
                snapshot=args.snapshot,
            )
        )
    except (CliError, EnvharnessError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if count == 0:
        print(
            f"no accepted patch in the store's optimizer runs: nothing to learn from "
            f"(wrote an empty {args.out})",
            file=sys.stderr,
        )
        return 0
    print(f"wrote {count} pair(s) to {args.out} (evidence admitted as dataset {dataset})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
