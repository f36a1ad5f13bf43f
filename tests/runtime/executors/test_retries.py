"""A pool worker killed with SIGKILL mid-experiment: its sessions go on elsewhere, nothing
acknowledged lost, nothing duplicated, and the evidence verifies."""

from __future__ import annotations

import collections
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticEnvironment, SyntheticObservation, SyntheticScenarioInput
from envharness.records import Outcome, RunnerRef, SegmentStarted, SessionStatus
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.executors.retries import MAX_ATTEMPTS
from envharness.store import Store, read_store

pytestmark = pytest.mark.anyio

IN_A_WORKER = "pool_worker" in sys.argv[0]
TURNS = 60

SCENARIOS = [
    Scenario(id=f"start-{total}", input=SyntheticScenarioInput(starting_total=total))
    for total in (-3, 0, 3, 5)
]


class PacedAgent:
    """Steps toward zero; in a pool worker it takes a little while per turn, so that a worker
    killed after a few turns still has sessions in it."""

    implementation = "paced-agent@1"

    async def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if IN_A_WORKER:
            await anyio.sleep(0.005)
        return {"value": (observation.total < 0) - (observation.total > 0)}


class DoomedAgent:
    """Kills the worker it runs in at its third turn, every time."""

    implementation = "doomed-agent@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if IN_A_WORKER and observation.turn >= 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"value": 0}


def harness(store: Path, agent: Any) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": agent}, max_concurrency=4
    )


async def chain(store: Store, session_id: str) -> list[Any]:
    return [record async for record in store.records(session_id)]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawns processes: one backend
async def test_a_killed_worker_s_sessions_go_on_from_their_last_committed_turn(
    tmp_path: Path,
) -> None:
    store_path = tmp_path / "s"
    run = harness(store_path, PacedAgent).experiment(
        "sweep", SCENARIOS, turns=TURNS, executor=ProcessPoolExecutor(workers=2)
    )
    killed: list[int] = []
    reached = anyio.Event()

    def progress(session_id: str, turn: int, planned: int) -> None:
        if turn >= 5:
            reached.set()

    async def kill_a_worker(session_ids: list[str]) -> None:
        await reached.wait()
        store = await read_store(store_path)
        for info in await store.sessions():
            if info.status == "running":
                records = await chain(store, info.id)
                runner = next(
                    r.payload.runner for r in records if isinstance(r.payload, SegmentStarted)
                )
                assert isinstance(runner, RunnerRef)
                killed.append(runner.pid)
                os.kill(runner.pid, signal.SIGKILL)
                return

    async with anyio.create_task_group() as group:
        group.start_soon(kill_a_worker, [])
        result = await run.run(progress=progress)
    assert killed
    assert (result.status, result.completed) == ("completed", len(SCENARIOS))
    store = await read_store(store_path)
    assert (await store.verify()).ok
    retried = 0
    for session in result.sessions:
        records = await chain(store, session.result.id)
        segments = [r.payload for r in records if isinstance(r.payload, SegmentStarted)]
        turns = collections.Counter(r.turn for r in records if isinstance(r.payload, Outcome))
        # every turn once: nothing acknowledged was lost, nothing written twice
        assert sorted(turns) == list(range(1, session.result.turns_completed + 1))
        assert set(turns.values()) == {1}
        if segments[0].runner.pid not in killed:
            assert len(segments) == 1
            continue
        retried += 1
        statuses = [r.payload for r in records if isinstance(r.payload, SessionStatus)]
        assert [s.status for s in statuses] == ["running", "interrupted", "running", "completed"]
        assert statuses[1].reason is not None
        assert "was killed by signal 9" in statuses[1].reason
        _, second = segments
        assert (second.segment, second.cause, second.previous) == (1, "resume", 0)
        assert second.runner.pid not in killed
        # it went on after the last turn its lost attempt committed (0: from the start)
        lost = next(i for i, r in enumerate(records) if r.payload == statuses[1])
        committed = {r.turn for r in records[:lost] if isinstance(r.payload, Outcome)}
        assert second.turn == len(committed) < TURNS
    assert retried >= 1


@pytest.mark.parametrize("anyio_backend", ["trio"])  # spawns processes: one backend
async def test_a_session_that_keeps_killing_its_worker_ends_failed_with_the_reasons(
    tmp_path: Path,
) -> None:
    store_path = tmp_path / "s"
    run = harness(store_path, DoomedAgent).experiment(
        "doomed", SCENARIOS[:1], turns=10, executor=ProcessPoolExecutor(workers=1)
    )
    result = await run.run(progress=lambda *_: None)
    [session] = result.sessions
    assert (result.status, result.failed, session.result.status) == ("completed", 1, "failed")
    assert session.result.reason is not None
    assert session.result.reason.startswith(f"its worker was lost {MAX_ATTEMPTS} times: ")
    assert session.result.reason.count("was killed by signal 9") == MAX_ATTEMPTS
    store = await read_store(store_path)
    assert (await store.verify()).ok
    records = await chain(store, session.result.id)
    segments = [r.payload for r in records if isinstance(r.payload, SegmentStarted)]
    assert [s.segment for s in segments] == list(range(MAX_ATTEMPTS))
    assert (await store.session(session.result.id)).status == "failed"
