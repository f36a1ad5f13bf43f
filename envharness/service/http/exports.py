"""Streamed exports: checked before the first byte, then sent a chunk at a time.

A snapshot's or dataset's export is a generator that verifies the evidence before it yields
its first line. :func:`export_response` takes that first line *before* the response starts,
so altered evidence is an ordinary 409 naming the record — never a 200 stream cut short — and
then sends the rest in writes of about :data:`CHUNK` bytes as the client takes them, so memory
stays flat however long the export.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from starlette.responses import Response

from envharness.service.http.events import ClosingStream
from envharness.service.problems import trajectory_problem
from envharness.trajectories import TrajectoryError

__all__ = ["CHUNK", "export_response"]

CHUNK = 64 * 1024
"""Bytes of export lines gathered into one write: large enough to be cheap, small enough that
memory stays flat however long the export."""


async def export_response(lines: AsyncGenerator[bytes, None], *, filename: str) -> Response:
    """``lines`` as a JSON-lines download, its first line (and so its check) taken first.

    The chunks' generator is started here, so the one the response receives already holds
    ``lines`` open: closing it reaches ``lines`` (and the read it holds) however the response
    ends, even before its first write. A generator never started closes without running, and
    would have left ``lines`` to the garbage collector."""
    chunks = _chunked(lines)
    try:
        await anext(chunks)  # reads the first line: a refused export raises here
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    return ClosingStream(chunks, media_type="application/x-ndjson", filename=filename)


async def _chunked(rest: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """An empty chunk once the first line of ``rest`` is read, then every line gathered into
    writes of about :data:`CHUNK` bytes; ``rest`` is closed however the stream ends."""
    async with aclosing(rest) as lines:
        first = await anext(lines, b"")
        yield b""
        buffer = [first]
        size = len(first)
        async for line in lines:
            buffer.append(line)
            size += len(line)
            if size >= CHUNK:
                yield b"".join(buffer)
                buffer, size = [], 0
        if buffer:
            yield b"".join(buffer)
