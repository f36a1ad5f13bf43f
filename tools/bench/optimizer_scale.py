"""The optimizer's parallel efficiency: one iteration of K candidates at capacity 1 and 2, each
through an open process pool (issue 14: 8 candidates x 32 scenarios, efficiency >= 0.8).

For each capacity C in ``--capacity`` it opens ``ProcessPoolExecutor(workers=C)`` with
``async with``, as ``optimize --workers C --capacity C`` does (``--workers N`` chooses another
size): the C reruns at once split its workers, one each (N in all: N // C each, the first N % C
one more). Before any clock it runs C small experiments at once through the pool, split the
same way, so that every worker has loaded the recipe's modules. Then it runs the optimizer for
one iteration of ``--candidates`` distinct precondition patches (``optimizer.py``'s, so the
patch cache cannot merge them) over ``--scenarios`` support-desk tickets whose every turn does
pure-Python work (:mod:`_cpu_desk`, ``--work`` loop iterations: a rerun is worth a core), with a
local sandbox.

Per capacity it prints the iteration's wall time (from the baseline's end to the iteration's,
taken from the optimizer's own progress lines), this process's CPU over it (the driver:
committing every worker's records, reading each rerun's evidence back, recording the
measurement), the workers' CPU over it (read from ``/proc``: they are alive, so not yet in this
process's children's usage) and ``busy``, ``(w + d) / wall``, the cores the run kept busy. Then
the efficiency, ``wall(1) / (2 x wall(2))``, and the bound that the driver's share sets on 2
cores: with the driver at ``d`` and the workers at ``w`` CPU seconds an iteration, capacity 1
takes at least ``max(w, d)`` and capacity 2 at least ``(w + d) / 2``, so the efficiency cannot
pass ``max(w, d) / (w + d)``. Capacity 2 may also cost more CPU than capacity 1 (more reruns
open at once in the driver; with ``--workers`` above the capacity, reruns spread over several
workers), so it prints what CPU alone allows on an idle machine, ``max(w1, d1) / (w2 + d2)``: a
figure the load changes less than wall time.

The load average before and after is printed: figures taken beside other work measure the share
of the cores each run got. ``--repeat N`` measures every capacity N times in turn and takes the
fastest of each (the least disturbed), printing the range too. ``--profile FILE`` writes a
cProfile of the driver's event-loop thread over the last capacity's iteration.

Run it from the repository root::

    .venv/bin/python tools/bench/optimizer_scale.py                 # capacity 1 and 2
    .venv/bin/python tools/bench/optimizer_scale.py --repeat 3      # the fastest of 3 each
    .venv/bin/python tools/bench/optimizer_scale.py --work 200000   # heavier reruns
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from _cpu_desk import WORK, CpuBoundDesk  # tools/bench/ is sys.path[0] as a script
from optimizer import candidate_reruns, distinct_answers  # tools/bench/optimizer.py

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, tickets
from envharness.optimizer import HarnessOptimizer, OptimizationConfig, ScriptedEngineer
from envharness.runtime.executors import ProcessPoolExecutor


def children_cpu() -> float:
    """CPU seconds of this process's living children (the pool's workers), from ``/proc``."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@dataclass
class Clock:
    """Wall and CPU marks at the baseline's end and the first iteration's, from the
    optimizer's progress lines."""

    profile: cProfile.Profile | None = None
    marks: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def saw(self, line: str) -> None:
        for name in ("baseline", "iteration 1"):
            if line.startswith(f"{name}:"):
                self.marks[name] = (time.perf_counter(), time.process_time(), children_cpu())
                if self.profile is not None:
                    (self.profile.enable if name == "baseline" else self.profile.disable)()

    def spent(self) -> tuple[float, float, float]:
        start, end = self.marks["baseline"], self.marks["iteration 1"]
        wall, driver, workers = (b - a for a, b in zip(start, end, strict=True))
        return wall, driver, workers


@dataclass
class Row:
    capacity: int
    wall: float
    driver: float
    workers: float
    reruns: float
    """The sum of the candidates' reruns' own seconds."""


async def warm(harness: AsyncEnvironmentHarness, pool: ProcessPoolExecutor, count: int) -> None:
    """``count`` small experiments at once, each with its share of the pool's workers, as the
    reruns will take them: every worker has then loaded what a rerun needs."""
    shared = pool.split(count)
    async with anyio.create_task_group() as group:
        for number in range(count):
            experiment = harness.experiment(f"warm {number}", tickets(2), turns=8, executor=shared)
            group.start_soon(experiment.run)


async def iteration(directory: Path, options: argparse.Namespace, capacity: int) -> Row:
    store = directory / f"capacity-{capacity}-{time.monotonic_ns()}"
    harness = AsyncEnvironmentHarness(
        store,
        environment=functools.partial(CpuBoundDesk, options.work),
        agents={"alice": RefundFirstPolicy},
        max_concurrency=16,
    )
    last = options.profile and capacity == options.capacity[-1]
    profile = cProfile.Profile() if last else None
    clock = Clock(profile)
    workers = options.workers or capacity
    async with ProcessPoolExecutor(workers=workers) as pool:
        await warm(harness, pool, capacity)
        config = OptimizationConfig(
            candidates=options.candidates,
            iterations=1,
            turns=8,
            capacity=capacity,
            sandbox="local",
            executor=pool,
        )
        engineer = ScriptedEngineer(distinct_answers(options.candidates))
        optimizer = HarnessOptimizer(harness, engineer, config=config, progress=clock.saw)
        result = await optimizer.optimize_async(tickets(options.scenarios))
    if profile is not None:
        profile.dump_stats(options.profile)
    if result.accepted_version != "harness-v1":
        raise SystemExit(f"the optimizer accepted {result.accepted_version}, not harness-v1")
    reruns = await candidate_reruns(store, result.run_id)
    if len(reruns) != options.candidates:
        raise SystemExit(f"expected {options.candidates} reruns, measured {len(reruns)}")
    wall, driver, workers = clock.spent()
    return Row(capacity, wall, driver, workers, sum(reruns))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--scenarios", type=int, default=32)
    parser.add_argument("--work", type=int, default=WORK, help="loop iterations a turn")
    parser.add_argument("--capacity", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workers", type=int, default=None,
                        help="workers in all, split among the reruns at once "
                        "(default: the capacity, one each)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every capacity")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile of the driver")
    parser.add_argument("--directory", type=Path, default=None)
    options = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-optimizer-scale-", dir=options.directory))
    print(
        f"one optimizer iteration: K={options.candidates} candidates x {options.scenarios} "
        f"CPU-bound tickets ({options.work:,} loop iterations a turn), open process pools of "
        f"{options.workers or 'C'} workers in all, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'capacity':>8} {'wall s':>7} {'reruns s':>9} {'driver CPU s':>13} "
        f"{'workers CPU s':>14} {'busy':>5}"
    )
    rows: dict[int, list[Row]] = {capacity: [] for capacity in options.capacity}
    try:
        for _ in range(options.repeat):  # capacities in turn: each sees the same spells of load
            for capacity in options.capacity:
                row = anyio.run(iteration, directory, options, capacity)
                rows[capacity].append(row)
                print(
                    f"{row.capacity:>8} {row.wall:>7.2f} {row.reruns:>9.2f} {row.driver:>13.2f} "
                    f"{row.workers:>14.2f} {(row.driver + row.workers) / row.wall:>5.2f}"
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ones, twos = rows.get(1), rows.get(2)
    if ones and twos:
        each = sorted(one.wall / (2 * two.wall) for one, two in zip(ones, twos, strict=True))
        one, two = min(ones, key=lambda r: r.wall), min(twos, key=lambda r: r.wall)
        d, w = one.driver, one.workers
        print(
            f"capacity 2 / capacity 1 = {one.wall / two.wall:.2f}x speed-up (fastest of each), "
            f"parallel efficiency {one.wall / (2 * two.wall):.2f} (target >= 0.8; "
            f"{each[0]:.2f}-{each[-1]:.2f} pairing each round's runs); the driver's share bounds "
            f"it at {max(w, d) / (w + d):.2f} on 2 cores (max(w, d) / (w + d))"
        )
        spent = two.driver + two.workers  # what capacity 2 cost, counted in CPU
        print(
            f"counted in CPU, which the load changes less than wall time: capacity 2 spent "
            f"{spent / (d + w):.2f}x the CPU of capacity 1, so on an idle 2-core machine the "
            f"efficiency is at most {max(w, d) / spent:.2f} (max(w1, d1) / (w2 + d2))"
        )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
