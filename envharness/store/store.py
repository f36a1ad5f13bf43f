"""An open evidence store: a directory with ``evidence.sqlite3`` and ``artifacts/``.

Opening a store migrates it, starts its single journal writer in a task group owned by
:func:`open_store`, and closes everything in order on the way out — the writer drains every
pending append before the connection closes, even when the body was cancelled.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import TypeVar

import anyio

from envharness.errors import NotFoundError, StoreError
from envharness.records import Record, RecordRow, decode_record
from envharness.store.artifacts import ArtifactFiles
from envharness.store.journal import Journal
from envharness.store.reader import (
    SESSION_COLUMNS,
    RecordFilter,
    SessionInfo,
    iterate_rows,
    open_reader,
    session_info,
)
from envharness.store.schema import connect, translate_sqlite_error
from envharness.store.verify import VerifyReport, verify_store

__all__ = ["Store", "open_store", "read_store"]

_T = TypeVar("_T")


class Store:
    """Reads and writes one store: :func:`open_store` to write, :func:`read_store` to read."""

    def __init__(self, directory: Path, journal: Journal | None = None) -> None:
        self.directory = directory
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

    async def put_artifact(self, data: bytes) -> str:
        """Keep ``data`` as a content-addressed file; returns its sha256."""
        return await anyio.to_thread.run_sync(self.artifacts.put, data)

    # -- reading -------------------------------------------------------------------------------

    async def sessions(
        self, *, status: str | None = None, experiment_id: str | None = None
    ) -> list[SessionInfo]:
        clauses, parameters = [], []
        if status is not None:
            clauses.append("status = ?")
            parameters.append(status)
        if experiment_id is not None:
            clauses.append("experiment_id = ?")
            parameters.append(experiment_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        query = f"SELECT {SESSION_COLUMNS} FROM sessions{where} ORDER BY created_at, id"
        rows = await self._read(lambda c: c.execute(query, parameters).fetchall())
        return [session_info(row) for row in rows]

    async def session(self, session_id: str) -> SessionInfo:
        """The session with this id, or a unique id prefix; :class:`NotFoundError` otherwise."""
        query = (
            f"SELECT {SESSION_COLUMNS} FROM sessions"
            " WHERE id = ? OR substr(id, 1, length(?)) = ? LIMIT 2"
        )
        arguments = (session_id, session_id, session_id)
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        exact = [row for row in rows if row[0] == session_id]
        if exact:
            return session_info(exact[0])
        if len(rows) == 1:
            return session_info(rows[0])
        if rows:
            raise NotFoundError(f"session id prefix {session_id!r} is ambiguous; give more of it")
        raise NotFoundError(
            f"no session {session_id!r} in the store at {str(self.directory)!r}; "
            "`envharness sessions` lists them"
        )

    def rows(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[RecordRow, None]:
        """Stored rows in ``seq`` order, paged; payloads stay as their digested bytes."""
        return iterate_rows(self.directory, session_id, selection or RecordFilter())

    async def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[Record, None]:
        """Decoded records in ``seq`` order, paged."""
        async for row in self.rows(session_id, selection):
            yield decode_record(row)

    async def blob(self, digest: str) -> bytes:
        rows = await self._read(
            lambda c: c.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchall()
        )
        if not rows:
            raise NotFoundError(f"no state blob {digest} in the store")
        data = rows[0][0]
        if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(f"state blob {digest} is corrupt; run `envharness verify`")
        return data

    async def verify(self, on_session: Callable[[str], None] | None = None) -> VerifyReport:
        """Re-check every hash chain; see :func:`envharness.store.verify.verify_store`."""
        return await self._read(lambda c: verify_store(c, self.artifacts, on_session))

    async def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        def run() -> _T:
            connection: sqlite3.Connection | None = None
            try:
                connection = open_reader(self.directory)
                return work(connection)
            except sqlite3.Error as exc:
                raise translate_sqlite_error(exc, self.directory) from exc
            finally:
                if connection is not None:
                    connection.close()

        # Reads change nothing, so a cancelled caller need not wait for the thread to finish.
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)


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
                await group.start(journal.run)
                try:
                    yield Store(directory, journal)
                finally:
                    journal.close()
        except BaseExceptionGroup as group_error:
            raise _sole_exception(group_error) from None
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(connection.close)


async def read_store(path: str | PathLike[str]) -> Store:
    """A store to read from, without a writer: no task group, so it is safe to hold across
    the ``yield`` of an async generator. Refuses missing and newer stores like ``open_store``."""
    directory = Path(path)
    connection = await anyio.to_thread.run_sync(lambda: connect(directory, create=False))
    await anyio.to_thread.run_sync(connection.close)
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
