"""A link's acknowledgements: in the journal's order, batches committed together in one frame,
none held back behind a commit still under way, and none lost when the worker's frames end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from envharness.errors import StoreError
from envharness.runtime.executors.frames import Ack, Acks, News, Turns, decode_driver_frame
from envharness.runtime.executors.link import Link, Remote
from envharness.runtime.executors.seam import ExperimentWork
from envharness.runtime.plan import ProgressCallback
from envharness.store.journal import Pending
from tests.runtime.executors.test_driver import MemoryChannel, ScriptedSpawner

pytestmark = pytest.mark.anyio


class Commit:
    """A batch's commit as the journal's :class:`Pending` shows it, ended by the test."""

    def __init__(self, error: str | None = None, *, done: bool = True) -> None:
        self.error = error
        self.ended = anyio.Event()
        if done:
            self.ended.set()

    @property
    def done(self) -> bool:
        return self.ended.is_set()

    async def committed(self) -> None:
        await self.ended.wait()
        if self.error is not None:
            raise StoreError(self.error)


@asynccontextmanager
async def _linked(progress: ProgressCallback | None) -> AsyncIterator[tuple[Link, MemoryChannel]]:
    """A link whose worker is the test: the frames the link sends arrive at the second."""
    to_worker, worker_in = anyio.create_memory_object_stream[bytes](16)
    to_driver, driver_in = anyio.create_memory_object_stream[bytes](1)
    work = SimpleNamespace(store=None, progress=progress)
    link = Link(0, ScriptedSpawner(), cast(ExperimentWork, work))
    link.channel = ours = MemoryChannel(to_worker, driver_in)
    worker = MemoryChannel(to_driver, worker_in)
    try:
        yield link, worker
    finally:
        await ours.aclose()
        await worker.aclose()


@pytest.fixture
async def ends() -> AsyncIterator[tuple[Link, MemoryChannel]]:
    async with _linked(None) as linked:
        yield linked


def _nothing() -> None:
    pass


def _named(session_id: str) -> None:
    pass


async def acknowledged(
    link: Link, commits: list[tuple[int, Commit]], of: Remote | None = None
) -> None:
    """Acknowledge ``commits`` (each batch of its own session, or all of ``of``)."""
    send, receive = anyio.create_memory_object_stream[tuple[int, Pending, Remote]](len(commits))
    async with send:
        for batch, commit in commits:
            remote = of or Remote(batch, _nothing, _named)
            send.send_nowait((batch, cast(Pending, commit), remote))
    await link._acknowledge(receive)  # the worker's frames ended: the stream is closed


async def test_batches_committed_together_are_acknowledged_in_one_frame_in_order(
    ends: tuple[Link, MemoryChannel],
) -> None:
    link, worker = ends
    commits = [(1, Commit()), (2, Commit()), (3, Commit("disk full")), (4, Commit()), (5, Commit())]
    await acknowledged(link, commits)
    said: list[Any] = [decode_driver_frame(await worker.receive()) for _ in range(3)]
    assert said == [Acks([1, 2]), Ack(3, "StoreError: disk full"), Acks([4, 5])]


async def test_a_commit_still_under_way_holds_back_no_earlier_acknowledgement(
    ends: tuple[Link, MemoryChannel],
) -> None:
    link, worker = ends
    later = Commit(done=False)
    async with anyio.create_task_group() as group:
        group.start_soon(acknowledged, link, [(1, Commit()), (2, later)])
        assert decode_driver_frame(await worker.receive()) == Ack(1)
        later.ended.set()
        assert decode_driver_frame(await worker.receive()) == Ack(2)


Told = list[tuple[str, int, int]]


@pytest.fixture
async def following() -> AsyncIterator[tuple[Link, MemoryChannel, Told]]:
    """A link of an experiment whose progress is watched: what it is told, in order."""
    told: Told = []

    def progress(session_id: str, turns: int, planned: int) -> None:
        told.append((session_id, turns, planned))

    async with _linked(progress) as (link, worker):
        yield link, worker, told


async def test_a_sessions_progress_is_told_only_once_its_first_batch_is_committed(
    following: tuple[Link, MemoryChannel, Told],
) -> None:
    """The worker hands a session's start over without waiting for its commit: a caller told
    the session's id must still find the session in the store."""
    link, worker, told = following
    freed: list[int] = []
    session = link.sessions[7] = Remote(7, lambda: freed.append(7), _named)
    link._heard(News(progress=[Turns(7, "ses_a", 0, 3), Turns(7, "ses_a", 1, 3)]))
    assert told == []
    start = Commit(done=False)
    async with anyio.create_task_group() as group:
        group.start_soon(acknowledged, link, [(1, start)], session)
        await anyio.wait_all_tasks_blocked()
        assert told == []  # handed to the journal, not committed yet
        start.ended.set()
        assert decode_driver_frame(await worker.receive()) == Ack(1)
    assert told == [("ses_a", 0, 3), ("ses_a", 1, 3)]
    link._heard(News(progress=[Turns(7, "ses_a", 2, 3)], settled=[7]))
    assert told[-1] == ("ses_a", 2, 3)  # started: told at once
    assert freed == [7]  # settled: its slot is freed


async def test_the_progress_of_a_session_whose_first_batch_failed_is_never_told(
    following: tuple[Link, MemoryChannel, Told],
) -> None:
    link, worker, told = following
    failed = link.sessions[1] = Remote(1, _nothing, _named)
    link.sessions[2] = Remote(2, _nothing, _named)
    link._heard(News(progress=[Turns(1, "ses_failed", 0, 3), Turns(2, "ses_gone", 0, 3)]))
    link._heard(News(progress=[Turns(3, "ses_unknown", 0, 3)]))  # an attempt given up on
    await acknowledged(link, [(1, Commit("disk full"))], failed)
    assert decode_driver_frame(await worker.receive()) == Ack(1, "StoreError: disk full")
    assert told == []


async def test_held_back_progress_is_told_before_the_acknowledgement_goes(
    following: tuple[Link, MemoryChannel, Told],
) -> None:
    """Once acknowledged, the session may end: its first progress must not come after its
    result (a lazy send may wait a while before the acknowledgement goes)."""
    link, worker, told = following
    acknowledged_first: list[bool] = []
    progress = link._work.progress
    assert progress is not None

    def checking(session_id: str, turns: int, planned: int) -> None:
        acknowledged_first.append(worker._receive.statistics().current_buffer_used > 0)
        progress(session_id, turns, planned)

    link._work.progress = checking
    session = link.sessions[7] = Remote(7, _nothing, _named)
    link._heard(News(progress=[Turns(7, "ses_a", 0, 3)]))
    await acknowledged(link, [(1, Commit())], session)
    assert decode_driver_frame(await worker.receive()) == Ack(1)
    assert (told, acknowledged_first) == ([("ses_a", 0, 3)], [False])
