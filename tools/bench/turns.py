"""Per-turn overhead of the runtime for an in-process agent, against a raw loop.

What it measures, in turns per second, for a trivial environment (the synthetic running total
from ``envharness.fixtures``) with one participant:

- raw: a loop that calls the same methods directly — ``initialize``, then per turn
  ``observe``, ``act``, the action's conversion to the environment's action type, ``resolve``
  — and records nothing;
- harness: ``AsyncEnvironmentHarness.run`` doing the same turns with everything recorded:
  sealed, hash-chained records, state blobs, and a durable commit acknowledged per turn;

each with a sync agent and an async agent, for one session and for ``--sessions`` concurrent
sessions (``harness.run`` calls in one task group; the raw loops in a task group likewise).
It prints both rates, the ratio harness/raw, the commits per turn and records per turn.

Run it from the repository root::

    .venv/bin/python tools/bench/turns.py                 # 1,000 turns per session
    .venv/bin/python tools/bench/turns.py --turns 200     # quicker
    .venv/bin/python tools/bench/turns.py --backend trio

Each configuration writes a fresh store in a temporary directory (``--directory`` to choose the
disk), removed afterwards. The ratio is the interesting number: the raw loop does almost
nothing, so it shows what recording and acknowledging one turn costs, not what an agent costs.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec
from _counting import CommitCounter  # tools/bench/ is sys.path[0] when run as a script

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAction, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store.database import DATABASE_NAME, connect

SCENARIO = Scenario(id="bench", input=SyntheticScenarioInput(starting_total=0))


class SyncAgent:
    implementation = "bench-sync@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1 if observation.total <= 0 else -1}


class AsyncAgent:
    implementation = "bench-async@1"

    async def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1 if observation.total <= 0 else -1}


async def raw_session(agent: Any, turns: int) -> None:
    """The same environment and agent calls as a recorded session, recording nothing."""
    environment = SyntheticEnvironment()
    state = environment.initialize(SCENARIO.input, Random(0), {"alice": "agent"})
    is_async = isinstance(agent, AsyncAgent)
    for _ in range(turns):
        observation = environment.observe(state, "alice")
        raw = await agent.act(observation) if is_async else agent.act(observation)
        action = msgspec.convert(raw, SyntheticAction)
        state = environment.resolve(state, {"alice": action}).state


async def run_raw(agent_type: type[Any], sessions: int, turns: int) -> float:
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(raw_session, agent_type(), turns)
    return time.perf_counter() - started


async def run_harness(store: Path, agent_type: type[Any], sessions: int, turns: int) -> float:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": agent_type}
    )
    failures: list[str] = []

    async def one() -> None:
        session = await harness.run(SCENARIO, turns=turns)
        if session.status != "completed" or session.turns_completed != turns:
            failures.append(f"{session.id}: {session.status} {session.reason}")

    started = time.perf_counter()
    # One open harness: one writer for all sessions, so concurrent turns share commits.
    async with harness, anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(one)
    seconds = time.perf_counter() - started
    if failures:
        raise SystemExit(f"a benchmark session did not complete: {failures}")
    return seconds


def durable_commits_per_second(store: Path, rows: int, count: int = 300) -> float:
    """The floor under any recorded turn: raw sqlite3 commits of ``rows`` records each, with
    the store's schema and pragmas (WAL, ``synchronous=FULL``) on the same disk."""
    connection = connect(store, create=True)
    insert = (
        "INSERT INTO records (session_id, seq, kind, turn, participant, at, payload, prev,"
        " digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    try:
        started = time.perf_counter()
        for index in range(count):
            batch = [
                ("ses_floor", index * rows + k, "log", 1, None, "at", b"{}", None, "d")
                for k in range(rows)
            ]
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(insert, batch)
            connection.execute("COMMIT")
        return count / (time.perf_counter() - started)
    finally:
        connection.close()
        shutil.rmtree(store, ignore_errors=True)


def records_in(store: Path) -> int:
    with sqlite3.connect(store / DATABASE_NAME) as connection:
        count = int(connection.execute("SELECT count(*) FROM records").fetchone()[0])
    connection.close()
    return count


def measure(
    base: Path, backend: str, agent_type: type[Any], sessions: int, turns: int
) -> dict[str, float]:
    store = base / f"{agent_type.__name__}-{sessions}"

    def go(function: Callable[..., Awaitable[float]], *args: Any) -> float:
        return anyio.run(function, *args, backend=backend)

    raw_seconds = go(run_raw, agent_type, sessions, turns)
    with CommitCounter() as counter:
        harness_seconds = go(run_harness, store, agent_type, sessions, turns)
    total = sessions * turns
    result = {
        "raw": total / raw_seconds,
        "harness": total / harness_seconds,
        "commits_per_turn": counter.commits / total,
        "records_per_turn": records_in(store) / total,
    }
    shutil.rmtree(store, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns per session (1000)")
    parser.add_argument("--sessions", type=int, default=16, help="concurrent sessions (16)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--directory", type=Path, default=None, help="where stores go")
    options = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="envharness-bench-", dir=options.directory))
    print(
        f"{options.turns} turns per session, 1 participant, backend {options.backend}; "
        "rates in turns/s (all sessions together)"
    )
    header = (
        f"{'agent':<6} {'sessions':>8} {'raw':>12} {'harness':>10} {'ratio':>8}"
        f" {'commits/turn':>13} {'records/turn':>13}"
    )
    print(header)
    try:
        for agent_type, label in ((SyncAgent, "sync"), (AsyncAgent, "async")):
            for sessions in (1, options.sessions):
                result = measure(base, options.backend, agent_type, sessions, options.turns)
                print(
                    f"{label:<6} {sessions:>8} {result['raw']:>12,.0f} {result['harness']:>10,.0f}"
                    f" {result['harness'] / result['raw']:>8.4f}"
                    f" {result['commits_per_turn']:>13.3f} {result['records_per_turn']:>13.2f}"
                )
        floor = durable_commits_per_second(base / "floor", rows=4)
        print(
            f"for scale: one durable commit of 4 records on this disk alone (raw sqlite3) "
            f"allows {floor:,.0f} commits/s"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
