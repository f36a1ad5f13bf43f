"""A pool worker killed with SIGKILL mid-experiment: its sessions go on elsewhere, nothing
acknowledged lost, nothing duplicated, and the evidence verifies."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticObservation,
    SyntheticScenarioInput,
)
from envharness.records import Outcome, RunnerRef, SegmentStarted, SessionStatus
from envharness.runtime import session as session_module
from envharness.runtime.executors import ProcessPoolExecutor, RemoteExecutor
from envharness.runtime.executors import worker as worker_module
from envharness.runtime.executors.queueing import send_promptly
from envharness.runtime.executors.retries import MAX_ATTEMPTS
from envharness.runtime.executors.worker import serve
from envharness.store import Store, read_store
from tests.runtime.executors._agents import IN_A_WORKER, PacedAgent
from tests.runtime.executors._evidence import nothing_lost_nothing_duplicated

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """One backend, so that one open pool serves both tests (each kills some of its workers,
    which the pool replaces): the retries are the driver's, the same on either."""
    return "asyncio"


@pytest.fixture(scope="module")
async def pool(anyio_backend: str) -> AsyncIterator[ProcessPoolExecutor]:
    async with ProcessPoolExecutor(workers=2) as opened:
        yield opened


TURNS = 60

SCENARIOS = [
    Scenario(id=f"start-{total}", input=SyntheticScenarioInput(starting_total=total))
    for total in (-3, 0, 3, 5)
]


class DoomedAgent:
    """Kills the worker it runs in at its third turn, every time; told each outcome, so that
    its first turns are committed before (feedback waits for the commit of the turn)."""

    implementation = "doomed-agent@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if IN_A_WORKER and observation.turn >= 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"value": 0}

    def feedback(self, turn: int, outcome: Any, blocked: str | None, /) -> None:
        pass


def harness(store: Path, agent: Any) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": agent}, max_concurrency=4
    )


async def chain(store: Store, session_id: str) -> list[Any]:
    return [record async for record in store.records(session_id)]


async def test_a_killed_worker_s_sessions_go_on_from_their_last_committed_turn(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    store_path = tmp_path / "s"
    run = harness(store_path, PacedAgent).experiment("sweep", SCENARIOS, turns=TURNS, executor=pool)
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
    for each in await nothing_lost_nothing_duplicated(
        store_path, result, killed, "was killed by signal 9"
    ):
        # it went on after the last turn its lost attempt committed (0: from the start)
        lost = next(i for i, r in enumerate(each.records) if r.payload == each.lost)
        committed = {r.turn for r in each.records[:lost] if isinstance(r.payload, Outcome)}
        assert each.second.turn == len(committed) < TURNS


async def test_a_session_that_keeps_killing_its_worker_ends_failed_with_the_reasons(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    store_path = tmp_path / "s"
    run = harness(store_path, DoomedAgent).experiment(
        "doomed", SCENARIOS[:1], turns=10, executor=pool
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


# -- a worker on another host ------------------------------------------------------------------

ELSEWHERE = RunnerRef(host="another-host.invalid", pid=4242, started="2026-01-01T00:00:00Z")
"""A runner this machine cannot see: ``is_gone`` says it may still run, whatever happens."""


class HeldAgent(SyntheticAgent):
    """Waits for ever on its first attempt's first turn (until its worker is cut off); quick
    on the next attempt."""

    holding = True

    async def act(self, observation: SyntheticObservation) -> dict[str, int]:  # type: ignore[override]
        if HeldAgent.holding:
            await anyio.sleep_forever()
        return super().act(observation)


class _End:
    """One end of an in-memory channel."""

    def __init__(
        self, send: MemoryObjectSendStream[bytes], receive: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self.sending = send
        self._receive = receive
        self._lock = anyio.Lock(fast_acquire=True)

    async def send(self, frame: bytes) -> None:
        await self.send_many([frame])

    async def send_many(self, frames: list[bytes]) -> None:
        async with self._lock:  # in order, none of another sender's between them
            for frame in frames:
                await send_promptly(self.sending, frame)

    async def receive(self) -> bytes:
        return await self._receive.receive()

    async def aclose(self) -> None:
        await self.sending.aclose()
        await self._receive.aclose()


class InProcessSpawner:
    """Workers that are tasks of this process, each serving its end of an in-memory channel;
    :meth:`cut_off` ends one as a lost host does: its channel breaks, its sessions never
    report again."""

    kind = "remote"

    def __init__(self, group: TaskGroup) -> None:
        self._group = group
        self.workers: list[tuple[_End, _End, anyio.CancelScope]] = []

    async def start(self, index: int) -> _End:
        to_worker, worker_in = anyio.create_memory_object_stream[bytes](64)
        to_driver, driver_in = anyio.create_memory_object_stream[bytes](64)
        driver, worker = _End(to_worker, driver_in), _End(to_driver, worker_in)
        scope = anyio.CancelScope()
        self.workers.append((driver, worker, scope))

        async def run() -> None:
            try:
                with scope:
                    await serve(worker)
            finally:
                await worker.aclose()  # as a pool worker's entry point does

        self._group.start_soon(run)
        return driver

    def cut_off(self, index: int) -> None:
        driver, worker, scope = self.workers[index]
        driver.sending.close()
        worker.sending.close()
        scope.cancel()

    async def aclose(self) -> None:
        for driver, _, scope in self.workers:
            scope.cancel()
            await driver.aclose()


@pytest.mark.parametrize(
    ("declared", "taken_over"),
    [
        (ELSEWHERE, True),
        (msgspec.structs.replace(ELSEWHERE, pid=ELSEWHERE.pid + 1), False),
        (msgspec.structs.replace(ELSEWHERE, started="2026-01-01T00:00:01Z"), False),
    ],
    ids=["the-lost-runner", "another-pid", "another-start"],
)
async def test_a_session_on_a_lost_worker_of_another_host_is_taken_over_only_from_that_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, declared: RunnerRef, taken_over: bool
) -> None:
    """The driver knows the worker it lost is gone (its channel broke) where nothing on this
    machine could tell; it vouches for that exact runner, never for another."""
    monkeypatch.setattr(session_module, "this_process", lambda: ELSEWHERE)  # the owner recorded
    monkeypatch.setattr(worker_module, "this_process", lambda: declared)  # what the worker says
    monkeypatch.setattr(HeldAgent, "holding", True)
    store_path = tmp_path / "s"
    started = anyio.Event()

    async with anyio.create_task_group() as group:
        spawner = InProcessSpawner(group)
        executor = RemoteExecutor(lambda: spawner, 1, "remote")
        run = harness(store_path, HeldAgent).experiment(
            "x", SCENARIOS[:1], turns=3, executor=executor
        )

        async def cut_off_once_started() -> None:
            await started.wait()  # its start is committed (progress comes after it)
            HeldAgent.holding = False
            spawner.cut_off(0)

        group.start_soon(cut_off_once_started)
        with anyio.fail_after(60):
            if taken_over:
                result = await run.run(progress=lambda *_: started.set())
            else:
                with pytest.raises(ConfigurationError, match="a live runner is never taken over"):
                    await run.run(progress=lambda *_: started.set())
        group.cancel_scope.cancel()
    store = await read_store(store_path)
    assert (await store.verify()).ok
    [info] = await store.sessions()
    if not taken_over:
        assert info.status == "running"  # still its runner's: nothing was written over it
        return
    assert (result.status, result.completed) == ("completed", 1)
    records = await chain(store, info.id)
    statuses = [r.payload for r in records if isinstance(r.payload, SessionStatus)]
    assert [s.status for s in statuses] == ["running", "interrupted", "running", "completed"]
    assert statuses[1].reason is not None
    assert "remote worker 0 died" in statuses[1].reason
