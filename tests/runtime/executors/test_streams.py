"""The pool's byte-stream channel: frames go out in bulk and come in in bulk, whole and in
order, and a broken stream is said to be broken, never half-read."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import ByteStream, UNIXSocketStream

from envharness.runtime.executors.streams import QUEUED_FRAMES, StreamChannel

pytestmark = pytest.mark.anyio


class Counting(ByteStream):
    """A socket stream that counts its writes and reads, and can hold its writes back."""

    def __init__(self, stream: UNIXSocketStream) -> None:
        self.stream = stream
        self.writes = 0
        self.reads = 0
        self.held: anyio.Event | None = None

    async def send(self, item: bytes) -> None:
        self.writes += 1
        if self.held is not None:
            await self.held.wait()
        await self.stream.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        self.reads += 1
        return await self.stream.receive(max_bytes)

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()


@pytest.fixture
async def ends() -> AsyncIterator[tuple[Counting, Counting]]:
    one, two = socket.socketpair()
    first = Counting(await UNIXSocketStream.from_socket(one))
    second = Counting(await UNIXSocketStream.from_socket(two))
    yield first, second
    await first.aclose()
    await second.aclose()


def framed(*frames: bytes) -> bytes:
    return b"".join(len(frame).to_bytes(4, "big") + frame for frame in frames)


async def test_frames_sent_in_one_pass_of_the_loop_go_out_in_one_write(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    channel, other = StreamChannel(ours), StreamChannel(theirs)
    async with anyio.create_task_group() as group:
        for number in range(10):
            group.start_soon(channel.send, b"frame %d" % number)
    assert ours.writes == 1
    received = [await other.receive() for _ in range(10)]  # in the order of the sends, which
    assert sorted(received) == [b"frame %d" % n for n in range(10)]  # trio shuffles


async def test_every_frame_that_arrived_together_is_handed_out_from_one_read(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    await ours.stream.send(framed(b"a", b"", b"c" * 70_000))
    channel = StreamChannel(theirs)
    assert await channel.receive() == b"a"
    reads = theirs.reads
    assert await channel.receive() == b""
    assert theirs.reads == reads  # already here: no read, no pass of the loop
    assert await channel.receive() == b"c" * 70_000


async def test_a_frame_that_arrives_in_pieces_is_put_back_together(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    channel = StreamChannel(theirs)
    async with anyio.create_task_group() as group:

        async def trickle() -> None:
            data = framed(b"whole", b"again")
            for start in range(0, len(data), 3):  # a header split too
                await ours.stream.send(data[start : start + 3])
                await anyio.wait_all_tasks_blocked()

        group.start_soon(trickle)
        assert [await channel.receive(), await channel.receive()] == [b"whole", b"again"]


async def test_an_end_between_frames_is_the_end_of_the_stream(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    await ours.stream.send(framed(b"last"))
    await ours.aclose()
    channel = StreamChannel(theirs)
    assert await channel.receive() == b"last"
    with pytest.raises(anyio.EndOfStream):
        await channel.receive()


@pytest.mark.parametrize("cut", [2, 6])
async def test_an_end_in_the_middle_of_a_frame_breaks_the_channel(
    ends: tuple[Counting, Counting], cut: int
) -> None:
    ours, theirs = ends
    await ours.stream.send(framed(b"half a frame")[:cut])
    await ours.aclose()
    with pytest.raises(anyio.BrokenResourceError, match="in the middle of a frame"):
        await StreamChannel(theirs).receive()


async def test_a_write_that_fails_breaks_the_channel_for_every_later_send(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    await theirs.aclose()
    channel = StreamChannel(ours)
    with pytest.raises(anyio.BrokenResourceError):
        await channel.send(b"to nobody")
    writes = ours.writes
    with pytest.raises(anyio.BrokenResourceError):
        await channel.send(b"again")
    assert ours.writes == writes


async def test_a_sender_waits_while_the_queue_behind_a_slow_write_is_full(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    channel, other = StreamChannel(ours), StreamChannel(theirs)
    held = ours.held = anyio.Event()
    queued: list[int] = []
    async with anyio.create_task_group() as group:

        async def send(number: int) -> None:
            await channel.send(b"%d" % number)
            queued.append(number)

        group.start_soon(send, 0)  # takes the write, held back
        await anyio.wait_all_tasks_blocked()
        try:
            for number in range(1, QUEUED_FRAMES + 2):
                group.start_soon(send, number)
            await anyio.wait_all_tasks_blocked()
            assert len(queued) == QUEUED_FRAMES  # one more waits (trio shuffles which)
        finally:
            held.set()
    assert len(queued) == QUEUED_FRAMES + 2
    frames = [await other.receive() for _ in range(QUEUED_FRAMES + 2)]
    assert frames[0] == b"0"
    assert sorted(frames) == sorted(b"%d" % number for number in range(QUEUED_FRAMES + 2))


async def test_an_oversized_frame_is_refused_before_anything_is_written(
    ends: tuple[Counting, Counting], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = ends
    monkeypatch.setattr("envharness.runtime.executors.streams.MAX_FRAME", 3)
    with pytest.raises(ValueError, match="a frame of 4 bytes is over the 3-byte limit"):
        await StreamChannel(ours).send(b"four")
    assert ours.writes == 0


async def test_frames_sent_together_go_out_in_one_write_in_their_order(
    ends: tuple[Counting, Counting],
) -> None:
    ours, theirs = ends
    channel, other = StreamChannel(ours), StreamChannel(theirs)
    await channel.send_many([b"frame %d" % number for number in range(10)])
    assert ours.writes == 1
    assert [await other.receive() for _ in range(10)] == [b"frame %d" % n for n in range(10)]


async def test_frames_sent_together_are_refused_whole_if_one_is_oversized(
    ends: tuple[Counting, Counting], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = ends
    monkeypatch.setattr("envharness.runtime.executors.streams.MAX_FRAME", 3)
    with pytest.raises(ValueError, match="a frame of 4 bytes is over the 3-byte limit"):
        await StreamChannel(ours).send_many([b"one", b"four"])
    assert ours.writes == 0


async def test_frames_keep_the_order_they_were_sent_in_even_behind_a_full_queue(
    ends: tuple[Counting, Counting],
) -> None:
    """A sender queues its frames before it waits (back-pressure), so frames sent one after
    another arrive in that order whoever sends them — a worker's batches of one session, sent
    by different tasks, must reach the driver in their order."""
    ours, theirs = ends
    channel, other = StreamChannel(ours), StreamChannel(theirs)
    held = ours.held = anyio.Event()
    senders = QUEUED_FRAMES + 8
    async with anyio.create_task_group() as group:
        for number in range(senders):  # one after another: each queues before the next
            group.start_soon(channel.send_many, [b"%d" % number, b"%d'" % number])
            await anyio.wait_all_tasks_blocked()
        held.set()
    received = [await other.receive() for _ in range(2 * senders)]
    assert received == [frame for n in range(senders) for frame in (b"%d" % n, b"%d'" % n)]
