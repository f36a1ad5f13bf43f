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
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Collection,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import msgspec

from envharness.errors import NotFoundError, StoreError, collapse
from envharness.records import Record, RecordRow, RunnerRef, decode_record
from envharness.store.facts import SessionFacts, session_facts
from envharness.store.journal import Pending
from envharness.store.lineage import Lineage, lineage_of
from envharness.store.optimizer_index import (
    HarnessVersionInfo,
    OptimizerRunInfo,
    harness_version_info,
    optimizer_run_info,
)
from envharness.store.postgres import queries
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection, Target, connect, target
from envharness.store.postgres.liveness import owners_gone
from envharness.store.postgres.readers import Readers
from envharness.store.postgres.recovery import recover
from envharness.store.postgres.schema import current_version, migrate, refuse_unreadable
from envharness.store.postgres.verify import verify_chains
from envharness.store.postgres.writer import PostgresJournal
from envharness.store.reader import (
    PAGE_SIZE,
    ExperimentInfo,
    ExperimentMember,
    RecordFilter,
    SessionInfo,
    experiment_infos,
    experiment_member,
    session_info,
)
from envharness.store.verify import VerifyReport

__all__ = ["PostgresStore", "open_postgres_store", "read_postgres_store"]

_T = TypeVar("_T")


class PostgresStore:
    """Reads and writes one PostgreSQL store; made by :func:`open_postgres_store`."""

    def __init__(
        self, where: Target, readers: Readers, journal: PostgresJournal | None = None
    ) -> None:
        self.where = where
        """The database, without its password: what messages name."""
        self._readers = readers
        self._journal = journal

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

    async def artifact(self, sha256: str) -> bytes:
        """An artifact's bytes, checked against its sha256."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT data FROM artifacts WHERE sha256 = %s", (sha256,)
            ).fetchall()
        )
        if not rows:
            raise NotFoundError(
                f"artifact {sha256} is missing from the store {self.where}; run "
                "`envharness verify` to see what else is damaged"
            )
        data = bytes(rows[0][0])
        if hashlib.sha256(data).hexdigest() != sha256:
            raise StoreError(f"artifact {sha256} is corrupt; run `envharness verify`")
        return data

    # -- reading a chain -----------------------------------------------------------------------

    async def sessions(
        self, *, status: str | None = None, experiment_id: str | None = None
    ) -> list[SessionInfo]:
        query = queries.sessions_query(status is not None, experiment_id is not None)
        arguments = [value for value in (status, experiment_id) if value is not None]
        rows, gone = await self._read(lambda c: _with_liveness(c, query, arguments))
        found = [session_info(row, alive) for row, alive in zip(rows, gone, strict=True)]
        return found if status is None else [info for info in found if info.status == status]

    async def session(self, session_id: str) -> SessionInfo:
        """The session with this id, or a unique id prefix; :class:`NotFoundError` otherwise."""
        _require_id("session", session_id)
        query = queries.by_id_or_prefix(f"SELECT {queries.SESSION_COLUMNS} FROM sessions")
        rows, gone = await self._read(lambda c: _with_liveness(c, query, (session_id,) * 2))
        exact = [index for index, row in enumerate(rows) if row[0] == session_id]
        if exact or len(rows) == 1:
            chosen = (exact or [0])[0]
            return session_info(rows[chosen], gone[chosen])
        if rows:
            raise NotFoundError(f"session id prefix {session_id!r} is ambiguous; give more of it")
        raise NotFoundError(
            f"no session {session_id!r} in the store {self.where}; "
            "`envharness sessions list` lists them"
        )

    def rows(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[RecordRow, None]:
        """Stored rows in ``seq`` order, paged (one statement per page)."""
        return self._pages(session_id, selection or RecordFilter())

    async def _pages(
        self, session_id: str, selection: RecordFilter
    ) -> AsyncGenerator[RecordRow, None]:
        query, filters = queries.selected_rows_query(selection)
        after = selection.after
        remaining = selection.limit
        while remaining is None or remaining > 0:
            size = PAGE_SIZE if remaining is None else min(PAGE_SIZE, remaining)
            arguments = (session_id, after, *filters, size)
            page = await self._read(
                functools.partial(_fetch_rows, query=query, arguments=arguments)
            )
            for row in page:
                yield row
            if len(page) < size:
                return
            after = page[-1].seq
            if remaining is not None:
                remaining -= len(page)

    async def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[Record, None]:
        """Decoded records in ``seq`` order, paged."""
        async for row in self.rows(session_id, selection):
            yield decode_record(row)

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

    async def session_owner(self, session_id: str) -> RunnerRef | None:
        """The process running the session's current segment, or ``None`` between segments."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT owner FROM sessions WHERE id = %s", (session_id,)
            ).fetchall()
        )
        if not rows or rows[0][0] is None:
            return None
        return msgspec.json.decode(rows[0][0], type=RunnerRef)

    async def lineage(self, session_id: str) -> Lineage:
        """The session's parent and checkpoint, and the branches made from it."""
        # The SQLite store's own queries, on this connection (dialect.py).
        return await self._read(lambda c: lineage_of(SqliteStyle(c), session_id))  # type: ignore[arg-type]

    # -- reading an index ----------------------------------------------------------------------

    async def experiments(self, *, among: Collection[str] | None = None) -> list[ExperimentInfo]:
        """Every experiment, oldest first (with ``among``, as :meth:`Store.experiments`)."""
        if among is not None and not among:
            return []
        where, arguments = (
            ("", []) if among is None else ("WHERE s.id IN " + queries.AMONG, [sorted(among)])
        )
        query = queries.experiment_query(where)
        return experiment_infos(await self._read(lambda c: c.execute(query, arguments).fetchall()))

    async def experiment(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> ExperimentInfo:
        """The experiment with this id or a unique prefix; :class:`NotFoundError` otherwise."""
        _require_id("experiment", experiment_id)
        query = queries.experiment_query(
            "WHERE e.id IN (SELECT id FROM experiments"
            " WHERE id = %s OR starts_with(id, %s) LIMIT 2)"
            + ("" if among is None else " AND s.id IN " + queries.AMONG)
        )
        arguments: list[object] = [experiment_id, experiment_id]
        if among is not None:
            arguments.append(sorted(among))
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
            f"no experiment {experiment_id!r} in the store {self.where}"
            f"{session if experiment_id.startswith('ses_') else ''}; "
            "`envharness experiments list` lists them"
        )

    async def experiment_sessions(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> list[ExperimentMember]:
        """The sessions of an experiment (only those in ``among``), oldest first."""
        query = queries.EXPERIMENT_MEMBERS + (
            "" if among is None else " AND id IN " + queries.AMONG
        )
        query += " ORDER BY created_at, id"
        arguments: list[object] = [experiment_id]
        if among is not None:
            arguments.append(sorted(among))
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return [experiment_member(row) for row in rows]

    async def session_facts(
        self, *, among: Collection[str] | None = None
    ) -> dict[str, SessionFacts]:
        """Each session's environment, roster and latest verdict (only those in ``among``)."""
        query = queries.session_facts_query(among is not None)
        arguments = [] if among is None else [sorted(among)]
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return dict(session_facts(row) for row in rows)

    async def optimizer_runs(self) -> list[OptimizerRunInfo]:
        """Every optimizer run, oldest first."""
        query = queries.OPTIMIZER_RUNS + " ORDER BY created_at, id"
        rows = await self._read(lambda c: c.execute(query).fetchall())
        return [optimizer_run_info(row) for row in rows]

    async def optimizer_run(self, run_id: str) -> OptimizerRunInfo:
        """The optimizer run with this id or unique prefix; :class:`NotFoundError` otherwise."""
        _require_id("optimizer run", run_id)
        query = queries.by_id_or_prefix(queries.OPTIMIZER_RUNS)
        rows = await self._read(lambda c: c.execute(query, (run_id, run_id)).fetchall())
        found = [optimizer_run_info(row) for row in rows]
        exact = [info for info in found if info.id == run_id]
        if exact or len(found) == 1:
            return (exact or found)[0]
        if found:
            raise NotFoundError(f"optimizer run id prefix {run_id!r} is ambiguous; give more")
        raise NotFoundError(
            f"no optimizer run {run_id!r} in the store {self.where}; "
            "`envharness harness list` lists the runs' versions"
        )

    async def harness_versions(self) -> list[HarnessVersionInfo]:
        """Every accepted harness version, oldest first."""
        query = queries.HARNESS_VERSIONS + " ORDER BY created_at, run_id, seq"
        rows = await self._read(lambda c: c.execute(query).fetchall())
        return [harness_version_info(row) for row in rows]

    # -- following -----------------------------------------------------------------------------

    async def last_position(self) -> int:
        """The position of the newest committed record; -1 when empty. Positions are handed
        out in commit order across runners (:mod:`.writer`), so every record committed later
        has a greater one."""
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
        """As :meth:`Store.experiment_rows`: records of these ``kinds`` in the experiment's
        chain and its sessions, ``after`` < pos <= ``upto``, in pos order, at most ``limit``."""
        query = queries.experiment_rows_query(len(kinds), among is not None)
        arguments: list[object] = [after, upto, *kinds, experiment_id, experiment_id]
        if among is not None:
            arguments.append(sorted(among))
        arguments.append(limit)
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        return [(int(row[0]), _row(row[1:])) for row in rows]

    # -- checking ------------------------------------------------------------------------------

    async def verify(
        self, on_session: Callable[[str], None] | None = None, *, full: bool = False
    ) -> VerifyReport:
        """Re-check every chain in one snapshot (:mod:`.verify`). ``full`` asks no more here:
        the server checks its own files."""
        return await self._read(lambda c: verify_chains(c, on_session))

    async def _read(self, work: Callable[[Connection], _T]) -> _T:
        return await self._readers.read(work)


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
    readers = Readers(connector, where)
    journal = PostgresJournal(connector, where)
    try:
        try:
            async with anyio.create_task_group() as group:
                try:
                    with anyio.CancelScope(shield=True):
                        await group.start(journal.run)
                    await recover(journal, readers)
                    yield PostgresStore(where, readers, journal)
                finally:
                    journal.close()
        except BaseExceptionGroup as group_error:
            raise collapse(group_error) from None
    finally:
        with anyio.CancelScope(shield=True):
            await journal.aclose()
            await readers.aclose()


@asynccontextmanager
async def read_postgres_store(url: str) -> AsyncIterator[PostgresStore]:
    """The store at ``url`` to read from, without a writer, owner locks or recovery: what a
    viewer whose role may only ``SELECT`` opens. Refuses a database without a store and a
    newer one, as :func:`open_postgres_store` does."""
    where = target(url)

    def check() -> None:
        connection = connect(url)
        try:
            found = current_version(connection)
        finally:
            connection.close()
        refuse_unreadable(found, where)

    await anyio.to_thread.run_sync(check)
    readers = Readers(lambda: connect(url), where)
    try:
        yield PostgresStore(where, readers)
    finally:
        await readers.aclose()


def _with_liveness(
    connection: Connection, query: str, arguments: Sequence[object]
) -> tuple[list[tuple[object, ...]], list[dict[str, bool]]]:
    """Session index rows, and whether each runner they name is gone (:mod:`.liveness`)."""
    rows = connection.execute(query, arguments).fetchall()
    return rows, owners_gone(connection, rows)


def _fetch_rows(
    connection: Connection, *, query: str, arguments: Sequence[object]
) -> list[RecordRow]:
    return [_row(raw) for raw in connection.execute(query, arguments).fetchall()]


def _row(raw: Sequence[object]) -> RecordRow:
    """A stored row as the SQLite store gives it (``bytea`` comes back as ``bytes``)."""
    session_id, seq, kind, turn, participant, at, payload, prev, digest = raw
    return RecordRow(
        str(session_id),
        int(str(seq)),
        str(kind),
        None if turn is None else int(str(turn)),
        None if participant is None else str(participant),
        str(at),
        bytes(payload),  # type: ignore[call-overload]
        None if prev is None else str(prev),
        str(digest),
    )


def _require_id(what: str, given: str) -> None:
    """An empty id is a prefix of every id: refused, so it never picks "the only one"."""
    if not given.strip():
        raise NotFoundError(f"an empty {what} id names no {what}; give its id or a unique prefix")
