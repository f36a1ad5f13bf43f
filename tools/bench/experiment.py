"""Experiment throughput: many short sessions as one experiment, against a bare loop.

What it measures, for ``--sessions`` short sessions (``--turns`` turns each, one participant,
an in-process sync agent, the trivial synthetic environment from ``envharness.fixtures``):

- experiment: ``harness.experiment(...)`` over ``--sessions`` scenarios x 1 trial (or fewer
  scenarios x ``--trials`` trials), run once for each ``--concurrency`` value
  (``max_concurrency=c``), each into a fresh store. The time covers building the experiment
  (planning and validating every session), opening the store, running every session with
  everything recorded — sealed, hash-chained records, state blobs, scores, a durable commit
  acknowledged per write — and recording the experiment's final status;
- bare: a loop calling the same environment and agent functions for the same sessions, in
  the same run — a fresh environment and agent per session, ``initialize``, then per turn
  ``observe``, ``act``, the action's conversion to the environment's action type,
  ``resolve`` — recording nothing (best of three runs).

Two more baselines, also measured in the same run, say what recording costs before any runtime
is involved — written by hand with the plain ``sqlite3`` module, no event loop, no checks:

- sealed: the bare loop plus sealing the records a session writes (4 per turn and 6 per session:
  canonical JSON, the timestamp, the sha256 chain) and encoding and hashing each state. This is
  the floor for any runtime that hash-chains every record in Python;
- recorded: sealed, plus inserting the rows and state blobs into a store with envharness's own
  schema, one durable transaction per 50 sessions (a hand-rolled group commit).

It prints sessions/s for each concurrency, µs/turn for the experiment and for each baseline and
the ratios: to the bare loop, and to the hand-written recorder — the target (issue 20) is at
most 1.5x the recorder at concurrency 1, 8 and 64. The process's CPU time per turn (all
threads) is printed beside the wall time, with its ratio to the recorder's CPU time: on a
machine shared with other work, wall times swing with the load and the CPU ratio is the
steadier one (wall time well above CPU time means waiting on fsync, or on other processes).
Beside it, the CPU time of the event loop's thread alone (``loop cpu``, µs/turn): the sessions,
the experiment and the journal's own task; the rest of the CPU time is the journal's thread
(SQLite) and worker threads.
Then the CPU time spent in Python's garbage collections (``gc cpu``, µs/turn, every thread):
sessions that wait for their commit keep their objects alive across collections, which the
hand-written recorder barely triggers (printed beside it). Last come the journal's commits
(transactions) and records per session.

Run it from the repository root::

    .venv/bin/python tools/bench/experiment.py                       # 1,000 sessions of 5 turns
    .venv/bin/python tools/bench/experiment.py --sessions 200        # quicker
    .venv/bin/python tools/bench/experiment.py --concurrency 1 16 --backend trio

Each store is written in a temporary directory (``--directory`` to choose the disk) and removed
afterwards. Absolute rates depend on the disk's fsync latency; the bare loop does almost nothing,
so the ratio shows what the runtime costs per turn, not what an agent costs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from random import Random

import anyio
import msgspec
from _counting import CommitCounter  # tools/bench/ is sys.path[0] when run as a script

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import (
    SyntheticAction,
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
)
from envharness.records import (
    ActionAttempted,
    ActionExecuted,
    Log,
    Observation,
    Outcome,
    RecordRow,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionStatus,
    canonical,
)
from envharness.store.database import DATABASE_NAME, connect

REFERENCE = "about 5-10 five-turn sessions/s on these machines (~17 fsynced commits per turn)"


def scenarios_for(sessions: int, trials: int) -> list[Scenario[SyntheticScenarioInput]]:
    count = max(1, sessions // trials)
    return [
        Scenario(id=f"s{index:05d}", input=SyntheticScenarioInput(starting_total=index % 7 - 3))
        for index in range(count)
    ]


class CollectionTimer:
    """The CPU time spent in garbage collections while it is entered (any thread's)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: dict[int, float] = {}

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started[threading.get_ident()] = time.thread_time()
        else:
            started = self._started.pop(threading.get_ident(), None)
            if started is not None:
                self.seconds += time.thread_time() - started

    def __enter__(self) -> CollectionTimer:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)


def bare_loop(scenarios: list[Scenario[SyntheticScenarioInput]], trials: int, turns: int) -> float:
    """The same environment and agent calls as the experiment's sessions, recording nothing."""
    roster = {"alice": "agent"}
    started = time.perf_counter()
    for scenario in scenarios:
        for trial in range(trials):
            environment = SyntheticEnvironment()
            agent = SyntheticAgent()
            state = environment.initialize(scenario.input, Random(trial), roster)
            for _ in range(turns):
                observation = environment.observe(state, "alice")
                action = msgspec.convert(agent.act(observation), SyntheticAction)
                state = environment.resolve(state, {"alice": action}).state
    return time.perf_counter() - started


RECORDER_GROUP = 50
"""Sessions per transaction in the hand-written recorder (the runtime holds turns up to 50 ms)."""


def recorded_loop(
    scenarios: list[Scenario[SyntheticScenarioInput]],
    trials: int,
    turns: int,
    store: Path | None,
) -> float:
    """The bare loop plus the evidence, by hand: sealed rows (and, given ``store``, written).

    Per turn the records a one-participant session writes (observation, attempted, executed,
    outcome) and the state blob; per session six more. The session's first record is a short
    ``log`` instead of the runtime's ``session.created`` with its whole configuration, which
    flatters this baseline a little.
    """
    connection = connect(store, create=True) if store is not None else None
    roster = {"alice": "agent"}
    rows: list[RecordRow] = []
    blobs: dict[str, bytes] = {}

    def keep(state: object) -> str:
        data = canonical(state)
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    started = time.perf_counter()
    count = 0
    for scenario in scenarios:
        for trial in range(trials):
            chain = SessionChain(f"bench_{count:012x}")
            count += 1
            environment = SyntheticEnvironment()
            agent = SyntheticAgent()
            rows.append(chain.seal(Log(message=f"{scenario.id} trial {trial}")))
            rows.append(chain.seal(SessionStatus(status="running")))
            state = environment.initialize(scenario.input, Random(trial), roster)
            rows.append(chain.seal(SegmentStarted(segment=0, state=keep(state))))
            for turn in range(1, turns + 1):
                observation = environment.observe(state, "alice")
                shown = msgspec.to_builtins(observation)
                rows.append(
                    chain.seal(Observation(observation=shown), turn=turn, participant="alice")
                )
                raw = agent.act(observation)
                attempted = ActionAttempted(action=raw, seconds=0.0)
                rows.append(chain.seal(attempted, turn=turn, participant="alice"))
                action = msgspec.convert(raw, SyntheticAction)
                resolution = environment.resolve(state, {"alice": action})
                state = resolution.state
                outcome = msgspec.to_builtins(resolution.outcomes.get("alice"))
                executed = ActionExecuted(action=raw, outcome=outcome)
                rows.append(chain.seal(executed, turn=turn, participant="alice"))
                ended = Outcome(state=keep(state), done=resolution.done, signals={})
                rows.append(chain.seal(ended, turn=turn))
            report = environment.score(state, scenario)
            rows.append(chain.seal(Score(version="1", metrics=dict(report.metrics))))
            rows.append(chain.seal(SessionStatus(status="completed")))
            rows.append(chain.seal(SegmentEnded(segment=0, status="completed")))
            if connection is not None and count % RECORDER_GROUP == 0:
                _write(connection, rows, blobs)
            if connection is None or count % RECORDER_GROUP == 0:
                rows, blobs = [], {}
    if connection is not None:
        _write(connection, rows, blobs)
        connection.close()
    return time.perf_counter() - started


def _write(connection: sqlite3.Connection, rows: list[RecordRow], blobs: dict[str, bytes]) -> None:
    connection.execute("BEGIN IMMEDIATE")
    connection.executemany(
        "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)", blobs.items()
    )
    connection.executemany(
        "INSERT INTO records (session_id, seq, kind, turn, participant, at, payload, prev, digest)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    connection.execute("COMMIT")


async def run_experiment(
    store: Path,
    scenarios: list[Scenario[SyntheticScenarioInput]],
    trials: int,
    turns: int,
    concurrency: int,
) -> float:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    started = time.perf_counter()
    experiment = harness.experiment(
        "bench", scenarios, turns=turns, trials=trials, seed=1, max_concurrency=concurrency
    )
    result = await experiment.run()
    seconds = time.perf_counter() - started
    if result.completed != result.total or result.total != len(scenarios) * trials:
        raise SystemExit(
            f"the benchmark experiment did not complete: {result.completed}/{result.total} "
            f"completed, {result.failed} failed, {result.stopped} stopped"
        )
    return seconds


def records_in(store: Path) -> int:
    with sqlite3.connect(store / DATABASE_NAME) as connection:
        count = int(connection.execute("SELECT count(*) FROM records").fetchone()[0])
    connection.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000, help="sessions (1000)")
    parser.add_argument("--turns", type=int, default=5, help="turns per session (5)")
    parser.add_argument(
        "--trials", type=int, default=1, help="trials per scenario (1: one scenario per session)"
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 64], help="max_concurrency (1 8 64)"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--directory", type=Path, default=None, help="where stores go")
    options = parser.parse_args()
    if min(options.sessions, options.turns, options.trials, *options.concurrency) < 1:
        parser.error("--sessions, --turns, --trials and --concurrency must be at least 1")

    scenarios = scenarios_for(options.sessions, options.trials)
    sessions = len(scenarios) * options.trials
    turns = sessions * options.turns
    bare_seconds = min(bare_loop(scenarios, options.trials, options.turns) for _ in range(3))
    bare_us = bare_seconds / turns * 1e6
    sealed_seconds = min(
        recorded_loop(scenarios, options.trials, options.turns, None) for _ in range(3)
    )
    sealed_us = sealed_seconds / turns * 1e6

    base = Path(tempfile.mkdtemp(prefix="envharness-bench-", dir=options.directory))
    cpu_started = time.process_time()
    with CollectionTimer() as recorder_collections:
        recorded_seconds = recorded_loop(
            scenarios, options.trials, options.turns, base / "recorded"
        )
    recorded_cpu_us = (time.process_time() - cpu_started) / turns * 1e6
    recorded_us = recorded_seconds / turns * 1e6
    print(
        f"{sessions} sessions ({len(scenarios)} scenarios x {options.trials} trial(s)) of "
        f"{options.turns} turns, 1 participant, in-process sync agent, backend {options.backend}"
    )
    print(
        f"bare loop: {bare_us:.2f} µs/turn, {sessions / bare_seconds:,.0f} sessions/s "
        "(same environment and agent calls, nothing recorded)"
    )
    print(
        f"sealed: {sealed_us:.2f} µs/turn, {sealed_us / bare_us:.1f}x bare (the bare loop plus "
        "sealing the same records by hand: the floor of hash-chaining every record)"
    )
    print(
        f"recorded: {recorded_us:.2f} µs/turn, {recorded_us / bare_us:.1f}x bare (sealed, plus "
        f"plain sqlite3 inserts into the same schema, one commit per {RECORDER_GROUP} sessions); "
        f"cpu {recorded_cpu_us:.2f} µs/turn, of which gc "
        f"{recorder_collections.seconds / turns * 1e6:.2f}"
    )
    print(
        f"{'concurrency':>11} {'seconds':>8} {'sessions/s':>11} {'µs/turn':>9} {'x bare':>8}"
        f" {'x recorded':>11} {'cpu µs/turn':>12} {'cpu x rec.':>11} {'loop cpu':>9}"
        f" {'gc cpu':>7} {'commits/session':>16}"
        f" {'records/session':>16}"
    )
    try:
        for concurrency in options.concurrency:
            store = base / f"c{concurrency}"
            cpu_started, loop_started = time.process_time(), time.thread_time()
            with CommitCounter() as counter, CollectionTimer() as collections:
                seconds = anyio.run(
                    run_experiment,
                    store,
                    scenarios,
                    options.trials,
                    options.turns,
                    concurrency,
                    backend=options.backend,
                )
            cpu_us = (time.process_time() - cpu_started) / turns * 1e6
            loop_us = (time.thread_time() - loop_started) / turns * 1e6
            us = seconds / turns * 1e6
            print(
                f"{concurrency:>11} {seconds:>8.2f} {sessions / seconds:>11,.1f} {us:>9,.0f}"
                f" {us / bare_us:>8,.0f} {us / recorded_us:>11,.1f} {cpu_us:>12,.0f}"
                f" {cpu_us / recorded_cpu_us:>11,.1f} {loop_us:>9,.0f}"
                f" {collections.seconds / turns * 1e6:>7,.1f}"
                f" {counter.commits / sessions:>16.2f}"
                f" {records_in(store) / sessions:>16.1f}"
            )
            shutil.rmtree(store, ignore_errors=True)
        print(f"for scale: the reference system managed {REFERENCE}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
