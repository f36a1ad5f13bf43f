"""Request bodies: read with a size limit, then decoded into a typed request.

A body is refused before it is parsed when it has another content type (415) or grows past
its endpoint's limit (413), so a client cannot make the server hold more than that limit; a
body that is not JSON, or not the request the endpoint takes, is a 422 about ``body``.

A large body (an import) is not held at all: :func:`spool_body` writes it to a temporary file
as it arrives, and :func:`spooled_lines` reads its lines back from there.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from typing import IO, Any, TypeVar

import anyio
import msgspec

from envharness.service.problems import HTTPProblem
from envharness.service.routing import Call

__all__ = ["MAX_JSON_BODY", "decode_body", "read_body", "spool_body", "spooled_lines"]

_T = TypeVar("_T")

MAX_JSON_BODY = 1024 * 1024
"""Largest JSON request body for a snapshot or dataset (10,000 session ids fit)."""
SPOOL_IN_MEMORY = 1024 * 1024
"""Bytes of a spooled body kept in memory (and written at once) before they go to its file."""
_READ = 64 * 1024


async def read_body(
    call: Call[Any], *, limit: int, content_types: tuple[str, ...] = ("application/json",)
) -> bytes:
    """The request body, refused when it is of another type (415) or over ``limit`` (413)."""
    _check_type(call, content_types)
    chunks: list[bytes] = []
    size = 0
    async with aclosing(call.request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise HTTPProblem(413, f"the body is larger than {limit:,} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


@asynccontextmanager
async def spool_body(
    call: Call[Any], *, limit: int, content_types: tuple[str, ...]
) -> AsyncIterator[IO[bytes]]:
    """The request body in a temporary file (read from its start), refused like
    :func:`read_body`'s; the server holds about :data:`SPOOL_IN_MEMORY` bytes of it at a time,
    whatever ``limit`` is. The file is gone when the block ends."""
    _check_type(call, content_types)
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - closed below
    try:
        pending: list[bytes] = []
        held = size = 0
        async with aclosing(call.request.stream()) as stream:
            async for chunk in stream:
                size += len(chunk)
                if size > limit:
                    raise HTTPProblem(413, f"the body is larger than {limit:,} bytes")
                pending.append(chunk)
                held += len(chunk)
                if held >= SPOOL_IN_MEMORY:  # to the file in a worker thread: it may be on disk
                    await anyio.to_thread.run_sync(_write, spool, pending, size)
                    pending, held = [], 0
        await anyio.to_thread.run_sync(_write, spool, pending, size)
        await anyio.to_thread.run_sync(spool.seek, 0)
        yield spool
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(spool.close)


def _write(spool: tempfile.SpooledTemporaryFile[bytes], pending: list[bytes], size: int) -> None:
    if size > SPOOL_IN_MEMORY:
        spool.rollover()  # to disk before the write, not after it was buffered in memory too
    spool.write(b"".join(pending))


def spooled_lines(file: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``file`` with their ends, split as ``bytes.splitlines(keepends=True)``
    splits (at ``\\n``, ``\\r\\n`` or ``\\r``), read a block at a time: blocking, for a worker
    thread. A line longer than a block is joined once, not grown block by block."""
    pending: list[bytes] = []
    while block := file.read(_READ):
        if pending and pending[-1].endswith(b"\r"):  # a "\r" ending the last block: "\r\n"?
            if block.startswith(b"\n"):
                pending.append(b"\n")
                block = block[1:]
            yield b"".join(pending)
            pending.clear()
        parts = block.splitlines(keepends=True)
        if not parts:
            continue
        last = parts.pop()
        if parts:
            parts[0] = b"".join([*pending, parts[0]])
            pending.clear()
            yield from parts
        pending.append(last)
        if last.endswith(b"\n"):
            yield b"".join(pending)
            pending.clear()
    if pending:
        yield b"".join(pending)


def _check_type(call: Call[Any], content_types: tuple[str, ...]) -> None:
    if call.request.headers.get("content-type", "").split(";")[0].strip() not in content_types:
        raise HTTPProblem(415, f"send the body as {' or '.join(content_types)}")


def decode_body(body: bytes, decoder: msgspec.json.Decoder[_T], what: str) -> _T:
    """``body`` as the ``what`` request ``decoder`` reads; 422 naming what is wrong with it."""
    if not body.strip():
        raise HTTPProblem(
            422, f"the body is empty: send the {what} request as a JSON object", parameter="body"
        )
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise HTTPProblem(422, f"the {what} request is invalid: {exc}", parameter="body") from None
    except msgspec.DecodeError as exc:
        raise HTTPProblem(422, f"the body is not JSON: {exc}", parameter="body") from None
