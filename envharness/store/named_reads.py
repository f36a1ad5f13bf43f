"""The reads the service makes in one worker-thread call, named, each in its engine's own SQL.

A service request makes every read it needs — its token's check, the session, a
participant's roster, the page — in one worker-thread call on one pooled reader: the hop costs
more than the queries (``docs/architecture.md``, "Service reads against the same query by
hand"). Those reads were SQLite's SQL handed to ``backend.read``; a second engine cannot run
them (the roster is read with SQLite's ``json_each``). So each is a named method of
:class:`NamedReads`, written once per engine — :class:`SqliteReads` here,
:class:`~envharness.store.postgres.named_reads.PostgresReads` for PostgreSQL — and
:func:`read_named` is the one place that picks the engine, as
:mod:`~envharness.store.locate` is for opening a store.

On SQLite a read is a function call; on PostgreSQL each statement is a round trip to the
server. A caller that knows which reads it is about to make says so first
(:meth:`NamedReads.read_ahead`), and the PostgreSQL reads make them in one statement; the
caller then makes its reads and checks exactly as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection
from typing import Protocol, TypeVar

from envharness.records import RecordRow
from envharness.store.backend import SqliteBackend
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.named_reads import PostgresReads
from envharness.store.raw_rows import page_rows, session_by_id
from envharness.store.read_ahead import ReadAhead
from envharness.store.reader import RecordFilter, SessionInfo
from envharness.store.token_rows import TokenInfo, participant_sessions_in, resolve_in

__all__ = ["AnyBackend", "NamedReads", "ReadAhead", "SqliteReads", "read_named"]

_T = TypeVar("_T")

AnyBackend = SqliteBackend | PostgresBackend
"""A store's database, of either engine (``Store.backend``, ``PostgresStore.backend``)."""


class NamedReads(Protocol):
    """Reads on one connection, in one worker-thread call (blocking)."""

    def read_ahead(self, plan: ReadAhead) -> None:
        """Make ``plan``'s reads now, where making them together saves round trips."""
        ...

    def token(self, digest: str, now: str) -> TokenInfo | None:
        """The token whose secret has this sha256, if it is active at ``now``."""
        ...

    def session(self, session_id: str) -> SessionInfo | None:
        """The session with exactly this id (no prefix matching)."""
        ...

    def page(self, session_id: str, selection: RecordFilter) -> list[RecordRow]:
        """The session's rows that ``selection`` picks, in ``seq`` order, in one statement."""
        ...

    def participant_sessions(
        self, participant: str, among: Collection[str] | None
    ) -> frozenset[str]:
        """Ids of the sessions whose frozen roster names ``participant`` (only those in
        ``among``, when given)."""
        ...


class SqliteReads:
    """The named reads on a SQLite connection."""

    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def read_ahead(self, plan: ReadAhead) -> None:
        """Nothing: SQLite's reads are calls in this process, with no round trip to save."""

    def token(self, digest: str, now: str) -> TokenInfo | None:
        return resolve_in(self._connection, digest, now)

    def session(self, session_id: str) -> SessionInfo | None:
        return session_by_id(self._connection, session_id)

    def page(self, session_id: str, selection: RecordFilter) -> list[RecordRow]:
        return page_rows(self._connection, session_id, selection)

    def participant_sessions(
        self, participant: str, among: Collection[str] | None
    ) -> frozenset[str]:
        return participant_sessions_in(self._connection, participant, among)


async def read_named(backend: AnyBackend, work: Callable[[NamedReads], _T]) -> _T:
    """``work`` given the named reads of ``backend``'s engine, on one of its read connections,
    in one worker-thread call."""
    if isinstance(backend, PostgresBackend):
        return await backend.read_native(lambda connection: work(PostgresReads(connection)))
    return await backend.read(lambda connection: work(SqliteReads(connection)))
