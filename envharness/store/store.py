"""An open evidence store: a directory with ``evidence.sqlite3`` and ``artifacts/``.

Opening a store migrates it, starts its single journal writer in a task group owned by
:func:`open_store`, and closes everything in order on the way out — the writer drains every
pending append before the connection closes, even when the body was cancelled.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import TypeVar

import anyio

from envharness.errors import StoreError, WalDamageError
from envharness.records import RecordRow
from envharness.store.artifacts import ArtifactFiles
from envharness.store.backend import SqliteBackend
from envharness.store.blobs import read_blob
from envharness.store.connections import close_idle_readers, open_reader
from envharness.store.database import connect
from envharness.store.facts import session_facts_query
from envharness.store.index_reads import IndexReads, ReadDialect
from envharness.store.journal import Journal, Pending
from envharness.store.lineage import Lineage, lineage_of
from envharness.store.reader import (
    AMONG,
    EXPERIMENT_MEMBERS_QUERY,
    RecordFilter,
    SessionInfo,
    among_json,
    iterate_rows,
    session_info,
)
from envharness.store.recovery import recover
from envharness.store.verify import VerifyReport, verify_store

__all__ = ["Store", "open_store", "read_store"]

_T = TypeVar("_T")

SQLITE_READS = ReadDialect(
    placeholder="?",
    by_id_or_prefix=" WHERE id = ? OR substr(id, 1, length(?)) = ? LIMIT 2",
    prefix_arguments=3,
    among=AMONG,
    among_argument=among_json,
    experiment_members=EXPERIMENT_MEMBERS_QUERY,
    session_facts_query=session_facts_query,
    record_row=lambda row: RecordRow(*row),
)


class Store(IndexReads):
    """Reads and writes one store: :func:`open_store` to write, :func:`read_store` to read."""

    _dialect = SQLITE_READS

    def __init__(self, directory: Path, journal: Journal | None = None) -> None:
        self.directory = directory
        self.backend = SqliteBackend(directory)
        """The database, as the store's helpers reach it (``TokenStore(store.backend)``, ...)."""
        self._journal = journal
        self.artifacts = ArtifactFiles(directory / "artifacts")

    @property
    def journal(self) -> Journal:
        if self._journal is None:
            raise StoreError("this store was opened for reading; use open_store() to write to it")
        return self._journal

    # -- writing -------------------------------------------------------------------------------

    async def append(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> None:
        """Commit rows durably (see :meth:`Journal.append`)."""
        await self.journal.append(rows, blobs)

    async def submit(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> Pending:
        """Hand rows to the writer without waiting for the commit (see :meth:`Journal.submit`)."""
        return await self.journal.submit(rows, blobs)

    async def put_artifact(self, data: bytes) -> str:
        """Keep ``data`` as a content-addressed file; returns its sha256."""
        return await anyio.to_thread.run_sync(self.artifacts.put, data)

    # -- reading -------------------------------------------------------------------------------

    @property
    def _named(self) -> str:
        return f"at {str(self.directory)!r}"

    async def _session_infos(self, query: str, arguments: Sequence[object]) -> list[SessionInfo]:
        gone: dict[str, bool] = {}
        return [session_info(row, gone) for row in await self._fetch(query, arguments)]

    def rows(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[RecordRow, None]:
        """Stored rows in ``seq`` order, paged; payloads stay as their digested bytes."""
        return iterate_rows(self.directory, session_id, selection or RecordFilter())

    async def lineage(self, session_id: str) -> Lineage:
        """The session's parent and checkpoint, and the branches made from it."""
        return await self._read(lambda c: lineage_of(c, session_id))

    async def blob(self, digest: str) -> bytes:
        """The canonical bytes of a state blob, decompressed and checked against ``digest``
        in the worker thread that reads them."""
        return await self._read(lambda c: read_blob(c, digest))

    async def verify(
        self, on_session: Callable[[str], None] | None = None, *, full: bool = False
    ) -> VerifyReport:
        """Re-check the database file and every hash chain; ``full`` also checks every index
        against its table (SQLite's ``integrity_check``). See
        :func:`envharness.store.verify.verify_store`."""
        return await self._read(lambda c: verify_store(c, self.artifacts, on_session, full=full))

    async def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self.backend.read(work)


@asynccontextmanager
async def open_store(path: str | PathLike[str], *, create: bool = True) -> AsyncIterator[Store]:
    """Open (and with ``create``, make) the store at ``path`` for the duration of the block.

    The block's own exception comes out as itself, not wrapped in an exception group by the
    task group that hosts the writer.
    """
    directory = Path(path)
    connection = await anyio.to_thread.run_sync(lambda: connect(directory, create=create))
    try:
        journal = Journal(connection, directory)
        try:
            async with anyio.create_task_group() as group:
                try:
                    # The writer is shielded and ends only when the journal closes, so its
                    # start must not be cancelled halfway (TaskGroup.start would then wait
                    # for a writer that cannot end): the handshake is shielded — it is
                    # immediate — and the journal is closed on every way out.
                    with anyio.CancelScope(shield=True):
                        await group.start(journal.run)
                    # What a crashed process left running is marked interrupted before anyone
                    # can try to resume it.
                    await recover(journal.append, directory)
                    yield Store(directory, journal)
                finally:
                    journal.close()
        except BaseExceptionGroup as group_error:
            raise _sole_exception(group_error) from None
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(connection.close)
            await anyio.to_thread.run_sync(close_idle_readers, directory)


async def read_store(path: str | PathLike[str], *, damaged: bool = False) -> Store:
    """A store to read from, without a writer: no task group, so it is safe to hold across
    the ``yield`` of an async generator. Refuses missing and newer stores like ``open_store``,
    and one that lost acknowledged commits (:class:`WalDamageError`) unless ``damaged``: then
    it is read as SQLite's recovery sees it, through read-only connections that change
    nothing — for ``verify``, which reports the loss and checks the rest."""
    directory = Path(path)

    def check() -> None:
        try:
            connect(directory, create=False).close()
        except WalDamageError:
            if not damaged:
                raise
            open_reader(directory).close()

    await anyio.to_thread.run_sync(check)
    return Store(directory)


def _sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real error inside ``group`` (the writer never raises); the group otherwise."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(group)
    return leaves[0] if len(leaves) == 1 else group
