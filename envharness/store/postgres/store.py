"""An open PostgreSQL store: the same async methods, and the same return types, as
:class:`envharness.store.Store`, on a database that several runners on several hosts write to
at once (different sessions) and one viewer reads.

:func:`open_postgres_store` connects, migrates, starts this runner's one writer
(:mod:`.writer`) in a task group it owns, and recovers the chains whose runner is gone
(:mod:`.recovery`) before the block runs; on the way out the writer drains every pending
append before its connection — and the owner locks it holds — closes, even when the body was
cancelled.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import TypeVar

import anyio

from envharness.errors import NotFoundError, StoreError, collapse
from envharness.records import RecordRow
from envharness.store.index_reads import IndexReads
from envharness.store.journal import Pending
from envharness.store.lineage import Lineage, lineage_of
from envharness.store.postgres import queries
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection, Target, connect, target
from envharness.store.postgres.liveness import owners_gone
from envharness.store.postgres.recovery import recover
from envharness.store.postgres.schema import current_version, migrate, refuse_unreadable
from envharness.store.postgres.verify import verify_chains
from envharness.store.postgres.writer import PostgresJournal
from envharness.store.reader import RecordFilter, SessionInfo, pages, session_info
from envharness.store.verify import VerifyReport

__all__ = ["PostgresStore", "open_postgres_store", "read_postgres_store"]

_T = TypeVar("_T")


class PostgresStore(IndexReads):
    """Reads and writes one PostgreSQL store; made by :func:`open_postgres_store`."""

    _dialect = queries.POSTGRES_READS

    def __init__(
        self,
        where: Target,
        backend: PostgresBackend,
        journal: PostgresJournal | None = None,
    ) -> None:
        self.where = where
        """The database, without its password: what messages name."""
        self._journal = journal
        self.backend = backend
        """The database in the shape the helpers beside the store take (snapshots, datasets,
        stop and pause requests), as ``Store.backend`` is SQLite's; the store's own reads go
        through its kept connections too, so one open store holds one small pool."""

    @property
    def journal(self) -> PostgresJournal:
        if self._journal is None:
            raise StoreError(
                "this store was opened for reading; use open_postgres_store() to write to it"
            )
        return self._journal

    # -- writing -------------------------------------------------------------------------------

    async def append(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> None:
        """Commit rows durably (see :meth:`PostgresJournal.append`)."""
        await self.journal.append(rows, blobs)

    async def submit(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> Pending:
        """Hand rows to the writer without waiting for the commit."""
        return await self.journal.submit(rows, blobs)

    async def put_artifact(self, data: bytes) -> str:
        """Keep ``data`` content-addressed in the ``artifacts`` table; returns its sha256.

        Committed when this returns (one statement in autocommit), before any record can cite
        it, as an artifact file is written before its record on SQLite."""
        sha256 = hashlib.sha256(data).hexdigest()
        await self._read(
            lambda c: c.execute(
                "INSERT INTO artifacts (sha256, data) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (sha256, data),
            )
        )
        return sha256

    # -- reading a chain -----------------------------------------------------------------------

    @property
    def _named(self) -> str:
        return str(self.where)

    async def _session_infos(self, query: str, arguments: Sequence[object]) -> list[SessionInfo]:
        rows, gone = await self._read(lambda c: _with_liveness(c, query, arguments))
        return [session_info(row, alive) for row, alive in zip(rows, gone, strict=True)]

    def rows(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[RecordRow, None]:
        """Stored rows in ``seq`` order, paged (one statement per page)."""
        return self._pages(session_id, selection or RecordFilter())

    async def _pages(
        self, session_id: str, selection: RecordFilter
    ) -> AsyncGenerator[RecordRow, None]:
        query, filters = queries.selected_rows_query(selection)

        async def fetch(after: int, size: int) -> list[RecordRow]:
            arguments = (session_id, after, *filters, size)
            return await self._read(
                functools.partial(_fetch_rows, query=query, arguments=arguments)
            )

        async with aclosing(pages(selection, fetch)) as found:
            async for page in found:
                for row in page:
                    yield row

    async def blob(self, digest: str) -> bytes:
        rows = await self._read(
            lambda c: c.execute("SELECT data FROM blobs WHERE digest = %s", (digest,)).fetchall()
        )
        if not rows:
            raise NotFoundError(f"no state blob {digest} in the store")
        data = bytes(rows[0][0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"state blob {digest} is corrupt; run `envharness verify`")
        return data

    async def lineage(self, session_id: str) -> Lineage:
        """The session's parent and checkpoint, and the branches made from it."""
        # The SQLite store's own queries, on this connection (dialect.py).
        return await self._read(lambda c: lineage_of(SqliteStyle(c), session_id))  # type: ignore[arg-type]

    # -- checking ------------------------------------------------------------------------------

    async def verify(
        self, on_session: Callable[[str], None] | None = None, *, full: bool = False
    ) -> VerifyReport:
        """Re-check every chain in one snapshot (:mod:`.verify`). ``full`` asks no more here:
        the server checks its own files."""
        return await self._read(lambda c: verify_chains(c, on_session))

    async def _read(self, work: Callable[[Connection], _T]) -> _T:
        return await self.backend.read_native(work)


@asynccontextmanager
async def open_postgres_store(url: str, *, create: bool = True) -> AsyncIterator[PostgresStore]:
    """Open (and with ``create``, set up) the store in the database at ``url`` for the block.

    The block's own exception comes out as itself, not wrapped in an exception group.
    """
    where = target(url)

    def connector() -> Connection:
        return connect(url)

    def prepare() -> None:
        connection = connect(url)
        try:
            migrate(connection, where, create=create)
        finally:
            connection.close()

    await anyio.to_thread.run_sync(prepare)
    journal = PostgresJournal(connector, where)
    backend = PostgresBackend(url, keep=True)
    try:
        try:
            async with anyio.create_task_group() as group:
                try:
                    with anyio.CancelScope(shield=True):
                        await group.start(journal.run)
                    await recover(journal, backend)
                    yield PostgresStore(where, backend, journal)
                finally:
                    journal.close()
        except BaseExceptionGroup as group_error:
            raise collapse(group_error) from None
    finally:
        with anyio.CancelScope(shield=True):
            await journal.aclose()
            await backend.aclose(final=True)


@asynccontextmanager
async def read_postgres_store(url: str) -> AsyncIterator[PostgresStore]:
    """The store at ``url`` to read from, without a writer, owner locks or recovery: what a
    viewer whose role may only ``SELECT`` opens. Refuses a database without a store and a
    newer one, as :func:`open_postgres_store` does."""
    where = target(url)

    def check() -> None:
        connection = connect(url)
        try:
            found = current_version(connection, where)
        finally:
            connection.close()
        refuse_unreadable(found, where)

    await anyio.to_thread.run_sync(check)
    backend = PostgresBackend(url, keep=True)
    try:
        yield PostgresStore(where, backend)
    finally:
        await backend.aclose(final=True)


def _with_liveness(
    connection: Connection, query: str, arguments: Sequence[object]
) -> tuple[list[tuple[object, ...]], list[dict[str, bool]]]:
    """Session index rows, and whether each runner they name is gone (:mod:`.liveness`)."""
    rows = connection.execute(query, arguments).fetchall()
    return rows, owners_gone(connection, rows)


def _fetch_rows(
    connection: Connection, *, query: str, arguments: Sequence[object]
) -> list[RecordRow]:
    return [queries.record_row(raw) for raw in connection.execute(query, arguments).fetchall()]
