"""Scale-out: sessions/s of a CPU-bound experiment in this process and in 1 and 2 workers.

What it measures, for ``--sessions`` sessions of ``--turns`` turns (one participant, the
synthetic agent, and :mod:`_cpu_bound`'s environment, whose every turn holds the GIL for
about 1.5 ms of pure-Python work), each run into a fresh store with ``max_concurrency`` =
``--concurrency``:

- here: the default executor, every session on this process's event loop (one core);
- pool N: ``ProcessPoolExecutor(workers=N)`` for N = 1 and 2; with ``--ray``, also
  ``RayExecutor(workers=N)`` on a local Ray of two CPUs that this process starts once, before
  any clock, with its actors started by an open executor before the run (an actor's start,
  ~1-2 s, would swamp a few seconds of sessions; the pool's "overall" rate counts its workers').

For each it prints the wall time of ``experiment.run()`` and two rates: *overall* (the whole
run, worker start included) and *steady* (from the first session's start to the end, which is
what a long experiment sees), then this process's CPU time per session — the driver's share:
committing every worker's records through the one writer — and the rate that share alone would
allow (the single writer's ceiling on this machine), and the workers' CPU time per session (all
of them together: the pool's with their start, Ray's actors' read from ``/proc`` around the
run, since they are the raylet's children, not this process's); for Ray also the actor calls
the driver made a session, pushes and pulls (each costs the driver about half a millisecond of
CPU, more than the frames it carries). The ratio
of 2 workers to 1 (steady rates, same run) is the figure issue 14 sets a target for: at least
1.6x on a 2-core machine. With the driver at ``d`` and a worker at ``w`` of CPU per session, one
worker is bound by ``max(w, d)`` and two on two cores by ``w + d`` shared between both cores, so
the ratio cannot pass ``2 max(w, d) / (w + d)``: printed too, it says whether the environment is
CPU-bound enough for the target to be reachable at all. The load average before and after is
printed: figures taken beside other work measure the share of the cores the run got, not how it
scales.

Run it from the repository root::

    .venv/bin/python tools/bench/scale.py                    # 200 sessions of 5 turns
    .venv/bin/python tools/bench/scale.py --sessions 400 --ray
    .venv/bin/python tools/bench/scale.py --work 100000      # a heavier environment

With ``--optimizer`` it measures the optimizer instead: one iteration of K = 8 distinct
candidates over 32 support-desk tickets (``tools/bench/optimizer.py``'s capacity run, local
sandbox) at capacity 1 and 2, with the reruns in this process, in a process pool of one worker
per rerun (each rerun starts its own), and in an open pool (``async with``) that keeps its
workers from one rerun to the next, and prints the iteration's wall time, the sum of the reruns' own
times, parallel efficiency (that sum / (wall x capacity)) and the speed-up of capacity 2 over
capacity 1.

On a machine shared with other work the absolute rates swing with the load; the ratios, taken
in one run, are the steadier figures.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
from _cpu_bound import WORK, CpuBoundEnvironment  # tools/bench/ is sys.path[0] as a script

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticScenarioInput
from envharness.runtime.executors import Executor, ProcessPoolExecutor

Make = Callable[[], Executor | None]
RAY_CPUS = 2
"""The local Ray cluster ``--ray`` starts: one actor per CPU at most."""


class Timing:
    """One run: its wall time, when its first session started, and this process's CPU."""

    def __init__(self, name: str, sessions: int) -> None:
        self.name = name
        self.sessions = sessions
        self.started = 0.0
        self.first: float | None = None
        self.ended = 0.0
        self.cpu = 0.0
        self.workers_cpu = 0.0
        """CPU time of the workers this run started and ended (their start included)."""
        self.calls: dict[str, int] = {}
        """Ray actor calls the driver made during the run, by kind (Ray runs only)."""

    def saw(self, session_id: str, turn: int, planned: int) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    @property
    def overall(self) -> float:
        return self.sessions / (self.ended - self.started)

    @property
    def steady(self) -> float:
        first = self.first if self.first is not None else self.started
        return self.sessions / (self.ended - first)

    @property
    def driver_cpu_per_session(self) -> float:
        return self.cpu / self.sessions

    @property
    def workers_cpu_per_session(self) -> float:
        return self.workers_cpu / self.sessions


def actors_cpu() -> float:
    """CPU time of the worker actors of the Ray this process started (its raylet's children,
    so this process's descendants: another cluster on the machine is not counted), read from
    ``/proc`` (Linux)."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            actor = (entry / "comm").read_text().startswith("ray::WorkerAct")
        except OSError:  # it ended meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        if actor:
            used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid, seconds in used.items():
        ancestor = parents.get(pid, 0)
        while ancestor > 1 and ancestor != os.getpid():
            ancestor = parents.get(ancestor, 0)
        if ancestor == os.getpid():
            total += seconds
    return total


class CallCounts:
    """Counts the driver's actor calls by wrapping :class:`RayChannel`'s two call sites (a
    bench's instrument: the executor itself keeps no counters)."""

    def __init__(self) -> None:
        self.counts = {"push": 0, "pull": 0}

    def install(self) -> None:
        from envharness.runtime.executors.ray_channel import RayChannel

        pull = "_collect" if hasattr(RayChannel, "_collect") else "_pull"  # before: _pull
        for kind, name in (("push", "_push"), ("pull", pull)):
            setattr(RayChannel, name, self._counting(kind, getattr(RayChannel, name)))

    def _counting(self, kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[kind] += 1
            return method(*args, **kwargs)

        return counted

    def now(self) -> dict[str, int]:
        return dict(self.counts)


CALLS = CallCounts()


def children_cpu() -> float:
    """CPU time of this process's children that have ended (an executor's workers end, and are
    waited for, before its experiment's ``run`` returns)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def measure(
    name: str,
    make: Make,
    directory: Path,
    sessions: int,
    turns: int,
    concurrency: int,
    work: int = WORK,
) -> Timing:
    store = directory / f"{name.replace(' ', '-')}-{time.monotonic_ns()}"
    harness = AsyncEnvironmentHarness(
        store,
        environment=functools.partial(CpuBoundEnvironment, work),
        agents={"agent": SyntheticAgent},
        max_concurrency=concurrency,
    )
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i % 7 - 3))
        for i in range(sessions)
    ]
    timing = Timing(name, sessions)
    executor = make()
    async with contextlib.AsyncExitStack() as stack:
        if name.startswith("ray"):
            await stack.enter_async_context(cast(Any, executor))  # its actors start here
            workers_cpu_now = actors_cpu
        else:
            workers_cpu_now = children_cpu
        experiment = harness.experiment(name, scenarios, turns=turns, executor=executor)
        calls = CALLS.now()
        cpu, workers_cpu = time.process_time(), workers_cpu_now()
        timing.started = time.perf_counter()
        result = await experiment.run(progress=timing.saw)
        timing.ended = time.perf_counter()
        timing.cpu = time.process_time() - cpu
        timing.workers_cpu = workers_cpu_now() - workers_cpu
        timing.calls = {kind: CALLS.now()[kind] - calls[kind] for kind in calls}
    if result.completed != sessions:
        raise SystemExit(f"{name}: only {result.completed} of {sessions} sessions completed")
    return timing


async def optimizer_iteration(
    directory: Path, capacity: int, executor: Executor | None
) -> tuple[float, float]:
    """One optimizer iteration's wall time and the sum of its candidates' rerun times."""
    from optimizer import candidate_reruns, distinct_answers  # tools/bench/optimizer.py

    from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
    from envharness.optimizer import HarnessOptimizer, OptimizationConfig, ScriptedEngineer

    store = directory / f"optimizer-{capacity}-{executor!r}-{time.monotonic_ns()}"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}, max_concurrency=4
    )
    config = OptimizationConfig(
        candidates=8, iterations=1, turns=8, capacity=capacity, sandbox="local", executor=executor
    )
    engineer = ScriptedEngineer(distinct_answers(8))
    result = await HarnessOptimizer(harness, engineer, config=config).optimize_async(tickets(32))
    if result.accepted_version != "harness-v1":
        raise SystemExit(f"the optimizer accepted {result.accepted_version}, not harness-v1")
    reruns = await candidate_reruns(store, result.run_id)
    return result.iterations[0].seconds, sum(reruns)


async def optimizer_main(args: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp(prefix="envharness-scale-", dir=args.directory))
    print("one optimizer iteration: K=8 candidates x 32 tickets, local sandbox")
    print(f"{'reruns in':<10} {'capacity':>8} {'wall s':>7} {'reruns s':>9} {'efficiency':>10}")
    try:
        for name in ("process", "pool 1", "open pool"):
            walls = {}
            for capacity in (1, 2):
                if name == "open pool":  # workers started once, kept from rerun to rerun
                    async with ProcessPoolExecutor(workers=1) as pool:
                        wall, reruns = await optimizer_iteration(directory, capacity, pool)
                else:
                    executor = ProcessPoolExecutor(workers=1) if name == "pool 1" else None
                    wall, reruns = await optimizer_iteration(directory, capacity, executor)
                walls[capacity] = wall
                print(
                    f"{name:<10} {capacity:>8} {wall:>7.2f} {reruns:>9.2f} "
                    f"{reruns / (wall * capacity):>10.2f}"
                )
            print(f"{name}: capacity 2 / capacity 1 = {walls[1] / walls[2]:.2f}x speed-up")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def ray_executor(workers: int) -> Executor:
    from envharness.runtime.executors.ray import RayExecutor  # only with --ray

    return RayExecutor(workers=workers)


async def main(args: argparse.Namespace) -> None:
    runs: list[tuple[str, Make]] = [
        ("here", lambda: None),
        ("pool 1", lambda: ProcessPoolExecutor(workers=1)),
        ("pool 2", lambda: ProcessPoolExecutor(workers=2)),
    ]
    if args.ray:
        runs += [("ray 1", lambda: ray_executor(1)), ("ray 2", lambda: ray_executor(2))]
    directory = Path(tempfile.mkdtemp(prefix="envharness-scale-", dir=args.directory))
    print(
        f"{args.sessions} sessions x {args.turns} turns, CPU-bound environment "
        f"({args.work:,} loop iterations a turn), max_concurrency {args.concurrency}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'executor':<8} {'wall s':>7} {'overall/s':>10} {'steady/s':>9} "
        f"{'driver CPU ms/session':>22} {'writer ceiling/s':>17} {'workers CPU ms/session':>23}"
    )
    timings: dict[str, Timing] = {}
    try:
        for name, make in runs:
            timing = await measure(
                name, make, directory, args.sessions, args.turns, args.concurrency, args.work
            )
            timings[name] = timing
            per = timing.driver_cpu_per_session
            here = name == "here"
            workers = f"{timing.workers_cpu_per_session * 1e3:.2f}" if not here else "-"
            print(
                f"{name:<8} {timing.ended - timing.started:>7.2f} {timing.overall:>10.1f} "
                f"{timing.steady:>9.1f} {per * 1e3:>22.2f} {1 / per:>17.0f} "
                f"{workers:>23}"
            )
            if name.startswith("ray"):
                said = ", ".join(
                    f"{count / args.sessions:.2f} {kind}es"
                    if kind == "push"
                    else f"{count / args.sessions:.2f} {kind}s"
                    for kind, count in timing.calls.items()
                )
                total = sum(timing.calls.values()) / args.sessions
                print(f"{'':<8} actor calls a session: {total:.2f} ({said})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for kind in ("pool", "ray"):
        one, two = timings.get(f"{kind} 1"), timings.get(f"{kind} 2")
        if one is not None and two is not None:
            print(
                f"{kind}: 2 workers / 1 worker = {two.steady / one.steady:.2f}x steady, "
                f"{two.overall / one.overall:.2f}x overall (target >= 1.6x); "
                f"1 worker / here = {one.steady / timings['here'].steady:.2f}x"
            )
            driver, worker = one.driver_cpu_per_session, one.workers_cpu_per_session
            if kind == "pool":
                print(
                    f"{kind}: on 2 cores the driver's CPU allows at most "
                    f"{2 * max(driver, worker) / (driver + worker):.2f}x "
                    "(2 max(w, d) / (w + d), w counting the worker's start)"
                )
                continue
            # Ray's actors start before the clock, so the two-worker run's shares count too:
            # the driver's grows there, each link's calls carrying fewer sessions.
            shared = two.driver_cpu_per_session + two.workers_cpu_per_session
            print(
                f"{kind}: on 2 cores the driver's CPU allows at most "
                f"{2 * max(driver, worker) / (driver + worker):.2f}x (2 max(w, d) / (w + d)), "
                f"{2 * max(driver, worker) / shared:.2f}x with the two-worker run's w + d"
            )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--work", type=int, default=WORK, help="loop iterations a turn")
    parser.add_argument("--ray", action="store_true", help="also measure RayExecutor")
    parser.add_argument("--directory", default=None, help="where the stores are written")
    parser.add_argument("--optimizer", action="store_true", help="measure optimizer reruns")
    options = parser.parse_args()
    if options.ray and not options.optimizer:
        import logging

        import ray

        # Started here, not timed; held by this (the main) thread, as Ray's processes require.
        ray.init(
            num_cpus=RAY_CPUS,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        CALLS.install()
    anyio.run(optimizer_main if options.optimizer else main, options)
