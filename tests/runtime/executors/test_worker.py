"""The worker's side of the protocol against a scripted driver, over an in-memory channel: a
driver that goes away mid-session leaves a worker that ends, never one that waits for ever."""

from __future__ import annotations

import dataclasses
import socket
import sys
from typing import Any

import anyio
import pytest

from envharness import Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import new_id
from envharness.runtime import recorder
from envharness.runtime.executors.frames import (
    PROTOCOL,
    Acks,
    Batch,
    Ended,
    Named,
    News,
    Open,
    Ready,
    Refused,
    Run,
    decode_worker_frame,
    encode,
)
from envharness.runtime.executors.recipe import pickled_recipe
from envharness.runtime.executors.streams import QUEUED_FRAMES, StreamChannel, socket_channel
from envharness.runtime.executors.worker import (
    HELD_FRAMES,
    HOLD_SECONDS,
    _Acknowledged,
    _Worker,
    serve,
)
from envharness.runtime.plan import PauseRequest, ProgressCallback, Resumption, SessionPlan
from envharness.runtime.session import SessionRunner
from tests.runtime.executors.test_driver import MemoryChannel

pytestmark = pytest.mark.anyio

SCENARIO = Scenario(id="long", input=SyntheticScenarioInput(starting_total=0))


def plan(
    scenario: Scenario[SyntheticScenarioInput],
    trial: int,
    seed: int,
    /,
    session_id: str | None = None,
) -> SessionPlan:
    """A session far longer than the test lets it run."""
    return SessionPlan(
        session_id=session_id or new_id("ses"),
        environment=SyntheticEnvironment(),
        agents={"agent": SyntheticAgent()},
        roster={"agent": "agent"},
        scenario=scenario,
        input=scenario.input,
        turns=1_000_000,
        seed=seed,
    )


def pair() -> tuple[MemoryChannel, MemoryChannel]:
    to_worker, worker_in = anyio.create_memory_object_stream[bytes](64)
    to_driver, driver_in = anyio.create_memory_object_stream[bytes](64)
    return MemoryChannel(to_worker, driver_in), MemoryChannel(to_driver, worker_in)


async def serving(worker: MemoryChannel) -> None:
    """The worker side, closing its end once it has served (as the pool's entry point does)."""
    try:
        await serve(worker)
    finally:
        await worker.aclose()


def opening(recipe: object) -> bytes:
    pickled = pickled_recipe(recipe, (), "test")
    return encode(Open(PROTOCOL, pickled.recipe, pickled.reopened, list(sys.path), False))


async def test_a_worker_whose_driver_goes_away_mid_session_ends() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(opening(((SCENARIO,), plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        assert isinstance(decode_worker_frame(await driver.receive()), Named)
        assert isinstance(decode_worker_frame(await driver.receive()), Batch)
        await driver.aclose()  # gone, with a batch never acknowledged
    # the task group ended: serve returned, its sessions ended with it


async def test_a_recipe_that_does_not_load_is_refused_naming_why() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(
            encode(Open(PROTOCOL, b"not a pickle", b"\x80\x05]\x94.", list(sys.path), False))
        )
        refused = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(refused, Refused)
    assert refused.message.startswith("the recipe did not load in the worker: UnpicklingError")


async def test_a_driver_of_another_protocol_is_refused() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(encode(Open(PROTOCOL + 1, b"", b"", [], False)))
        refused = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(refused, Refused)
    assert refused.message == f"this worker speaks protocol {PROTOCOL}, the driver {PROTOCOL + 1}"


def short_plan(
    scenario: Scenario[SyntheticScenarioInput],
    trial: int,
    seed: int,
    /,
    session_id: str | None = None,
) -> SessionPlan:
    return dataclasses.replace(plan(scenario, trial, seed, session_id=session_id), turns=3)


async def test_batches_acknowledged_together_in_one_frame_each_count_as_committed() -> None:
    driver, worker = pair()
    batches: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(opening(((SCENARIO,), short_plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        while not isinstance(frame := decode_worker_frame(await driver.receive()), Ended):
            if isinstance(frame, Batch):
                batches.append(frame.batch)
                # with one nobody waits for (a late acknowledgement is no error)
                await driver.send(encode(Acks([frame.batch, 10_000 + frame.batch])))
        await driver.aclose()
    assert batches
    assert (frame.status, frame.turns_completed, frame.crash) == ("completed", 3, None)


class TellingChannel(MemoryChannel):
    """A worker's end that wants to know when the worker can go no further without the driver
    (as Ray's does, to hold acknowledgements back for its next call)."""

    def __init__(self, inner: MemoryChannel) -> None:
        super().__init__(inner._send, inner._receive)
        self.told: list[bool] = []
        self.changed = anyio.Event()

    def waiting(self, stuck: bool) -> None:
        self.told.append(stuck)
        self.changed.set()
        self.changed = anyio.Event()


async def test_a_worker_says_when_every_session_it_runs_waits_for_the_driver() -> None:
    """Stuck with no session, not once one plays, stuck while its last batch waits for its
    acknowledgement, not once acknowledged, stuck once it ended (said on each change, and
    again after each frame of the driver's that leaves it stuck)."""
    driver, plain = pair()
    worker = TellingChannel(plain)

    async def told(count: int) -> list[bool]:
        """What the worker said, each change once, after waiting for ``count`` changes."""
        with anyio.fail_after(10):  # a guard against a hang, not a speed check
            while len(changes := _changes(worker.told)) < count:
                await worker.changed.wait()
        return changes

    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(opening(((SCENARIO,), short_plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        assert worker.told == [True]  # no session yet: it waits for the driver's first
        await driver.send(encode(Run(0, 0, 0, 7)))
        batches: list[int] = []
        while not isinstance(frame := decode_worker_frame(await driver.receive()), News):
            if isinstance(frame, Batch):
                batches.append(frame.batch)
        assert frame.settled == [0]
        assert await told(3) == [True, False, True]  # the session waits for its batches
        await driver.send(encode(Acks(batches)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ended)
        assert await told(5) == [True, False, True, False, True]
        await driver.aclose()


def _changes(said: list[bool]) -> list[bool]:
    return [value for i, value in enumerate(said) if i == 0 or value != said[i - 1]]


def watched(recipe: object) -> bytes:
    """The experiment's recipe, with the driver watching progress."""
    pickled = pickled_recipe(recipe, (), "test")
    return encode(Open(PROTOCOL, pickled.recipe, pickled.reopened, list(sys.path), True))


async def test_a_watched_session_plays_to_its_end_without_waiting_for_its_start() -> None:
    """With progress watched, the start goes to the driver but is not waited for: nothing is
    acknowledged until the session only waits for its last commit. Its progress and its
    settling come as news, in order, before its end."""
    driver, worker = pair()
    frames: list[object] = []
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(watched(((SCENARIO,), short_plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        with anyio.fail_after(10):  # a guard against a hang, not a speed check
            while not (isinstance(frame := decode_worker_frame(await driver.receive()), News)
                       and frame.settled):  # fmt: skip
                frames.append(frame)
        frames.append(frame)
        batches = [each for each in frames if isinstance(each, Batch)]
        await driver.send(encode(Acks([each.batch for each in batches])))
        ended = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(frames[0], Named)
    assert batches[0].rows[0].kind == "session.created"
    turns = [said.turns for each in frames if isinstance(each, News) for said in each.progress]
    assert turns == [0, 1, 2, 3]
    assert isinstance(ended, Ended)
    assert (ended.status, ended.turns_completed) == ("completed", 3)


class StuckAgent:
    """Never answers: its session's first turn lasts for ever."""

    implementation = "stuck-agent@1"

    async def act(self, observation: object) -> dict[str, int]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


def stuck_plan(
    scenario: Scenario[SyntheticScenarioInput],
    trial: int,
    seed: int,
    /,
    session_id: str | None = None,
) -> SessionPlan:
    return dataclasses.replace(
        plan(scenario, trial, seed, session_id=session_id), agents={"agent": StuckAgent()}
    )


async def test_what_no_session_waits_for_still_reaches_the_driver() -> None:
    """A session stuck in its first turn sends nothing that must go at once: its name, its
    start and its first progress still reach the driver (after a short hold), so the driver
    commits the start and can tell the progress."""
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(watched(((SCENARIO,), stuck_plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        with anyio.fail_after(10):  # a guard against a hang, not a speed check
            named = decode_worker_frame(await driver.receive())
            start = decode_worker_frame(await driver.receive())
            news = decode_worker_frame(await driver.receive())
        await driver.aclose()
    assert isinstance(named, Named)
    assert isinstance(start, Batch)
    assert start.rows[0].kind == "session.created"
    assert isinstance(news, News)
    assert [said.turns for said in news.progress] == [0]


class OwnInit(SessionRunner):
    """A runner subclass with its own ``__init__``, of the signature the runner has always had
    (``runner=`` is an extension point): it must run in a worker as it does in process."""

    def __init__(
        self,
        store: Any,
        plan: SessionPlan,
        progress: ProgressCallback | None = None,
        resumption: Resumption | None = None,
    ) -> None:
        super().__init__(store, plan, progress, resumption)


async def test_a_runner_subclass_with_its_own_init_runs_a_watched_session() -> None:
    driver, worker = pair()
    async with anyio.create_task_group() as group:
        group.start_soon(serving, worker)
        await driver.send(watched(((SCENARIO,), short_plan, OwnInit, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        with anyio.fail_after(10):  # a guard against a hang, not a speed check
            while not isinstance(frame := decode_worker_frame(await driver.receive()), Ended):
                if isinstance(frame, Batch):
                    await driver.send(encode(Acks([frame.batch])))
        await driver.aclose()
    assert (frame.status, frame.crash) == ("completed", None)


SESSIONS = 32


async def test_a_driver_that_stops_reading_keeps_its_workers_queue_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver falls behind (it reads nothing more): its worker's sessions wait for the
    channel, as they did when each batch went by itself, rather than queue batch after batch
    (a session may have ``IN_FLIGHT`` unacknowledged ones, ~800 frames here): once nothing
    moves any more, the channel holds about what its queue and the hold allow, and a batch or
    two a session."""
    monkeypatch.setattr(recorder, "HOLD_ROWS", 8)  # small batches: the worker stalls sooner
    ours, theirs = socket.socketpair()
    with ours, theirs:
        for end in (ours, theirs):  # small buffers: the socket fills after a few frames
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        driver, worker = await socket_channel(ours), await socket_channel(theirs)
        async with anyio.create_task_group() as group:
            group.start_soon(serve, worker)
            await driver.send(opening(((SCENARIO,), plan, SessionRunner, None)))
            assert isinstance(decode_worker_frame(await driver.receive()), Ready)
            for key in range(SESSIONS):
                await driver.send(encode(Run(key, 0, 0, 7)))
            queued = await _stalled(worker)
            await driver.aclose()  # the write under way fails: the worker ends
        assert queued <= QUEUED_FRAMES + 2 * HELD_FRAMES + 2 * SESSIONS


async def _stalled(channel: StreamChannel) -> int:
    """The frames ``channel`` queues once its worker goes no further: unchanged across a
    pause in which every frame held went. (Should it read them earlier, on a slow machine,
    the bound holds all the same: it holds at every moment.)"""
    before = -1
    while (queued := len(channel._outgoing)) != before:
        before = queued
        await anyio.sleep(5 * HOLD_SECONDS)  # a frame held goes by then: the hold is shorter
    return queued


class BlockingChannel(MemoryChannel):
    """A worker's end whose send blocks until the test lets it finish, as a write does while
    the driver reads nothing; it says when the worker can go no further without the driver."""

    def __init__(self, inner: MemoryChannel) -> None:
        super().__init__(inner._send, inner._receive)
        self.told: list[bool] = []
        self.writing = anyio.Event()
        self.written = anyio.Event()

    def waiting(self, stuck: bool) -> None:
        self.told.append(stuck)

    async def send_many(self, frames: list[bytes]) -> None:
        self.writing.set()
        await self.written.wait()


async def test_a_batch_acknowledged_while_its_session_flushes_is_not_waited_for() -> None:
    """The batch went earlier (after the hold); its acknowledgement comes while the session
    that now waits for it sends what else is held. The worker must not say it waits for the
    driver for a batch already acknowledged (Ray's end would pull early for nothing)."""
    driver, plain = pair()
    channel = BlockingChannel(plain)
    async with anyio.create_task_group() as group:
        worker = _Worker(channel, group, ((SCENARIO,), plan, SessionRunner, None), False)
        worker._sessions[0] = (anyio.CancelScope(), PauseRequest())  # one session plays
        worker._tell_if_stuck()
        batch = worker.acks[1] = _Acknowledged(worker)
        worker.post(Named(0, "ses_a"))  # something else is held
        group.start_soon(batch.committed)
        await channel.writing.wait()  # the session's flush is under way
        worker.acks.pop(1).resolve(None)  # the driver's acknowledgement arrives meanwhile
        channel.written.set()
        await anyio.wait_all_tasks_blocked()
        group.cancel_scope.cancel()
    await driver.aclose()
    await channel.aclose()
    assert True not in channel.told


class FailingChannel(MemoryChannel):
    """A worker's end that fails once a session's frames go, not as a broken channel does."""

    async def send_many(self, frames: list[bytes]) -> None:
        if any(isinstance(decode_worker_frame(frame), Named) for frame in frames):
            raise ValueError("a frame over the limit")
        await super().send_many(frames)


async def test_a_channel_that_fails_ends_its_worker_rather_than_lose_frames() -> None:
    """Frames taken from the hold cannot be sent: the worker ends, raising why, so the driver
    sees it gone and retries its sessions (it would wait for ever for the frames lost)."""
    driver, plain = pair()
    worker = FailingChannel(plain._send, plain._receive)
    raised: list[BaseException] = []

    async def failing() -> None:
        try:
            await serving(worker)
        except ValueError as exc:
            raised.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(failing)
        await driver.send(opening(((SCENARIO,), plan, SessionRunner, None)))
        assert isinstance(decode_worker_frame(await driver.receive()), Ready)
        await driver.send(encode(Run(0, 0, 0, 7)))
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):  # its end closed
            await driver.receive()
        await driver.aclose()
    assert [str(exc) for exc in raised] == ["a frame over the limit"]
