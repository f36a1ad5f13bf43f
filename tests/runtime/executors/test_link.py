"""A link's acknowledgements: in the journal's order, batches committed together in one frame,
none held back behind a commit still under way, and none lost when the worker's frames end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from envharness.errors import StoreError
from envharness.runtime.executors.frames import Ack, Acks, decode_driver_frame
from envharness.runtime.executors.link import Link
from envharness.runtime.executors.seam import ExperimentWork
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


@pytest.fixture
async def ends() -> AsyncIterator[tuple[Link, MemoryChannel]]:
    """A link whose worker is the test: the frames the link sends arrive at the second."""
    to_worker, worker_in = anyio.create_memory_object_stream[bytes](16)
    to_driver, driver_in = anyio.create_memory_object_stream[bytes](1)
    link = Link(0, ScriptedSpawner(), cast(ExperimentWork, SimpleNamespace(store=None)))
    link.channel = ours = MemoryChannel(to_worker, driver_in)
    worker = MemoryChannel(to_driver, worker_in)
    yield link, worker
    await ours.aclose()
    await worker.aclose()


async def acknowledged(link: Link, commits: list[tuple[int, Commit]]) -> None:
    send, receive = anyio.create_memory_object_stream[tuple[int, Pending]](len(commits))
    async with send:
        for batch, commit in commits:
            send.send_nowait((batch, cast(Pending, commit)))
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
