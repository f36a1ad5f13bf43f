"""Lines held back until a check over all of them has passed, in bounded memory.

A snapshot export promises that nothing is written unless the whole snapshot checks out. Reading
the evidence twice (once to check, once to write) kept that promise at twice the cost of the
reads and digests; holding the checked lines back costs one pass. The lines are kept in memory
up to :data:`IN_MEMORY_BYTES`, then in an unnamed temporary file, so memory stays constant
however large the snapshot. Every file operation runs in a worker thread, in large batches.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator

import anyio

__all__ = ["BATCH_BYTES", "IN_MEMORY_BYTES", "LineSpool"]

IN_MEMORY_BYTES = 2**20
"""Up to this many bytes stay in memory; a larger spool moves to a temporary file."""

BATCH_BYTES = 256 * 2**10
"""Lines are handed to the spool, and read back from it, in batches of about this size."""


class LineSpool:
    """Lines written now, read back in the same order later (each ending in ``\\n``).

    Close it (:meth:`close`) when done: the temporary file, if any, is removed then.
    """

    def __init__(self, in_memory: int = IN_MEMORY_BYTES, batch: int = BATCH_BYTES) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=in_memory)  # noqa: SIM115 - see close
        self._batch = batch
        self._pending: list[bytes] = []
        self._size = 0

    async def add(self, line: bytes) -> None:
        """Hold ``line`` (which ends in ``\\n``)."""
        self._pending.append(line)
        self._size += len(line)
        if self._size >= self._batch:
            await self._flush()

    async def lines(self) -> AsyncGenerator[bytes, None]:
        """Every line held, in order; the spool is read a batch at a time."""
        await self._flush()
        spool = self._file
        await anyio.to_thread.run_sync(spool.seek, 0)
        rest = b""
        while chunk := await anyio.to_thread.run_sync(spool.read, self._batch):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line + b"\n"
        if rest:
            yield rest

    def close(self) -> None:
        self._pending.clear()
        self._file.close()

    async def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._size = 0
            await anyio.to_thread.run_sync(self._file.write, data)
