"""Baselines and ablations of the harness optimizer on the bundled environments, measured.

    python research/ablations.py --store S --out docs/research.md [--repeats 5]

For each bundled environment (the support desk and the coding shell, each with its frozen
policy, a training split and a held-out split the optimizer never trains on) and each condition,
the optimizer runs ``--repeats`` times with seeds 0, 1, …; after each run the final harness is
measured on the held-out split (same seed). Conditions:

- ``full`` — the mining engineer, K=8, 3 iterations, regression guard, held-out gate;
- ``random-patch baseline`` — :class:`research.baselines.RandomPatchEngineer` in place of mining;
- ``no pre-action hook`` / ``no post-step hook`` — the engineer's ``on_before_action`` /
  ``on_post_step`` operations are removed from every answer;
- ``no failure packet`` — the engineer sees only the environment, task and hook names;
- ``K=1`` — one candidate per iteration;
- ``no regression guard`` — a candidate that breaks a solved scenario is not rejected for it;
- ``no held-out gate`` — versions are accepted without the held-out check.

The table (between the ``ablations`` markers of ``--out``) gives pass rates with 95% Wilson
intervals over all scenario runs pooled across repeats, the versions accepted, the regressions
the ledger recorded, and the exact command. Everything in it is measured by this script; the
raw numbers go to ``--json`` when given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``research`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

__all__ = ["CONDITIONS", "Condition", "Setup", "main", "run_ablations", "wilson"]

START = "<!-- ablations:start -->"
END = "<!-- ablations:end -->"


@dataclasses.dataclass(frozen=True)
class Setup:
    """One bundled environment: its factory, frozen policy, splits and turn limit."""

    name: str
    environment: Any
    policy: Any
    train: Callable[[], list[Any]]
    held_out: Callable[[], list[Any]]
    turns: int


@dataclasses.dataclass(frozen=True)
class Condition:
    name: str
    engineer: Callable[[int], Any]
    candidates: int = 8
    regression_guard: bool = True
    held_out_gate: bool = True


def _mining(_: int) -> Any:
    from envharness.optimizer import MiningEngineer

    return MiningEngineer()


def _random(seed: int) -> Any:
    from research.baselines import RandomPatchEngineer

    return RandomPatchEngineer(seed)


def _without(hook: str) -> Callable[[int], Any]:
    def make(seed: int) -> Any:
        from research.baselines import WithoutHooks

        return WithoutHooks(_mining(seed), {hook})

    return make


def _task_only(seed: int) -> Any:
    from research.baselines import TaskOnly

    return TaskOnly(_mining(seed))


CONDITIONS = (
    Condition("full", _mining),
    Condition("random-patch baseline", _random),
    Condition("no pre-action hook", _without("on_before_action")),
    Condition("no post-step hook", _without("on_post_step")),
    Condition("no failure packet", _task_only),
    Condition("K=1", _mining, candidates=1),
    Condition("no regression guard", _mining, regression_guard=False),
    Condition("no held-out gate", _mining, held_out_gate=False),
)


def _desk_train() -> list[Any]:
    from envharness.demos.support_desk import tickets

    return tickets(16)[:8]


def _desk_held() -> list[Any]:
    from envharness.demos.support_desk import tickets

    return tickets(16)[8:]


def _shell_held() -> list[Any]:
    """Tasks the coding shell's bundled list does not hold: other files, other caches."""
    from envharness.contracts.scenario import Scenario
    from envharness.demos.coding_shell import CodingTask

    files = ("src/db.py", "src/auth.py")
    return [
        *(Scenario(id=f"held-urgent-{i}", input=CodingTask(
            task=f"Urgent: the test for {f} fails; fix it.", buggy_file=f))
          for i, f in enumerate(files, 1)),
        *(Scenario(id=f"held-cleanup-{i}", input=CodingTask(
            task=f"The test for {f} fails; fix it and clean the cache at {c}.", buggy_file=f,
            cleanup=c)) for i, (f, c) in enumerate(zip(files, ("/srv/cache", "/root/.npm"),
                                                        strict=True), 1)),
        *(Scenario(id=f"held-tidy-{i}", input=CodingTask(
            task=f"The test for {f} fails; fix it and clean {c}.", buggy_file=f, cleanup=c))
          for i, (f, c) in enumerate(zip(files, ("/workspace/dist", "/workspace/.tox"),
                                         strict=True), 1)),
    ]  # fmt: skip


def setups() -> list[Setup]:
    from envharness.demos.coding_shell import CodingShell, HastyShellPolicy, coding_tasks
    from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk

    return [
        Setup("support-desk", SupportDesk, RefundFirstPolicy, _desk_train, _desk_held, 8),
        Setup("coding-shell", CodingShell, HastyShellPolicy, coding_tasks, _shell_held, 12),
    ]


def wilson(passed: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a pass rate (sound at 0/n and n/n, unlike Wald)."""
    if total == 0:
        return (math.nan, math.nan)
    rate = passed / total
    centre = (rate + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total))
    half /= 1 + z * z / total
    return (max(0.0, centre - half), min(1.0, centre + half))


async def _one_run(setup: Setup, condition: Condition, seed: int, store: Path) -> dict[str, Any]:
    from envharness.api.harness import AsyncEnvironmentHarness
    from envharness.optimizer import (
        HarnessOptimizer,
        HarnessPatch,
        LocalSandbox,
        OptimizationConfig,
    )
    from envharness.optimizer.rerun import measure_patch

    harness = AsyncEnvironmentHarness(
        store, environment=setup.environment, agents={"agent": setup.policy}
    )
    train, held = setup.train(), setup.held_out()
    config = OptimizationConfig(
        candidates=condition.candidates,
        iterations=3,
        turns=setup.turns,
        seed=seed,
        sandbox="local",
        # No value reaches 2: no scenario counts as "solved", so none can regress.
        solved=1.0 if condition.regression_guard else 2.0,
        stop_when_solved=True,
        name=f"ablation {setup.name} {condition.name} seed {seed}",
    )
    started = time.perf_counter()
    async with harness:
        optimizer = HarnessOptimizer(harness, condition.engineer(seed), config=config)
        result = await optimizer.optimize_async(
            train, held_out=held if condition.held_out_gate else ()
        )
        patch = HarnessPatch.from_dict(result.patch) if result.patch else HarnessPatch()
        async with harness.writable_store() as opened, LocalSandbox() as sandbox:
            check = await measure_patch(
                harness, opened, held, patch, sandbox=sandbox, config=config,
                name=f"ablation held-out check {result.run_id}",
            )  # fmt: skip
    held_now, baseline_held = check.patched.measurement, check.reference.measurement
    held_experiment = check.patched.experiment_id
    final = list(result.final.values.values())
    base = list(result.baseline.values.values())
    return {
        "environment": setup.name,
        "condition": condition.name,
        "seed": seed,
        "run_id": result.run_id,
        "held_out_experiment": held_experiment,
        "train_baseline": sum(1 for v in base if (v or 0.0) >= 1.0),
        "train_final": sum(1 for v in final if (v or 0.0) >= 1.0),
        "train_total": len(final),
        "held_baseline": sum(1 for v in baseline_held.values.values() if (v or 0.0) >= 1.0),
        "held_final": sum(1 for v in held_now.values.values() if (v or 0.0) >= 1.0),
        "held_total": len(held),
        "versions": len(result.versions),
        "regressions": len(result.ledger),
        "seconds": time.perf_counter() - started,
    }


def run_ablations(
    store: Path,
    repeats: int,
    *,
    conditions: Sequence[Condition] = CONDITIONS,
    chosen: Sequence[Setup] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]]:
    rows = []
    for setup in chosen or setups():
        for condition in conditions:
            for seed in range(repeats):
                row = anyio.run(_one_run, setup, condition, seed, store)
                progress(
                    f"{setup.name} / {condition.name} / seed {seed}: train "
                    f"{row['train_final']}/{row['train_total']}, held-out "
                    f"{row['held_final']}/{row['held_total']}, {row['versions']} version(s)"
                )
                rows.append(row)
    return rows


def _cell(passed: int, total: int) -> str:
    low, high = wilson(passed, total)
    return f"{passed / total:.2f} [{low:.2f}, {high:.2f}]"


def table(rows: Sequence[dict[str, Any]], command: str, repeats: int) -> str:
    lines = [
        f"Measured by `{command}` ({repeats} seed(s) per condition; "
        f"{platform.python_version()} on {platform.machine()}, envharness "
        f"{metadata.version('envharness')}). Pass rates pool every scenario run across seeds; "
        "brackets are 95% Wilson intervals.",
        "",
        "| environment | condition | train pass | held-out pass | versions / run | "
        "regressions recorded | s / run |",
        "|---|---|---|---|---|---|---|",
    ]
    order: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        order.setdefault((row["environment"], row["condition"]), []).append(row)
    shown_baseline: set[str] = set()
    for (environment, condition), group in order.items():
        if environment not in shown_baseline:
            shown_baseline.add(environment)
            before_train = _cell(
                sum(r["train_baseline"] for r in group), sum(r["train_total"] for r in group)
            )
            before_held = _cell(
                sum(r["held_baseline"] for r in group), sum(r["held_total"] for r in group)
            )
            lines.append(
                f"| {environment} | no optimization (frozen policy) | {before_train} | "
                f"{before_held} | - | - | - |"
            )
        train = _cell(sum(r["train_final"] for r in group), sum(r["train_total"] for r in group))
        held = _cell(sum(r["held_final"] for r in group), sum(r["held_total"] for r in group))
        versions = sum(r["versions"] for r in group) / len(group)
        regressions = sum(r["regressions"] for r in group)
        seconds = sum(r["seconds"] for r in group) / len(group)
        lines.append(
            f"| {environment} | {condition} | {train} | {held} | {versions:.1f} | "
            f"{regressions} | {seconds:.1f} |"
        )
    return "\n".join(lines)


def write_table(out: Path, text: str) -> None:
    """Replace the text between the markers in ``out`` (append them if missing)."""
    current = out.read_text(encoding="utf-8") if out.exists() else ""
    block = f"{START}\n{text}\n{END}"
    if START in current and END in current:
        before, _, rest = current.partition(START)
        _, _, after = rest.partition(END)
        updated = before + block + after
    else:
        updated = current + ("\n" if current and not current.endswith("\n") else "") + block + "\n"
    out.write_text(updated, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ablations.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--store", required=True, type=Path, help="where the runs are recorded")
    parser.add_argument("--out", required=True, type=Path, help="markdown file for the table")
    parser.add_argument("--repeats", type=int, default=5, help="seeds per condition")
    parser.add_argument("--json", type=Path, default=None, help="write the raw rows here")
    parser.add_argument(
        "--only", action="append", default=None, help="only these conditions (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    conditions: tuple[Condition, ...] = CONDITIONS
    if args.only:
        names = {c.name for c in CONDITIONS}
        unknown = sorted(set(args.only) - names)
        if unknown:
            parser.error(f"unknown condition(s) {unknown}; known: {sorted(names)}")
        conditions = tuple(c for c in CONDITIONS if c.name in args.only)
    rows = run_ablations(
        args.store,
        args.repeats,
        conditions=conditions,
        progress=lambda line: print(line, flush=True),
    )
    command = "python research/ablations.py " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    write_table(args.out, table(rows, command, args.repeats))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote the table to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
