"""A :class:`~envharness.runtime.executors.channel.Channel` over a byte stream: length-prefixed
frames on a Unix socket pair, which is how a pool worker and its driver talk.

Not stdout or stderr: agents and environments print, and a print must never corrupt a frame.

Frames travel in bulk both ways, because a socket operation and an event-loop pass cost more
than the frame itself (a CPU-bound experiment's driver spent ~2.5 ms of CPU per remote session,
~50 loop passes, when every frame was its own write and each was read in two reads): the frames
sent while a write is under way go out together in the next write, and a receive reads
whatever has arrived and hands out every complete frame it holds before reading again.
"""

from __future__ import annotations

import socket
from typing import final

import anyio
import anyio.lowlevel
from anyio.abc import ByteStream, UNIXSocketStream

__all__ = ["MAX_FRAME", "QUEUED_FRAMES", "READ_SIZE", "StreamChannel", "socket_channel"]

_HEADER = 4
MAX_FRAME = (1 << 32) - 1
"""A frame's length is written in 4 bytes; a batch is far smaller (``HOLD_ROWS`` records)."""
QUEUED_FRAMES = 64
"""Frames that may wait for the write under way before a sender waits too (back-pressure)."""
READ_SIZE = 1 << 18
"""Bytes asked of the stream at a time: every frame that arrived together, in one read."""


@final
class StreamChannel:
    """Frames over ``stream``, each preceded by its length (4 bytes, big-endian).

    A send returns once its frame is queued to go, as a socket's does once its bytes are in
    the kernel's buffer: the sender that finds no write under way writes, shielded (a frame cut
    in half would corrupt every frame after it), every frame queued until none is left; the
    others queue theirs and return at once, or, with :data:`QUEUED_FRAMES` or more queued,
    once the write under way has taken them. A failed write breaks the channel: every later
    send raises.
    """

    __slots__ = ("_broken", "_drained", "_incoming", "_outgoing", "_stream", "_writing")

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._incoming = bytearray()
        self._outgoing: list[bytes] = []
        self._writing = False
        self._drained: anyio.Event | None = None
        """Set when the write under way has emptied the queue (made by a sender that waits)."""
        self._broken: Exception | None = None

    async def send(self, frame: bytes) -> None:
        await self.send_many([frame])

    async def send_many(self, frames: list[bytes]) -> None:
        """Queue ``frames`` together, in order: they go in one write (see
        :class:`~.channel.SendsMany`). Queued at once, before any wait, so that frames sent
        one after another keep their order whoever sends them; a sender that found
        :data:`QUEUED_FRAMES` or more waiting behind the write under way then waits until a
        write takes them (back-pressure)."""
        for frame in frames:
            if len(frame) > MAX_FRAME:
                raise ValueError(
                    f"a frame of {len(frame)} bytes is over the {MAX_FRAME}-byte limit"
                )
        if self._broken is not None:
            raise anyio.BrokenResourceError(str(self._broken)) from self._broken
        queued = len(self._outgoing)
        self._outgoing += frames
        if not self._writing:
            await self._write_queued()
            return
        if queued >= QUEUED_FRAMES:  # until the write under way takes the queue, these too
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()
            if self._broken is not None:
                raise anyio.BrokenResourceError(str(self._broken)) from self._broken

    async def _write_queued(self) -> None:
        self._writing = True
        try:
            with anyio.CancelScope(shield=True):
                # One pass of the loop first: the frames other tasks send in it go out together.
                await anyio.lowlevel.cancel_shielded_checkpoint()
                while self._outgoing:
                    frames, self._outgoing = self._outgoing, []
                    self._wake_senders()
                    await self._stream.send(_framed(frames))
        except Exception as exc:
            self._broken = exc
            self._outgoing.clear()
            raise
        finally:
            self._writing = False
            self._wake_senders()

    def _wake_senders(self) -> None:
        if self._drained is not None:
            self._drained.set()
            self._drained = None

    async def receive(self) -> bytes:
        while (frame := self._buffered_frame()) is None:
            try:
                chunk = await self._stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                if self._incoming:
                    raise anyio.BrokenResourceError(
                        "the other side closed in the middle of a frame"
                    ) from None
                raise
            self._incoming += chunk
        return frame

    def _buffered_frame(self) -> bytes | None:
        """The next frame, if all of it has arrived."""
        incoming = self._incoming
        if len(incoming) < _HEADER:
            return None
        end = _HEADER + int.from_bytes(incoming[:_HEADER], "big")
        if len(incoming) < end:
            return None
        frame = bytes(incoming[_HEADER:end])
        del incoming[:end]
        return frame

    async def aclose(self) -> None:
        await self._stream.aclose()


def _framed(frames: list[bytes]) -> bytes:
    parts: list[bytes] = []
    for frame in frames:
        parts += (len(frame).to_bytes(_HEADER, "big"), frame)
    return b"".join(parts)


async def socket_channel(sock: socket.socket | int) -> StreamChannel:
    """A channel over one end of a connected Unix socket pair (or its descriptor)."""
    return StreamChannel(await UNIXSocketStream.from_socket(sock))
