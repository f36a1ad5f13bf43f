"""An open evidence store: a directory with ``evidence.sqlite3`` and ``artifacts/``.

Opening a store migrates it, starts its single journal writer in a task group owned by
:func:`open_store`, and closes everything in order on the way out — the writer drains every
pending append before the connection closes, even when the body was cancelled.
"""

from __future__ import annotations

import sqlite3
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Collection,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec

from envharness.errors import NotFoundError, StoreError, WalDamageError
from envharness.records import Record, RecordRow, RunnerRef, decode_record
from envharness.store.artifacts import ArtifactFiles
from envharness.store.backend import SqliteBackend
from envharness.store.blobs import read_blob
from envharness.store.connections import close_idle_readers, open_reader
from envharness.store.database import connect
from envharness.store.facts import SessionFacts, session_facts, session_facts_query
from envharness.store.journal import Journal, Pending
from envharness.store.lineage import Lineage, lineage_of
from envharness.store.optimizer_index import (
    HARNESS_VERSIONS_QUERY,
    OPTIMIZER_RUNS_QUERY,
    HarnessVersionInfo,
    OptimizerRunInfo,
    harness_version_info,
    optimizer_run_info,
)
from envharness.store.owners import ENDED
from envharness.store.reader import (
    AMONG,
    EXPERIMENT_MEMBERS_QUERY,
    EXPERIMENT_QUERY,
    PAGE_SIZE,
    SESSION_COLUMNS,
    ExperimentInfo,
    ExperimentMember,
    RecordFilter,
    SessionInfo,
    among_json,
    experiment_infos,
    experiment_member,
    experiment_rows_query,
    iterate_rows,
    session_info,
)
from envharness.store.recovery import recover
from envharness.store.verify import VerifyReport, verify_store

__all__ = ["Store", "open_store", "read_store"]

_T = TypeVar("_T")


class Store:
    """Reads and writes one store: :func:`open_store` to write, :func:`read_store` to read."""

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

    async def sessions(
        self, *, status: str | None = None, experiment_id: str | None = None
    ) -> list[SessionInfo]:
        clauses, parameters = [], []
        if status is not None:
            # Also the unended sessions of a runner that may be gone: they are shown (and so
            # selected) by the status they are shown with (SessionInfo).
            ended = ", ".join(f"'{name}'" for name in sorted(ENDED))
            clauses.append(f"(status = ? OR (owner IS NOT NULL AND status NOT IN ({ended})))")
            parameters.append(status)
        if experiment_id is not None:
            clauses.append("experiment_id = ?")
            parameters.append(experiment_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        query = f"SELECT {SESSION_COLUMNS} FROM sessions{where} ORDER BY created_at, id"
        rows = await self._read(lambda c: c.execute(query, parameters).fetchall())
        gone: dict[str, bool] = {}
        found = [session_info(row, gone) for row in rows]
        return found if status is None else [info for info in found if info.status == status]

    async def session(self, session_id: str) -> SessionInfo:
        """The session with this id, or a unique id prefix; :class:`NotFoundError` otherwise."""
        _require_id("session", session_id)
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
            "`envharness sessions list` lists them"
        )

    async def experiments(self, *, among: Collection[str] | None = None) -> list[ExperimentInfo]:
        """Every experiment, oldest first, with its sessions counted by status.

        With ``among`` (session ids), only experiments with at least one of those sessions,
        and only those sessions counted.
        """
        if among is not None and not among:
            return []
        where, arguments = (
            ("", []) if among is None else ("WHERE s.id IN " + AMONG, [among_json(among)])
        )
        query = EXPERIMENT_QUERY.format(where=where)
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return experiment_infos(rows)

    async def experiment(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> ExperimentInfo:
        """The experiment with this id, or a unique id prefix; :class:`NotFoundError` otherwise.

        With ``among`` (session ids), as :meth:`experiments` sees it: an experiment with none
        of those sessions is not found.
        """
        _require_id("experiment", experiment_id)
        query = EXPERIMENT_QUERY.format(
            where="WHERE e.id IN (SELECT id FROM experiments"
            " WHERE id = ? OR substr(id, 1, length(?)) = ? LIMIT 2)"
            + ("" if among is None else " AND s.id IN " + AMONG)
        )
        arguments: tuple[str, ...] = (experiment_id, experiment_id, experiment_id)
        if among is not None:
            arguments += (among_json(among),)
        found = experiment_infos(await self._read(lambda c: c.execute(query, arguments).fetchall()))
        exact = [info for info in found if info.id == experiment_id]
        if exact or len(found) == 1:
            return (exact or found)[0]
        if found:
            raise NotFoundError(
                f"experiment id prefix {experiment_id!r} is ambiguous; give more of it"
            )
        session = " (that is a session id; `envharness show` shows a session)"
        raise NotFoundError(
            f"no experiment {experiment_id!r} in the store at {str(self.directory)!r}"
            f"{session if experiment_id.startswith('ses_') else ''}; "
            "`envharness experiments list` lists them"
        )

    async def experiment_sessions(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> list[ExperimentMember]:
        """The sessions of an experiment (only those in ``among``, when given), oldest first,
        each with the trial and seed its ``session.created`` froze."""
        query = EXPERIMENT_MEMBERS_QUERY + ("" if among is None else " AND id IN " + AMONG)
        query += " ORDER BY created_at, id"
        arguments = [experiment_id] if among is None else [experiment_id, among_json(among)]
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return [experiment_member(row) for row in rows]

    async def session_facts(
        self, *, among: Collection[str] | None = None
    ) -> dict[str, SessionFacts]:
        """Each session's environment, roster and latest verdict (only those in ``among``,
        when given), by id: what the sessions list shows and searches."""
        query = session_facts_query(among is not None)
        arguments = [] if among is None else [among_json(among)]
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return dict(session_facts(row) for row in rows)

    async def last_position(self) -> int:
        """The store-wide position (``pos``) of the newest committed record; -1 when empty.

        Positions grow in commit order (one writer at a time, records never deleted), so every
        record committed later has a greater one: a reader that has seen everything up to a
        position misses nothing by asking for what comes after it.
        """
        rows = await self._read(
            lambda c: c.execute("SELECT COALESCE(MAX(pos), -1) FROM records").fetchall()
        )
        return int(rows[0][0])

    async def experiment_rows(
        self,
        experiment_id: str,
        *,
        kinds: Collection[str],
        after: int,
        upto: int,
        among: Collection[str] | None = None,
        limit: int = PAGE_SIZE,
    ) -> list[tuple[int, RecordRow]]:
        """Records of these ``kinds`` in the experiment's own chain and in its sessions (only
        those in ``among``, when given), with ``after`` < pos <= ``upto``, in pos order, at most
        ``limit``; each with its pos."""
        query = experiment_rows_query(len(kinds), among is not None)
        arguments: list[object] = [after, upto, *kinds, experiment_id, experiment_id]
        if among is not None:
            arguments.append(among_json(among))
        arguments.append(limit)
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return [(int(row[0]), RecordRow(*row[1:])) for row in rows]

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

    async def lineage(self, session_id: str) -> Lineage:
        """The session's parent and checkpoint, and the branches made from it."""
        return await self._read(lambda c: lineage_of(c, session_id))

    async def optimizer_runs(self) -> list[OptimizerRunInfo]:
        """Every optimizer run, oldest first (the index; each run's chain is its evidence)."""
        query = OPTIMIZER_RUNS_QUERY + " ORDER BY created_at, id"
        rows = await self._read(lambda c: c.execute(query).fetchall())
        return [optimizer_run_info(row) for row in rows]

    async def optimizer_run(self, run_id: str) -> OptimizerRunInfo:
        """The optimizer run with this id or unique prefix; :class:`NotFoundError` otherwise."""
        _require_id("optimizer run", run_id)
        query = OPTIMIZER_RUNS_QUERY + " WHERE id = ? OR substr(id, 1, length(?)) = ? LIMIT 2"
        rows = await self._read(lambda c: c.execute(query, (run_id, run_id, run_id)).fetchall())
        found = [optimizer_run_info(row) for row in rows]
        exact = [info for info in found if info.id == run_id]
        if exact or len(found) == 1:
            return (exact or found)[0]
        if found:
            raise NotFoundError(f"optimizer run id prefix {run_id!r} is ambiguous; give more")
        raise NotFoundError(
            f"no optimizer run {run_id!r} in the store at {str(self.directory)!r}; "
            "`envharness harness list` lists the runs' versions"
        )

    async def harness_versions(self) -> list[HarnessVersionInfo]:
        """Every accepted harness version, oldest first."""
        query = HARNESS_VERSIONS_QUERY + " ORDER BY created_at, run_id, seq"
        rows = await self._read(lambda c: c.execute(query).fetchall())
        return [harness_version_info(row) for row in rows]

    async def session_owner(self, session_id: str) -> RunnerRef | None:
        """The process running the session's current segment, or ``None`` between segments."""
        rows = await self._read(
            lambda c: c.execute("SELECT owner FROM sessions WHERE id = ?", (session_id,)).fetchall()
        )
        if not rows or rows[0][0] is None:
            return None
        return msgspec.json.decode(rows[0][0], type=RunnerRef)

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


def _require_id(what: str, given: str) -> None:
    """An empty id is a prefix of every id: refused, so it can never pick "the only one"."""
    if not given.strip():
        raise NotFoundError(f"an empty {what} id names no {what}; give its id or a unique prefix")
