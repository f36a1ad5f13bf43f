"""The index reads every store engine answers alike, written once.

What a lookup by id prefix refuses, how a listing filters by status, and which message names a
missing experiment are the store's rules, not an engine's: SQLite's :class:`~envharness.store.Store`
and PostgreSQL's store both subclass :class:`IndexReads`, and give it only what differs between
them — the spelling of their queries (:class:`ReadDialect`), how a statement is run, how
a listing learns whether a runner is gone, and how messages name the store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec

from envharness.errors import NotFoundError
from envharness.records import Record, RecordRow, RunnerRef, decode_record
from envharness.store.facts import SessionFacts, session_facts
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
    EXPERIMENT_QUERY,
    PAGE_SIZE,
    SESSION_COLUMNS,
    ExperimentInfo,
    ExperimentMember,
    RecordFilter,
    SessionInfo,
    experiment_infos,
    experiment_member,
)

__all__ = ["IndexReads", "ReadDialect", "require_id"]

_T = TypeVar("_T")


REPORT_PAGE = 2000
"""Records a page of :meth:`IndexReads.experiment_rows_so_far` holds: few round trips for a
report over thousands of sessions, a few MB of rows at most."""


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


_Info = TypeVar("_Info", bound=_Identified)

_ENDED = ", ".join(f"'{name}'" for name in sorted(ENDED))


@dataclass(frozen=True, slots=True)
class ReadDialect:
    """How one engine spells the index queries: the rest of a read is shared."""

    placeholder: str
    """A bound argument: ``?`` or ``%s``."""
    by_id_or_prefix: str
    """The clause that narrows a query to one id or the ids it prefixes, two rows at most
    (so an ambiguous prefix shows), binding the id :attr:`prefix_arguments` times."""
    prefix_arguments: int
    among: str
    """A SQL set of ids, bound to one argument made by :attr:`among_argument`."""
    among_argument: Callable[[Collection[str]], object]
    experiment_members: str
    session_facts_query: Callable[[bool], str]
    record_row: Callable[[Sequence[Any]], RecordRow]
    """A stored row as the engine returns it, as a :class:`RecordRow`."""


class IndexReads(ABC):
    """The reads of a store's indexes (sessions, experiments, optimizer runs, facts), for
    any engine that supplies the abstract members."""

    _dialect: ReadDialect

    @property
    @abstractmethod
    def _named(self) -> str:
        """The store as messages name it after "in the store"."""

    @abstractmethod
    async def _read(self, work: Callable[[Any], _T]) -> _T:
        """``work(connection)`` on one of the engine's read connections, in a worker thread."""

    @abstractmethod
    async def _session_infos(self, query: str, arguments: Sequence[object]) -> list[SessionInfo]:
        """The sessions a :data:`SESSION_COLUMNS` query selects, each shown with the status
        it is shown with (a runner that is gone is detected as the engine can)."""

    @abstractmethod
    def rows(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[RecordRow, None]:
        """Stored rows in ``seq`` order, paged; payloads stay as their digested bytes."""

    async def sessions(
        self, *, status: str | None = None, experiment_id: str | None = None
    ) -> list[SessionInfo]:
        p = self._dialect.placeholder
        clauses, arguments = [], []
        if status is not None:
            # Also the unended sessions of a runner that may be gone: they are shown (and so
            # selected) by the status they are shown with (SessionInfo).
            clauses.append(f"(status = {p} OR (owner IS NOT NULL AND status NOT IN ({_ENDED})))")
            arguments.append(status)
        if experiment_id is not None:
            clauses.append(f"experiment_id = {p}")
            arguments.append(experiment_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        query = f"SELECT {SESSION_COLUMNS} FROM sessions{where} ORDER BY created_at, id"
        found = await self._session_infos(query, arguments)
        return found if status is None else [info for info in found if info.status == status]

    async def session(self, session_id: str) -> SessionInfo:
        """The session with this id, or a unique id prefix; :class:`NotFoundError` otherwise."""
        require_id("session", session_id)
        query = f"SELECT {SESSION_COLUMNS} FROM sessions" + self._dialect.by_id_or_prefix
        found = await self._session_infos(query, self._prefix_arguments(session_id))
        return self._only(
            found,
            session_id,
            "session",
            more="give more of it",
            listing="`envharness sessions list` lists them",
        )

    async def experiments(self, *, among: Collection[str] | None = None) -> list[ExperimentInfo]:
        """Every experiment, oldest first, with its sessions counted by status.

        With ``among`` (session ids), only experiments with at least one of those sessions,
        and only those sessions counted.
        """
        if among is not None and not among:
            return []
        where, arguments = (
            ("", [])
            if among is None
            else ("WHERE s.id IN " + self._dialect.among, [self._dialect.among_argument(among)])
        )
        query = EXPERIMENT_QUERY.format(where=where)
        return experiment_infos(await self._fetch(query, arguments))

    async def experiment(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> ExperimentInfo:
        """The experiment with this id, or a unique id prefix; :class:`NotFoundError` otherwise.

        With ``among`` (session ids), as :meth:`experiments` sees it: an experiment with none
        of those sessions is not found.
        """
        require_id("experiment", experiment_id)
        query = EXPERIMENT_QUERY.format(
            where="WHERE e.id IN (SELECT id FROM experiments"
            + self._dialect.by_id_or_prefix
            + ")"
            + ("" if among is None else " AND s.id IN " + self._dialect.among)
        )
        arguments = self._prefix_arguments(experiment_id)
        if among is not None:
            arguments.append(self._dialect.among_argument(among))
        session = " (that is a session id; `envharness show` shows a session)"
        return self._only(
            experiment_infos(await self._fetch(query, arguments)),
            experiment_id,
            "experiment",
            more="give more of it",
            listing="`envharness experiments list` lists them",
            hint=session if experiment_id.startswith("ses_") else "",
        )

    async def experiment_sessions(
        self, experiment_id: str, *, among: Collection[str] | None = None
    ) -> list[ExperimentMember]:
        """The sessions of an experiment (only those in ``among``, when given), oldest first,
        each with the trial and seed its ``session.created`` froze."""
        query = self._dialect.experiment_members
        arguments: list[object] = [experiment_id]
        if among is not None:
            query += " AND id IN " + self._dialect.among
            arguments.append(self._dialect.among_argument(among))
        rows = await self._fetch(query + " ORDER BY created_at, id", arguments)
        return [experiment_member(row) for row in rows]

    async def session_facts(
        self, *, among: Collection[str] | None = None
    ) -> dict[str, SessionFacts]:
        """Each session's environment, roster and latest verdict (only those in ``among``,
        when given), by id: what the sessions list shows and searches."""
        query = self._dialect.session_facts_query(among is not None)
        arguments = [] if among is None else [self._dialect.among_argument(among)]
        return dict(session_facts(row) for row in await self._fetch(query, arguments))

    async def last_position(self) -> int:
        """The store-wide position (``pos``) of the newest committed record; -1 when empty.

        Positions grow in commit order (one commit at a time, records never deleted), so every
        record committed later has a greater one: a reader that has seen everything up to a
        position misses nothing by asking for what comes after it.
        """
        rows = await self._fetch("SELECT COALESCE(MAX(pos), -1) FROM records", ())
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
        p = self._dialect.placeholder
        sessions = f"SELECT id FROM sessions WHERE experiment_id = {p}"
        if among is not None:
            sessions += " AND id IN " + self._dialect.among
        listed = ", ".join([p] * len(kinds))
        query = (
            "SELECT pos, session_id, seq, kind, turn, participant, at, payload, prev, digest"
            f" FROM records WHERE pos > {p} AND pos <= {p} AND kind IN ({listed})"
            f" AND session_id IN (SELECT {p} UNION ALL {sessions}) ORDER BY pos LIMIT {p}"
        )
        arguments: list[object] = [after, upto, *kinds, experiment_id, experiment_id]
        if among is not None:
            arguments.append(self._dialect.among_argument(among))
        arguments.append(limit)
        rows = await self._fetch(query, arguments)
        return [(int(row[0]), self._dialect.record_row(row[1:])) for row in rows]

    async def experiment_rows_so_far(
        self, experiment_id: str, *, kinds: Collection[str], page: int = REPORT_PAGE
    ) -> AsyncGenerator[RecordRow, None]:
        """Every record of these ``kinds`` in the experiment's chain and its sessions that was
        committed when the read began, in pos order, ``page`` at a time: what a report or a
        trace folds, at constant memory whatever the experiment's size, describing one moment
        (a record committed meanwhile is not half-counted). Close it (``aclosing``) when not
        read to its end."""
        upto = await self.last_position()
        after = -1
        while True:
            rows = await self.experiment_rows(
                experiment_id, kinds=kinds, after=after, upto=upto, limit=page
            )
            for _, row in rows:
                yield row
            if len(rows) < page:
                return
            after = rows[-1][0]

    async def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[Record, None]:
        """Decoded records in ``seq`` order, paged."""
        async for row in self.rows(session_id, selection):
            yield decode_record(row)

    async def optimizer_runs(self) -> list[OptimizerRunInfo]:
        """Every optimizer run, oldest first (the index; each run's chain is its evidence)."""
        rows = await self._fetch(OPTIMIZER_RUNS_QUERY + " ORDER BY created_at, id", ())
        return [optimizer_run_info(row) for row in rows]

    async def optimizer_run(self, run_id: str) -> OptimizerRunInfo:
        """The optimizer run with this id or unique prefix; :class:`NotFoundError` otherwise."""
        require_id("optimizer run", run_id)
        query = OPTIMIZER_RUNS_QUERY + self._dialect.by_id_or_prefix
        found = [
            optimizer_run_info(row)
            for row in await self._fetch(query, self._prefix_arguments(run_id))
        ]
        return self._only(
            found,
            run_id,
            "optimizer run",
            more="give more",
            listing="`envharness harness list` lists the runs' versions",
        )

    async def harness_versions(self) -> list[HarnessVersionInfo]:
        """Every accepted harness version, oldest first."""
        rows = await self._fetch(HARNESS_VERSIONS_QUERY + " ORDER BY created_at, run_id, seq", ())
        return [harness_version_info(row) for row in rows]

    async def session_owner(self, session_id: str) -> RunnerRef | None:
        """The process running the session's current segment, or ``None`` between segments."""
        query = f"SELECT owner FROM sessions WHERE id = {self._dialect.placeholder}"
        rows = await self._fetch(query, (session_id,))
        if not rows or rows[0][0] is None:
            return None
        return msgspec.json.decode(rows[0][0], type=RunnerRef)

    async def _fetch(self, query: str, arguments: Sequence[object]) -> list[Sequence[Any]]:
        rows: list[Sequence[Any]] = await self._read(
            lambda c: c.execute(query, arguments).fetchall()
        )
        return rows

    def _prefix_arguments(self, given: str) -> list[object]:
        return [given] * self._dialect.prefix_arguments

    def _only(
        self, found: list[_Info], given: str, what: str, *, more: str, listing: str, hint: str = ""
    ) -> _Info:
        """The one item an id or a unique id prefix picks from ``found`` (two at most)."""
        exact = [info for info in found if info.id == given]
        if exact or len(found) == 1:
            return (exact or found)[0]
        if found:
            raise NotFoundError(f"{what} id prefix {given!r} is ambiguous; {more}")
        raise NotFoundError(f"no {what} {given!r} in the store {self._named}{hint}; {listing}")


def require_id(what: str, given: str) -> None:
    """An empty id is a prefix of every id: refused, so it can never pick "the only one"."""
    if not given.strip():
        raise NotFoundError(f"an empty {what} id names no {what}; give its id or a unique prefix")
