"""Paged reads on their own connections.

Each page is one short read transaction (keyset pagination on ``seq``), so a reader that pauses
between pages — a slow HTTP client, an export piped into ``less`` — holds no lock and pins no
WAL snapshot while it waits. Writers are never blocked by readers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Sequence
from contextlib import aclosing
from pathlib import Path

import anyio
import msgspec

from envharness.errors import ConfigurationError
from envharness.records import RecordRow
from envharness.store.connections import database_uri, open_reader, release_reader, take_reader
from envharness.store.database import translate_sqlite_error
from envharness.store.owners import shown_status

__all__ = [
    "AMONG",
    "EXPERIMENT_MEMBERS_QUERY",
    "EXPERIMENT_QUERY",
    "PAGE_SIZE",
    "ExperimentInfo",
    "ExperimentMember",
    "RecordFilter",
    "SessionCounts",
    "SessionInfo",
    "database_uri",
    "among_json",
    "experiment_infos",
    "experiment_member",
    "iterate_rows",
    "open_reader",
    "pages",
    "selected_rows_query",
]

PAGE_SIZE = 500


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A session as listed: the derived index, not evidence (``verify`` checks it).

    A session still marked running whose runner is certainly gone (killed, crashed) is listed
    ``interrupted``, with the reason crash recovery will record when a writer next opens the
    store (:func:`envharness.store.owners.shown_status`); reading writes nothing."""

    id: str
    experiment_id: str | None
    scenario_id: str
    status: str
    reason: str | None
    created_at: str
    updated_at: str
    turns_completed: int
    records: int


SESSION_COLUMNS = (
    "id, experiment_id, scenario_id, status, reason, created_at, updated_at, turns_completed,"
    " head_seq + 1, owner"
)
"""The columns :func:`session_info` reads: the :class:`SessionInfo` fields, then the runner."""


class SessionCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Sessions by status, from the session index."""

    created: int = 0
    running: int = 0
    paused: int = 0
    completed: int = 0
    failed: int = 0
    stopped: int = 0
    interrupted: int = 0

    @property
    def recorded(self) -> int:
        """Every session counted, whatever its status."""
        return sum(getattr(self, name) for name in self.__struct_fields__)

    @property
    def ended(self) -> int:
        """Sessions with a terminal status: completed, failed, stopped or interrupted."""
        return self.completed + self.failed + self.stopped + self.interrupted


class ExperimentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An experiment as listed: the derived index, with its sessions counted by status.

    ``total`` is the planned number of sessions (scenarios x trials); ``sessions`` counts
    those recorded so far, which is fewer while an experiment runs or after it was stopped.
    """

    id: str
    name: str
    status: str
    reason: str | None
    total: int
    created_at: str
    updated_at: str
    sessions: SessionCounts


EXPERIMENT_QUERY = (
    "SELECT e.id, e.name, e.status, e.reason, e.total, e.created_at, e.updated_at, e.owner,"
    " s.status, s.owner, COUNT(s.id) FROM experiments AS e"
    " LEFT JOIN sessions AS s ON s.experiment_id = e.id"
    " {where} GROUP BY e.id, s.status, s.owner ORDER BY e.created_at, e.id"
)
"""One row per (experiment, session status, runner); :func:`experiment_infos` folds them."""


def experiment_infos(rows: Sequence[Sequence[object]]) -> list[ExperimentInfo]:
    """Fold :data:`EXPERIMENT_QUERY` rows into one :class:`ExperimentInfo` per experiment;
    sessions and experiments whose runner is gone count as ``interrupted`` (as in
    :class:`SessionInfo`)."""
    heads: dict[str, dict[str, object]] = {}
    counts: dict[str, dict[str, int]] = {}
    gone: dict[str, bool] = {}
    for row in rows:
        experiment_id = str(row[0])
        if experiment_id not in heads:
            head = dict(zip(_EXPERIMENT_FIELDS, row[:7], strict=True))
            reason = head["reason"]
            if head["status"] == "running" and (reason is None or isinstance(reason, str)):
                head["status"], head["reason"] = shown_status("running", reason, row[7], gone)
            heads[experiment_id] = head
        found = counts.setdefault(experiment_id, {})
        if row[8] is not None:
            status, _ = shown_status(str(row[8]), None, row[9], gone)
            found[status] = found.get(status, 0) + int(str(row[10]))
    return [
        msgspec.convert({**head, "sessions": counts[key]}, ExperimentInfo)
        for key, head in heads.items()
    ]


_EXPERIMENT_FIELDS = ("id", "name", "status", "reason", "total", "created_at", "updated_at")

AMONG = "(SELECT value FROM json_each(?))"
"""A SQL set of ids, bound to one JSON array argument (:func:`among_json`)."""


def among_json(ids: Collection[str]) -> str:
    return msgspec.json.encode(sorted(ids)).decode()


class ExperimentMember(msgspec.Struct, frozen=True, kw_only=True):
    """A session of an experiment, placed by the trial and seed its configuration froze."""

    session: SessionInfo
    trial: int | None
    seed: int


EXPERIMENT_MEMBERS_QUERY = (
    f"SELECT {SESSION_COLUMNS}, (SELECT json_array(json_extract(CAST(payload AS TEXT),"
    " '$.config.trial'), json_extract(CAST(payload AS TEXT), '$.config.seed')) FROM records"
    " WHERE records.session_id = sessions.id AND records.seq = 0)"
    " FROM sessions WHERE experiment_id = ?"
)
"""A session's columns and ``[trial, seed]`` from its first record (``session.created``)."""

_placement = msgspec.json.Decoder(tuple[int | None, int])


def experiment_member(row: Sequence[object]) -> ExperimentMember:
    trial, seed = _placement.decode(str(row[-1]))
    return ExperimentMember(session=session_info(row[:-1]), trial=trial, seed=seed)


class RecordFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which records of a session to read; every field narrows the selection."""

    after: int = -1
    until: int | None = None
    """The last ``seq`` to read (inclusive): a branch's view of its parent's history."""
    kinds: Collection[str] = ()
    participant: str | None = None
    turn: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.kinds, str):
            raise ConfigurationError(
                f"RecordFilter(kinds={self.kinds!r}) needs a collection of kinds, "
                f"e.g. kinds=({self.kinds!r},)"
            )


def session_info(row: Sequence[object], gone: dict[str, bool] | None = None) -> SessionInfo:
    """A :data:`SESSION_COLUMNS` row as listed; ``gone`` caches runners across one listing."""
    fields = dict(zip(_FIELDS, row[:-1], strict=True))
    status, reason = fields["status"], fields["reason"]
    if isinstance(status, str) and (reason is None or isinstance(reason, str)):
        fields["status"], fields["reason"] = shown_status(status, reason, row[-1], gone)
    return msgspec.convert(fields, SessionInfo)


_FIELDS = tuple(SessionInfo.__struct_fields__)


def selected_rows_query(selection: RecordFilter) -> tuple[str, list[object]]:
    """The statement that reads a page of the rows ``selection`` picks, and the arguments of
    its filters: it takes ``(session_id, after, *filters, limit)``. One place builds it, for the
    paged reader and for the service's one-statement page
    (:func:`envharness.store.raw_rows.page_rows`)."""
    clauses = ["session_id = ?", "seq > ?"]
    filters: list[object] = []
    if selection.kinds:
        clauses.append(f"kind IN ({', '.join('?' * len(selection.kinds))})")
        filters.extend(selection.kinds)
    if selection.participant is not None:
        clauses.append("participant = ?")
        filters.append(selection.participant)
    if selection.turn is not None:
        clauses.append("turn = ?")
        filters.append(selection.turn)
    if selection.until is not None:
        clauses.append("seq <= ?")
        filters.append(selection.until)
    query = (
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
        f" WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?"
    )
    return query, filters


async def pages(
    selection: RecordFilter,
    fetch: Callable[[int, int], Awaitable[list[RecordRow]]],
    page_size: int = PAGE_SIZE,
) -> AsyncGenerator[list[RecordRow], None]:
    """The pages of the rows ``selection`` picks, each read by ``fetch(after, size)``: every
    engine's paged reader walks a session the same way (after the last ``seq`` seen, until a
    short page or the selection's ``limit``)."""
    after = selection.after
    remaining = selection.limit
    while remaining is None or remaining > 0:
        size = page_size if remaining is None else min(page_size, remaining)
        page = await fetch(after, size)
        yield page
        if len(page) < size:
            return
        after = page[-1].seq
        if remaining is not None:
            remaining -= len(page)


async def iterate_rows(
    directory: Path, session_id: str, selection: RecordFilter, page_size: int = PAGE_SIZE
) -> AsyncGenerator[RecordRow, None]:
    """Yield the session's rows in ``seq`` order, one short transaction per page."""
    query, filters = selected_rows_query(selection)
    key, connection = await anyio.to_thread.run_sync(take_reader, directory)
    failed = False

    async def fetch(after: int, size: int) -> list[RecordRow]:
        nonlocal failed
        arguments = (session_id, after, *filters, size)
        try:
            return await anyio.to_thread.run_sync(_fetch, connection, query, arguments)
        except BaseException as exc:
            failed = True
            if isinstance(exc, sqlite3.Error):
                raise translate_sqlite_error(exc, directory) from exc
            raise

    try:
        async with aclosing(pages(selection, fetch, page_size)) as found:
            async for page in found:
                for row in page:
                    yield row
    finally:
        # Between pages the reader is idle (each page is read whole), so a reader the caller
        # stopped early is handed on at once, without a thread: a generator left unclosed is
        # finalised when its event loop shuts down, too late to start a worker thread (one
        # started then is never stopped, and keeps the process from exiting). Only a reader
        # whose fetch failed is in an unknown state: it is closed, never handed on.
        if failed:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(connection.close)
        else:
            release_reader(key, connection)


def _fetch(
    connection: sqlite3.Connection, query: str, arguments: Sequence[object]
) -> list[RecordRow]:
    return [RecordRow(*row) for row in connection.execute(query, arguments)]
