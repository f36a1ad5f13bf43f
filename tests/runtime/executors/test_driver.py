"""The driver's side of the protocol against a scripted worker, over an in-memory channel:
what a real worker never does (a frame for an attempt given up on) is refused, not committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import RecordRow
from envharness.runtime.executors import RemoteExecutor, WorkerError
from envharness.runtime.executors.frames import (
    Ack,
    Batch,
    Close,
    Ended,
    Named,
    Open,
    Ready,
    Run,
    decode_driver_frame,
    encode,
)
from envharness.runtime.executors.queueing import send_promptly
from envharness.store import read_store

pytestmark = pytest.mark.anyio


class MemoryChannel:
    """One end of an in-memory channel: frames in order, each delivered once."""

    def __init__(
        self, send: MemoryObjectSendStream[bytes], receive: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._send = send
        self._receive = receive
        self._sending = anyio.Lock(fast_acquire=True)

    async def send(self, frame: bytes) -> None:
        await self.send_many([frame])

    async def send_many(self, frames: list[bytes]) -> None:
        """In order, none of another sender's between them (as a worker's end keeps them)."""
        async with self._sending:
            for frame in frames:
                await send_promptly(self._send, frame)

    async def receive(self) -> bytes:
        return await self._receive.receive()

    async def aclose(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


class ScriptedSpawner:
    """Starts one 'worker': the test's end of the channel, driven by hand."""

    kind = "scripted"

    def __init__(self) -> None:
        self.workers: list[MemoryChannel] = []
        self.started = anyio.Event()

    async def start(self, index: int) -> MemoryChannel:
        to_worker, worker_in = anyio.create_memory_object_stream[bytes](16)
        to_driver, driver_in = anyio.create_memory_object_stream[bytes](16)
        self.workers.append(MemoryChannel(to_driver, worker_in))
        self.started.set()
        return MemoryChannel(to_worker, driver_in)

    async def aclose(self) -> None:
        for worker in self.workers:
            await worker.aclose()


def row(session_id: str) -> RecordRow:
    return RecordRow(session_id, 0, "log", None, None, "2026-01-01T00:00:00Z", b"{}", None, "0")


async def test_a_batch_of_an_attempt_the_driver_does_not_run_is_refused(tmp_path: Path) -> None:
    spawner = ScriptedSpawner()
    harness = AsyncEnvironmentHarness(
        tmp_path / "s", environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
    )
    scenario = Scenario(id="only", input=SyntheticScenarioInput(starting_total=0))
    run = harness.experiment(
        "x", [scenario], turns=1, executor=RemoteExecutor(lambda: spawner, 1, "scripted")
    )
    said: list[Any] = []

    async def worker() -> None:
        await spawner.started.wait()
        channel = spawner.workers[0]
        assert isinstance(decode_driver_frame(await channel.receive()), Open)
        await channel.send(encode(Ready(1)))
        started = decode_driver_frame(await channel.receive())
        assert isinstance(started, Run)
        await channel.send(encode(Named(started.key, "ses_fenced")))
        # A batch under a key the driver never gave (a dead attempt's, arriving late).
        await channel.send(encode(Batch(started.key + 1, 7, [row("ses_fenced")], {})))
        said.append(decode_driver_frame(await channel.receive()))
        await channel.send(encode(Ended(started.key, status="failed", reason="scripted")))
        assert isinstance(decode_driver_frame(await channel.receive()), Close)
        await channel.aclose()  # as a worker does once it is told to close

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
        result = await run.run()
    [refused] = said
    assert isinstance(refused, Ack)
    assert refused.batch == 7
    assert refused.error is not None
    assert refused.error.startswith("refused: this attempt of the session was given up on")
    assert [s.result.status for s in result.sessions] == ["failed"]
    store = await read_store(tmp_path / "s")
    assert [info.id for info in await store.sessions()] == []  # nothing of it was committed


async def test_a_worker_that_answers_something_else_than_ready_is_refused(
    tmp_path: Path,
) -> None:
    spawner = ScriptedSpawner()
    harness = AsyncEnvironmentHarness(
        tmp_path / "s", environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
    )
    scenario = Scenario(id="only", input=SyntheticScenarioInput(starting_total=0))
    run = harness.experiment(
        "x", [scenario], turns=1, executor=RemoteExecutor(lambda: spawner, 1, "scripted")
    )

    async def worker() -> None:
        await spawner.started.wait()
        channel = spawner.workers[0]
        await channel.receive()
        await channel.send(encode(Named(0, "ses_early")))

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
        with pytest.raises(WorkerError, match="scripted worker 0 answered Named instead of ready"):
            await run.run()
