"""Lines in, lines out: the byte-level framing of the protocol, with a hard bound on memory.

An agent is untrusted input. :class:`LineReader` never holds more than ``max_line_bytes`` plus
one received chunk: once the bytes waiting for a newline exceed the limit, the line is a
violation and reading stops for good (the rest of the flood is never read, so never buffered).
Every read is cancel-safe: a cancelled ``receive_line`` loses no bytes, so callers can wrap it
in ``anyio.fail_after`` or cancel it when they stop waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Generic, TypeVar

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from envharness.protocol.errors import OFFENDING_LIMIT, ProtocolViolationError
from envharness.protocol.messages import (
    DEFAULT_MAX_LINE_BYTES,
    AgentMessage,
    HostMessage,
    encode_into,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "LineReader",
    "MessageReader",
    "MessageWriter",
]

DEFAULT_CHUNK_SIZE: Final = 64 * 1024

M = TypeVar("M", HostMessage, AgentMessage)


class LineReader:
    """Reads ``\\n``-terminated lines from a byte stream, each at most ``max_line_bytes`` long.

    ``receive_line`` returns a line without its newline and raises :class:`anyio.EndOfStream`
    at a clean end of input. A line over the limit or input that ends mid-line raises a
    :class:`~envharness.protocol.errors.ProtocolViolationError`; after that the reader is
    finished and raises the same violation again rather than read further.
    """

    __slots__ = ("_buffer", "_chunk_size", "_failure", "_limit", "_scanned", "_stream", "peak")

    def __init__(
        self,
        stream: ByteReceiveStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        if max_line_bytes < 1 or chunk_size < 1:
            raise ValueError("max_line_bytes and chunk_size must be positive")
        self._stream = stream
        self._limit = max_line_bytes
        self._chunk_size = chunk_size
        self._buffer = bytearray()
        self._scanned = 0  # a prefix of the buffer known to hold no newline
        self._failure: ProtocolViolationError | None = None
        self.peak = 0
        """The most bytes ever buffered at once (at most ``max_line_bytes + chunk_size``)."""

    @property
    def max_line_bytes(self) -> int:
        return self._limit

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as lines."""
        return len(self._buffer)

    async def receive_line(self) -> bytes:
        if self._failure is not None:
            raise self._failure
        buffer = self._buffer
        while True:
            newline = buffer.find(b"\n", self._scanned)
            if newline >= 0:
                if newline > self._limit:
                    raise self._too_long(newline)
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                self._scanned = 0
                return line
            self._scanned = len(buffer)
            if len(buffer) > self._limit:
                raise self._too_long(len(buffer))
            try:
                chunk = await self._stream.receive(self._chunk_size)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                if buffer:
                    self._failure = ProtocolViolationError(
                        "truncated_line",
                        f"the output ended in the middle of a line ({len(buffer)} bytes without "
                        "a newline); end every message with \\n and flush before exiting",
                        bytes(buffer),
                    )
                    buffer.clear()
                    raise self._failure from None
                raise anyio.EndOfStream from None
            buffer += chunk
            if len(buffer) > self.peak:
                self.peak = len(buffer)

    def _too_long(self, size: int) -> ProtocolViolationError:
        """Fail for good: keep a prefix as evidence and drop the rest of the buffer."""
        self._failure = ProtocolViolationError.sized(
            "line_too_long",
            f"a line is longer than the limit of {self._limit} bytes (at least {size} bytes "
            "seen); send smaller messages, or raise max_line_bytes on the host",
            bytes(self._buffer[: min(size, OFFENDING_LIMIT)]),
            size,
        )
        self._buffer.clear()
        self._scanned = 0
        return self._failure


class MessageReader(Generic[M]):
    """Decoded messages from a byte stream: lines through ``decode``, blank lines skipped.

    ``decode`` is :func:`~envharness.protocol.messages.decode_agent_message` on the host and
    :func:`~envharness.protocol.messages.decode_host_message` in an agent. A line that does not
    decode raises its violation; the framing is intact, so reading may go on if the caller wants.
    """

    __slots__ = ("_decode", "lines")

    def __init__(
        self,
        stream: ByteReceiveStream,
        decode: Callable[[bytes], M],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        self.lines = LineReader(stream, max_line_bytes=max_line_bytes, chunk_size=chunk_size)
        self._decode: Callable[[bytes], M] = decode

    async def receive(self) -> tuple[M, bytes]:
        """The next message and the exact line it came from (evidence for later violations)."""
        while True:
            line = await self.lines.receive_line()
            if line.strip():
                return self._decode(line), line


class MessageWriter:
    """Writes messages to a byte stream, one line each, encoding into one reused buffer.

    Each line is handed to the stream as its own ``bytes`` object, because a stream (a memory
    stream, a transport's queue) may keep a reference after ``send`` returns.
    """

    __slots__ = ("_buffer", "_stream")

    def __init__(self, stream: ByteSendStream) -> None:
        self._stream = stream
        self._buffer = bytearray(256)

    def encode(self, message: HostMessage | AgentMessage) -> bytes:
        """The line for ``message``; raises ``TypeError``/``msgspec.EncodeError`` if a value in
        it (an observation, a state) has no JSON form."""
        encode_into(message, self._buffer)
        return bytes(self._buffer)

    async def send(self, message: HostMessage | AgentMessage) -> None:
        await self._stream.send(self.encode(message))

    async def send_line(self, line: bytes) -> None:
        """Send an already encoded line (it must end with ``\\n``)."""
        await self._stream.send(line)

    async def aclose(self) -> None:
        """Close the stream: the other side reads end of input."""
        await self._stream.aclose()
