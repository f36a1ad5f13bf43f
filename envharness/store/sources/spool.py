"""The checked records of one import on their way to its transaction, held in bounded memory.

An import is stored whole or refused whole (:mod:`~envharness.store.sources.store`), so every
record must be checked before the first is stored — but not held. A :class:`RowSpool` checks
each record as it arrives (its chain needs only the record before it) and writes it to a
temporary file in chunks of at most :data:`CHUNK_ROWS` records or :data:`CHUNK_BYTES` bytes;
the import's transaction then reads the chunks back one at a time. Memory stays about one
chunk, whatever the size of the import. A small import never leaves memory: the file is
spooled to disk only past :data:`IN_MEMORY`. The file is the caller's own, unlinked at once
(``tempfile``), and gone when the spool is closed.

Its methods block (file I/O, hashing): call them from a worker thread.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import msgspec

from envharness.store.sources.chain import BatchCheck, SourceRow

__all__ = ["CHUNK_BYTES", "CHUNK_ROWS", "IN_MEMORY", "RowSpool"]

CHUNK_ROWS = 2_000
"""Most records read back (and inserted) at once."""
CHUNK_BYTES = 2 * 1024 * 1024
"""Most payload bytes in one chunk: a chunk of large records is written sooner."""
IN_MEMORY = 1024 * 1024
"""Spooled bytes kept in memory before the spool moves to a temporary file."""

_LENGTH = 8
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[SourceRow])


class RowSpool:
    """The records of one batch of ``source``, each checked as it is added (the errors
    :func:`~envharness.store.sources.check_batch` raises, ``prefix`` first), kept on disk in
    chunks. ``first`` and ``last`` are the first and last records added; ``count`` how many."""

    def __init__(self, source: str, *, prefix: str = "", checked: bool = False) -> None:
        self.source = source
        self.count = 0
        self.first: SourceRow | None = None
        self.last: SourceRow | None = None
        # ``checked``: the rows come from a reader that already ran this very check on each of
        # them, in this order (``read_source_lines``), so it could never fail here; running
        # it twice recomputed every hash twice (a quarter of an import's time, issue 20).
        self._check = None if checked else BatchCheck(source, prefix=prefix)
        self._file = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY)  # noqa: SIM115 - closed by close()
        self._pending: list[SourceRow] = []
        self._pending_bytes = 0

    def add(self, row: SourceRow) -> None:
        """Check ``row`` against the record before it (unless ``checked``), then keep it."""
        if self._check is not None:
            self._check(row)
        if self.first is None:
            self.first = row
        self.last = row
        self.count += 1
        self._pending.append(row)
        self._pending_bytes += len(row.payload)
        if len(self._pending) >= CHUNK_ROWS or self._pending_bytes >= CHUNK_BYTES:
            self._flush()

    @property
    def span(self) -> tuple[int, int] | None:
        """The first and last positions added (ascending: each record follows the one before)."""
        if self.first is None or self.last is None:
            return None
        return self.first.position, self.last.position

    def chunks(self) -> Iterator[list[SourceRow]]:
        """The records added, in order, one chunk at a time."""
        self._flush()
        self._file.seek(0)
        while header := self._file.read(_LENGTH):
            yield _decoder.decode(self._file.read(int.from_bytes(header, "little")))

    def close(self) -> None:
        self._pending.clear()
        self._file.close()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = _encoder.encode(self._pending)
        self._file.seek(0, 2)
        self._file.write(len(data).to_bytes(_LENGTH, "little"))
        self._file.write(data)
        self._pending.clear()
        self._pending_bytes = 0
