"""One optimizer iteration: how well K candidate reruns share the machine.

What it measures: the support-desk demo (``envharness.demos.support_desk``) over ``--scenarios``
tickets, one iteration with ``--candidates`` distinct candidate patches (K; each the
precondition hook with its own message, so the patch cache cannot merge them and every one is
rerun), hook code in the subprocess sandbox, each run into a fresh store, once per
``--capacity`` value (reruns at once). For each it prints:

- the iteration's wall time (engineer, validation and smoke tests, every rerun, the decision —
  as recorded in the run's ``optimizer.decision``);
- the sum of the reruns' own times (each ``optimizer.measured`` record's seconds): what the
  iteration would take if the reruns ran one after another and cost nothing else;
- parallel efficiency = sum of rerun times / (wall time x capacity): 1.0 means every slot was
  busy with rerun work the whole time; the speed-up of each capacity over capacity 1.

Run it from the repository root::

    .venv/bin/python tools/bench/optimizer.py                         # K=8, 32 scenarios, 1 and 2
    .venv/bin/python tools/bench/optimizer.py --capacity 1 2 4 --sandbox local

The machine's cores bound what capacity can buy: reruns are CPU work in this process (the
turn loop, hashing, SQLite) plus the sandbox's worker processes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.optimizer import HarnessOptimizer, OptimizationConfig, ScriptedEngineer
from envharness.records import OptimizerMeasured
from envharness.store import read_store


def answers(count: int) -> list[str]:
    """``count`` distinct candidates (same rule, different messages: different digests)."""
    found = []
    for number in range(count):
        code = (
            "def on_before_action(ctx, nb):\n"
            '    if ctx.action.get("tool") == "issue_refund" and not '
            'ctx.predicates.get("order_looked_up"):\n'
            f'        return block_and_prompt("look the order up first ({number})")\n'
            "    return None\n"
        )
        patch = [{"op": "add_code_hook", "hook": "on_before_action", "code": code}]
        found.append(f"<think>variant {number}</think><patch>{json.dumps(patch)}</patch>")
    return found


async def one(
    directory: Path, capacity: int, candidates: int, scenarios: int, sandbox: str
) -> dict[str, Any]:
    store = directory / f"capacity-{capacity}"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}, max_concurrency=4
    )
    config = OptimizationConfig(
        candidates=candidates,
        iterations=1,
        turns=8,
        capacity=capacity,
        sandbox="local" if sandbox == "local" else "subprocess",
    )
    optimizer = HarnessOptimizer(harness, ScriptedEngineer(answers(candidates)), config=config)
    started = time.perf_counter()
    result = await optimizer.optimize_async(tickets(scenarios))
    total = time.perf_counter() - started
    reader = await read_store(store)
    reruns = [
        record.payload.seconds
        async for record in reader.records(result.run_id)
        if isinstance(record.payload, OptimizerMeasured) and record.payload.role == "candidate"
    ]
    assert len(reruns) == candidates, f"expected {candidates} reruns, measured {len(reruns)}"
    assert result.accepted_version == "harness-v1"
    wall = result.iterations[0].seconds
    return {
        "capacity": capacity,
        "wall": wall,
        "reruns": sum(reruns),
        "efficiency": sum(reruns) / (wall * capacity),
        "total": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--scenarios", type=int, default=32)
    parser.add_argument("--capacity", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sandbox", choices=("subprocess", "local"), default="subprocess")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--directory", type=Path, default=None)
    options = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-optimizer-", dir=options.directory))
    try:
        rows = [
            anyio.run(
                one,
                directory,
                capacity,
                options.candidates,
                options.scenarios,
                options.sandbox,
                backend=options.backend,
            )
            for capacity in options.capacity
        ]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(
        f"one iteration: K={options.candidates} candidates x {options.scenarios} scenarios, "
        f"{options.sandbox} sandbox, {options.backend}"
    )
    print(f"{'capacity':>8} {'wall s':>8} {'reruns s':>9} {'efficiency':>10} {'speed-up':>8}")
    first = rows[0]["wall"]
    for row in rows:
        print(
            f"{row['capacity']:>8} {row['wall']:>8.2f} {row['reruns']:>9.2f} "
            f"{row['efficiency']:>10.2f} {first / row['wall']:>7.2f}x"
        )


if __name__ == "__main__":
    main()
