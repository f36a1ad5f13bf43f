"""The worker actor's side of Ray's carrier, driven here by hand as the driver's calls would
(no cluster: the actor class is a plain class until ``ray.remote`` makes it one; the carrier on
a real cluster is tested in ``test_ray.py``): numbered calls reach the worker in order whichever
runs first, and a pull ends early once the worker waits for what the driver may hold back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from envharness.runtime.executors.channel import SendsMany, TellsWaiting, WorkerChannel
from envharness.runtime.executors.ray_channel import WorkerActor

pytestmark = pytest.mark.anyio

HANG_S = 10
"""A guard against a hang, not a speed check."""


@asynccontextmanager
async def serving(serve: Callable[[WorkerChannel], Awaitable[None]]) -> AsyncIterator[WorkerActor]:
    """The actor running ``serve``, called by the block as the driver would; then closed as
    only Ray's end of the actor (its kill) would otherwise close it."""
    actor = WorkerActor(serve)
    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as group:
            group.start_soon(actor.run)
            yield actor
    actor._to_driver.close()
    actor._to_worker.close()


async def test_numbered_calls_reach_the_worker_in_order_whichever_runs_first() -> None:
    received: list[bytes] = []

    async def serve(channel: WorkerChannel) -> None:
        while True:
            try:
                received.append(await channel.receive())
            except anyio.EndOfStream:
                return

    async with serving(serve) as actor:
        await actor.push(2, [b"e"], True)  # overtook the two before it: held
        await actor.push(1, [b"c", b"d"], False)
        await anyio.wait_all_tasks_blocked()
        assert received == []
        # the first call, a pull, releases all three; then the worker ends with the close
        assert await actor.pull(0, [b"a", b"b"]) == ([], True, None, True)
    assert received == [b"a", b"b", b"c", b"d", b"e"]


async def test_a_pull_ends_early_once_the_worker_waits_for_the_driver() -> None:
    async def serve(channel: WorkerChannel) -> None:
        assert isinstance(channel, TellsWaiting)
        await channel.send(b"hello")
        await channel.receive()  # "go"
        channel.waiting(True)  # every session waits for the driver now
        await channel.receive()  # "ack"
        channel.waiting(False)
        await channel.send(b"thanks")
        with pytest.raises(anyio.EndOfStream):
            await channel.receive()

    async with serving(serve) as actor:
        assert await actor.pull(None, []) == ([b"hello"], False, None, False)
        # nothing to return, but the worker waits on the driver: the pull says so at once
        assert await actor.pull(0, [b"go"]) == ([], False, None, True)
        assert await actor.pull(1, [b"ack"]) == ([b"thanks"], False, None, False)
        await actor.push(2, [], True)
        assert await actor.pull(None, []) == ([], True, None, True)


async def test_a_worker_stuck_with_a_frame_still_in_its_inbox_is_heard_once_it_took_it() -> None:
    """Said while a frame of the driver's still waits in its inbox, "stuck" may be wrong by the
    time the worker has handled that frame: the pull ends only when the worker, having taken
    it, says so again (as the worker does after each frame that leaves it stuck)."""
    took: list[bytes] = []

    async def serve(channel: WorkerChannel) -> None:
        assert isinstance(channel, TellsWaiting)
        await channel.send(b"hello")
        took.append(await channel.receive())
        channel.waiting(True)  # "two" is still in the inbox
        took.append(await channel.receive())
        channel.waiting(True)
        with pytest.raises(anyio.EndOfStream):
            await channel.receive()

    async with serving(serve) as actor:
        assert await actor.pull(None, []) == ([b"hello"], False, None, False)
        assert await actor.pull(0, [b"one", b"two"]) == ([], False, None, True)
        assert took == [b"one", b"two"]
        await actor.push(1, [], True)
        assert await actor.pull(None, []) == ([], True, None, True)


async def test_frames_sent_together_are_pulled_together_in_order() -> None:
    """Queued without a pass of the loop between them, so the pull waiting takes them all in
    one answer (one actor call for the driver, not one per frame)."""

    async def serve(channel: WorkerChannel) -> None:
        assert isinstance(channel, SendsMany)
        await channel.send_many([b"one", b"two", b"three"])
        with pytest.raises(anyio.EndOfStream):
            await channel.receive()

    async with serving(serve) as actor:
        assert await actor.pull(None, []) == ([b"one", b"two", b"three"], False, None, False)
        await actor.push(0, [], True)
        assert await actor.pull(None, []) == ([], True, None, True)
