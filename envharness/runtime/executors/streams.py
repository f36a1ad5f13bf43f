"""A :class:`~envharness.runtime.executors.channel.Channel` over a byte stream: length-prefixed
frames on a Unix socket pair, which is how a pool worker and its driver talk.

Not stdout or stderr: agents and environments print, and a print must never corrupt a frame.
"""

from __future__ import annotations

import socket
from typing import final

import anyio
from anyio.abc import ByteStream, UNIXSocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["MAX_FRAME", "StreamChannel", "socket_channel"]

_HEADER = 4
MAX_FRAME = (1 << 32) - 1
"""A frame's length is written in 4 bytes; a batch is far smaller (``HOLD_ROWS`` records)."""


@final
class StreamChannel:
    """Frames over ``stream``, each preceded by its length (4 bytes, big-endian)."""

    __slots__ = ("_buffered", "_sending", "_stream")

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._buffered = BufferedByteReceiveStream(stream)
        self._sending = anyio.Lock()
        """Frames from several tasks must not interleave their bytes."""

    async def send(self, frame: bytes) -> None:
        if len(frame) > MAX_FRAME:
            raise ValueError(f"a frame of {len(frame)} bytes is over the {MAX_FRAME}-byte limit")
        async with self._sending:
            await self._stream.send(len(frame).to_bytes(_HEADER, "big") + frame)

    async def receive(self) -> bytes:
        try:
            header = await self._buffered.receive_exactly(_HEADER)
        except anyio.IncompleteRead:
            raise anyio.EndOfStream from None
        try:
            return await self._buffered.receive_exactly(int.from_bytes(header, "big"))
        except anyio.IncompleteRead:
            raise anyio.BrokenResourceError(
                "the other side closed in the middle of a frame"
            ) from None

    async def aclose(self) -> None:
        await self._stream.aclose()


async def socket_channel(sock: socket.socket | int) -> StreamChannel:
    """A channel over one end of a connected Unix socket pair (or its descriptor)."""
    return StreamChannel(await UNIXSocketStream.from_socket(sock))
