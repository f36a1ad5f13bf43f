"""The store side of imports: one batch per transaction, compared with what the source holds.

An import is a batch: every record of it is stored in one transaction, or none is. A record at a
position the source already holds is compared by hash: the same hash is an idempotent retry
(nothing written), another hash a conflict that refuses the whole batch. Every import that
stores something, and every refused import into a source that holds records, is noted in
``source_imports`` (which batch brought which positions, in which format, with what
declaration); refusals are what source health reports as gaps and backlog.

A refused import into a source that holds nothing yet — a new name, or a mistyped one — leaves
the store exactly as it was: no source entry, no import log row, and no store created where
there was none. Only a source that exists has a health for the refusal to count against.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import zlib
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio

from envharness.errors import ConfigurationError, NotFoundError, StoreError
from envharness.records import new_id, utc_now_text
from envharness.store.backend import BackendOrPath, SqliteBackend, backend_of
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.schema import LOCKS
from envharness.store.sources.chain import (
    COLUMNS,
    SourceRow,
    check_batch,
    check_source_id,
    position_span,
)
from envharness.store.sources.errors import SourceChainError, SourceConflictError, SourceImportError
from envharness.store.sources.reads import POSTGRES, SQLITE, episodes_of, health_of
from envharness.store.sources.reports import EpisodeInfo, ImportBatch, ImportReceipt, SourceHealth
from envharness.store.sources.spool import CHUNK_ROWS, RowSpool
from envharness.store.sources.verify import SourceBreak, verify_sources

__all__ = ["SourceStore", "SourcesAt", "positions_of"]

_PAGE = 500
_T = TypeVar("_T")

SourcesAt = BackendOrPath | PostgresBackend
"""Where a store's sources are: its backend (SQLite or PostgreSQL), or a SQLite store's
directory."""

_Connection = sqlite3.Connection | SqliteStyle

_INSERT = f"INSERT INTO source_records ({COLUMNS}, import_id) VALUES ({', '.join('?' * 12)})"
_INSERT_IMPORT = (
    "INSERT INTO source_imports (id, source, at, format, importer, origin, training,"
    " first_position, last_position, stored, duplicates, status, problem, problem_kind,"
    f" problem_position) VALUES ({', '.join('?' * 15)})"
)


class SourceStore:
    """The imported sources of one store. Each call is one short transaction in a worker
    thread, on a connection of its own (imports are rare and batch-sized: on SQLite they wait
    for the journal's lock like any other writer, up to the busy timeout; on PostgreSQL for
    the source's own advisory lock, so imports into different sources do not wait on each
    other)."""

    def __init__(self, database: SourcesAt) -> None:
        self.backend: SqliteBackend | PostgresBackend = (
            database if isinstance(database, PostgresBackend) else backend_of(database)
        )
        self._dialect = POSTGRES if isinstance(self.backend, PostgresBackend) else SQLITE
        self._ready = False

    async def append(self, batch: ImportBatch, rows: Sequence[SourceRow]) -> ImportReceipt:
        """Store ``rows`` (one piece of ``batch.source``'s chain) whole, or refuse them whole.

        Raises :class:`SourceImportError` naming the position at fault; a refusal is noted in
        the import log (for health) and changes nothing else.
        """
        source = check_source_id(batch.source)
        if not rows:
            raise ConfigurationError(f"nothing to import into {source!r}: the batch has no records")
        try:
            # Every hash is recomputed: in a worker thread, so a large batch cannot stall the loop.
            await anyio.to_thread.run_sync(
                functools.partial(check_batch, source, rows, prefix=_origin(batch))
            )
        except SourceImportError as refused:
            await self.note_refusal(batch, positions_of(rows), refused)
            raise
        chunks = [rows[at : at + CHUNK_ROWS] for at in range(0, len(rows), CHUNK_ROWS)]
        return await self._store(batch, rows[0], rows[-1], lambda: iter(chunks))

    async def append_spooled(self, batch: ImportBatch, spool: RowSpool) -> ImportReceipt:
        """Like :meth:`append`, for records already checked into ``spool`` (a large import):
        stored in the same one transaction, read back from the spool a chunk at a time."""
        source = check_source_id(batch.source)
        if spool.first is None or spool.last is None:
            raise ConfigurationError(f"nothing to import into {source!r}: the batch has no records")
        return await self._store(batch, spool.first, spool.last, spool.chunks)

    async def _store(
        self,
        batch: ImportBatch,
        first: SourceRow,
        last: SourceRow,
        chunks: Callable[[], Iterator[Sequence[SourceRow]]],
    ) -> ImportReceipt:
        """The import transaction over a checked batch from ``first`` to ``last``, whose
        records ``chunks`` gives in order."""
        import_id = new_id("imp")
        span = (first.position, last.position)
        if isinstance(self.backend, PostgresBackend):
            return await self._store_postgres(self.backend, batch, span, chunks, import_id)
        backend = self.backend

        def run() -> ImportReceipt:
            if not backend.exists():
                # No store yet: a batch it would refuse must not create one to refuse it in.
                _check_gap(batch, first.position, head=-1)
                _check_link(batch, first, head=-1, head_hash=None)
            connection = backend.connect(create=True)
            try:
                try:
                    connection.execute("BEGIN IMMEDIATE")
                    receipt = _apply(connection, batch, span, chunks(), import_id, utc_now_text())
                    connection.execute("COMMIT")
                    return receipt
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except SourceImportError as refused:
                _note(connection, batch, span, refused)
                raise
            except sqlite3.Error as exc:
                raise backend.translate(exc) from exc
            finally:
                connection.close()

        # Not abandoned on cancel: the caller learns whether the batch was stored.
        return await anyio.to_thread.run_sync(run)

    async def _store_postgres(
        self,
        backend: PostgresBackend,
        batch: ImportBatch,
        span: tuple[int, int],
        chunks: Callable[[], Iterator[Sequence[SourceRow]]],
        import_id: str,
    ) -> ImportReceipt:
        """The import transaction on PostgreSQL. What ``BEGIN IMMEDIATE`` gives on SQLite, a
        transaction-level advisory lock on the source's name gives here: a second import into
        the same source waits until the first commits, then compares against its records.
        (A row lock cannot serve: a new source has no row yet.) The time is taken once the
        lock is held, so the import log's order is the order imports were stored in."""

        def run(connection: SqliteStyle) -> ImportReceipt:
            connection.execute(
                "SELECT pg_advisory_xact_lock(?, ?)",
                (LOCKS.SOURCE_IMPORTS, _lock_key(batch.source)),
            )
            return _apply(connection, batch, span, chunks(), import_id, utc_now_text())

        try:
            return await backend.write(run)
        except SourceImportError as refused:  # rolled back: noted in a transaction of its own
            with contextlib.suppress(StoreError):
                await backend.write(
                    functools.partial(_log_refusal, batch=batch, span=span, refused=refused)
                )
            raise

    async def note_refusal(
        self, batch: ImportBatch, span: tuple[int, int] | None, refused: SourceImportError
    ) -> None:
        """Note in the import log that a batch was refused before it reached the store (a
        line that did not parse), so health can report it — when the source holds records:
        a refusal into a new (or mistyped) source, or into a store that does not exist,
        writes nothing. ``span`` is the lowest and highest position the batch offered
        (:func:`positions_of`), ``None`` when it offered none. It changes no record. Best
        effort: a store that cannot be opened is left alone, and the caller still raises the
        refusal itself."""

        if isinstance(self.backend, PostgresBackend):
            with contextlib.suppress(StoreError):
                await self.backend.write(
                    functools.partial(_log_refusal, batch=batch, span=span, refused=refused)
                )
            return
        backend = self.backend

        def run() -> None:
            try:
                connection = backend.connect(create=False)
            except StoreError:
                return
            try:
                _note(connection, batch, span, refused)
            finally:
                connection.close()

        await anyio.to_thread.run_sync(run)

    async def head(self, source: str) -> tuple[int, str | None]:
        """The acknowledged position and hash of ``source``; ``(-1, None)`` before the first."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT head_position, head_hash FROM sources WHERE id = ?", (source,)
            ).fetchall()
        )
        return (int(rows[0][0]), str(rows[0][1])) if rows else (-1, None)

    async def health(self, source: str | None = None) -> list[SourceHealth]:
        """Every source (or the one named), in name order; refused-only sources included."""
        found = await self._read(lambda c: health_of(c, source, self._dialect))
        if source is not None and not found:
            raise NotFoundError(
                f"no source {source!r} in the store at {self.backend.location!r}; "
                "`envharness sources` lists them"
            )
        return found

    async def verify(self, source: str | None = None) -> list[SourceBreak]:
        """Re-check the stored chain of every source (or of ``source``) from its bytes, as
        ``envharness verify`` does: each problem by source and position, never raised."""
        found = await self._read(lambda c: verify_sources(c, source, begin=self._dialect.begin))
        return found[2]

    async def episodes(self, source: str) -> list[EpisodeInfo]:
        """The episodes of ``source``, in the order their first records were imported."""
        found = await self._read(lambda c: episodes_of(c, source))
        if not found:
            raise NotFoundError(
                f"no records of source {source!r} in the store at {self.backend.location!r}; "
                "`envharness sources` lists the sources"
            )
        return found

    async def episode(self, source: str, episode: str) -> EpisodeInfo:
        """One episode of ``source``, read through its index: projecting an episode must not
        cost a pass over the whole source (a listing projects every episode)."""
        found = await self._read(lambda c: episodes_of(c, source, episode))
        if found:
            return found[0]
        if (await self.head(source))[0] < 0:
            raise NotFoundError(
                f"no records of source {source!r} in the store at {self.backend.location!r}; "
                "`envharness sources` lists the sources"
            )
        raise NotFoundError(
            f"source {source!r} has no episode {episode!r}; `envharness sources` lists sources"
        )

    async def rows(
        self, source: str, *, episode: str | None = None, after: int = -1, upto: int | None = None
    ) -> AsyncGenerator[SourceRow, None]:
        """``source``'s records (of one ``episode``, when given) with ``after`` < position
        <= ``upto``, in position order, one short read transaction per page."""
        clauses = ["source = ?", "position > ?"]
        extra: list[object] = []
        if episode is not None:
            clauses.append("episode = ?")
            extra.append(episode)
        if upto is not None:
            clauses.append("position <= ?")
            extra.append(upto)
        query = (
            f"SELECT {COLUMNS} FROM source_records WHERE {' AND '.join(clauses)}"
            f" ORDER BY position LIMIT {_PAGE}"
        )
        while True:
            arguments = (source, after, *extra)

            def fetch(connection: _Connection) -> list[SourceRow]:
                return [SourceRow(*row) for row in connection.execute(query, arguments)]  # noqa: B023 - called at once

            page = await self._read(fetch)
            for row in page:
                yield row
            if len(page) < _PAGE:
                return
            after = page[-1].position

    async def _read(self, work: Callable[[Any], _T]) -> _T:
        """``work`` given a ``sqlite3`` connection, or on PostgreSQL one that takes the same
        SQL (:class:`SqliteStyle`): the reads are written once, in SQL both engines run."""
        if isinstance(self.backend, PostgresBackend):
            return await self.backend.read(work)  # the store's opener checked its schema
        if not self._ready:
            # Like read_store: refuse a missing or newer store, migrate an older one.
            backend = self.backend
            opened = await anyio.to_thread.run_sync(lambda: backend.connect(create=False))
            await anyio.to_thread.run_sync(opened.close)
            self._ready = True

        return await self.backend.read(work)


def positions_of(rows: Sequence[SourceRow]) -> tuple[int, int] | None:
    """The lowest and highest position of ``rows`` (``None`` for none), as the log notes them."""
    positions = [row.position for row in rows]
    return (min(positions), max(positions)) if positions else None


def _lock_key(source: str) -> int:
    """The second key of ``source``'s import lock: a signed 32-bit digest of its name (two
    names that share one only wait for each other, never mix)."""
    digest = zlib.crc32(source.encode())
    return digest - (1 << 32) if digest >= 1 << 31 else digest


def _apply(
    connection: _Connection,
    batch: ImportBatch,
    span: tuple[int, int],
    chunks: Iterator[Sequence[SourceRow]],
    import_id: str,
    now: str,
) -> ImportReceipt:
    """Inside the import transaction: compare with what is held, then insert what is new, a
    chunk at a time (the batch is checked: positions ascend densely from ``span[0]``)."""
    source = batch.source
    held = connection.execute(
        "SELECT head_position, head_hash FROM sources WHERE id = ?", (source,)
    ).fetchone()
    head, head_hash = (int(held[0]), str(held[1])) if held else (-1, None)
    first, last = span
    _check_gap(batch, first, head=head)  # a gap leaves nothing at or below the head to compare
    duplicates = stored = 0
    tail: SourceRow | None = None
    for chunk in chunks:
        if chunk[0].position > head:  # all new (the usual case): no per-record comparisons
            if tail is None:
                _check_link(batch, chunk[0], head=head, head_hash=head_hash)
            connection.executemany(_INSERT, [(*row, import_id) for row in chunk])
            stored += len(chunk)
            tail = chunk[-1]
            continue
        held_hashes: dict[int, str] = dict(
            connection.execute(
                "SELECT position, hash FROM source_records WHERE source = ?"
                " AND position BETWEEN ? AND ?",
                (source, chunk[0].position, min(chunk[-1].position, head)),
            ).fetchall()
        )
        new: list[tuple[object, ...]] = []
        for row in chunk:
            if row.position <= head:
                if held_hashes.get(row.position) != row.hash:
                    raise SourceConflictError(
                        f"{_origin(batch)}source {source!r} position {row.position} is already "
                        "imported with "
                        f"hash {held_hashes.get(row.position)}, and this batch sends hash "
                        f"{row.hash} there: a retry with different content. Nothing was "
                        "stored. If the source rewrote its history, import it as a new source "
                        "(another NAME); stored records are never replaced",
                        source=source,
                        position=row.position,
                    )
                duplicates += 1
                continue
            if tail is None and not new:  # the first new record: after every duplicate
                _check_link(batch, row, head=head, head_hash=head_hash)
            new.append((*row, import_id))
        if new:
            connection.executemany(_INSERT, new)
            stored += len(new)
            tail = chunk[-1]
    if tail is not None:
        if held:
            connection.execute(
                "UPDATE sources SET head_position = ?, head_hash = ?, updated_at = ? WHERE id = ?",
                (tail.position, tail.hash, now, source),
            )
        else:
            connection.execute(
                "INSERT INTO sources (id, created_at, updated_at, head_position, head_hash)"
                " VALUES (?, ?, ?, ?, ?)",
                (source, now, now, tail.position, tail.hash),
            )
        head, head_hash = tail.position, tail.hash
    connection.execute(
        _INSERT_IMPORT,
        (
            import_id, source, now, batch.format, batch.importer, batch.origin,
            int(batch.training), first, last, stored, duplicates,
            "stored" if stored else "duplicate", None, None, None,
        ),
    )  # fmt: skip
    assert head_hash is not None  # a non-empty batch leaves a head
    return ImportReceipt(
        import_id=import_id,
        source=source,
        format=batch.format,
        stored=stored,
        duplicates=duplicates,
        first_position=first,
        last_position=last,
        head_position=head,
        head_hash=head_hash,
    )


def _check_gap(batch: ImportBatch, first: int, *, head: int) -> None:
    """Refuse a batch starting at ``first`` that leaves a gap after ``head``."""
    if first > head + 1:
        have = f"it holds positions 0..{head}" if head >= 0 else "it holds no records yet"
        raise SourceChainError(
            f"{_origin(batch)}source {batch.source!r} position {first}: position(s) "
            f"{position_span(head + 1, first - 1)} "
            f"were never imported ({have}); import the missing records first, or resend this "
            f"batch starting at position {head + 1}",
            source=batch.source,
            position=first,
            problem="gap",
        )


def _check_link(batch: ImportBatch, after: SourceRow, *, head: int, head_hash: str | None) -> None:
    """Refuse a batch whose first new record, ``after``, does not link to ``head_hash``.
    (Records at or below the head are compared by hash, before: conflicts say more.)"""
    if after.prev != head_hash:
        raise SourceChainError(
            f"{_origin(batch)}source {batch.source!r} position {after.position}: its prev "
            f"{after.prev!r} is not "
            f"the hash of the acknowledged position {head} ({head_hash}); the batch does not "
            "continue the source's chain: resend it from the source as it was exported",
            source=batch.source,
            position=after.position,
            problem="chain",
        )


def _origin(batch: ImportBatch) -> str:
    """``"run.jsonl: "`` when the batch says where it came from, so errors name the file."""
    return f"{batch.origin}: " if batch.origin else ""


def _note(
    connection: sqlite3.Connection,
    batch: ImportBatch,
    span: tuple[int, int] | None,
    refused: SourceImportError,
) -> None:
    """Log a refused batch in a transaction of its own (the batch's was rolled back).

    Best effort: the log feeds health, and failing to write it (a store locked past the busy
    timeout) must not hide the refusal the caller is about to get.
    """
    with contextlib.suppress(sqlite3.Error):
        _insert_refusal(connection, batch, span, refused)


def _insert_refusal(
    connection: sqlite3.Connection,
    batch: ImportBatch,
    span: tuple[int, int] | None,
    refused: SourceImportError,
) -> None:
    connection.execute("BEGIN IMMEDIATE")
    try:
        _log_refusal(connection, batch=batch, span=span, refused=refused)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _log_refusal(
    connection: _Connection,
    *,
    batch: ImportBatch,
    span: tuple[int, int] | None,
    refused: SourceImportError,
) -> None:
    """Inside a write transaction: the import log's row for a refused batch, when the source
    holds records (a new or mistyped source has no health to count it against)."""
    low, high = span or (None, None)
    known = connection.execute("SELECT 1 FROM sources WHERE id = ?", (batch.source,))
    if known.fetchone() is not None:
        connection.execute(
            _INSERT_IMPORT,
            (
                new_id("imp"), batch.source, utc_now_text(), batch.format, batch.importer,
                batch.origin, int(batch.training), low, high, 0, 0, "refused", str(refused),
                refused.problem, refused.position,
            ),
        )  # fmt: skip
