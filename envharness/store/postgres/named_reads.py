"""The service's named reads (:class:`~envharness.store.named_reads.NamedReads`) in
PostgreSQL's own SQL, on one psycopg connection the caller holds.

A session's status here is shown as the store's other readers show it: a chain still marked
running whose owner lock no connection holds is ``interrupted`` (:mod:`.liveness`), on
whichever host its runner was.
"""

from __future__ import annotations

from collections.abc import Collection

from envharness.records import RecordRow
from envharness.store.postgres import queries
from envharness.store.postgres.driver import Connection
from envharness.store.postgres.liveness import owners_gone
from envharness.store.reader import SESSION_COLUMNS, RecordFilter, SessionInfo, session_info
from envharness.store.token_rows import TOKEN_COLUMNS, TokenInfo, token_info

__all__ = ["PostgresReads"]

_SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = %s"
_TOKEN = f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_sha256 = %s"
_ROSTER = (
    "SELECT s.id FROM sessions s JOIN records r ON r.session_id = s.id AND r.seq = 0"
    " WHERE r.kind = 'session.created'"
    " AND json_typeof(convert_from(r.payload, 'UTF8')::json -> 'config' -> 'participants')"
    " = 'object'"
    " AND (convert_from(r.payload, 'UTF8')::json -> 'config' -> 'participants' -> %s)"
    " IS NOT NULL"
)
"""A roster is an object keyed by participant name, as SQLite's ``json_each`` reads it."""


class PostgresReads:
    """The named reads on ``connection`` (blocking: the caller is in a worker thread)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def token(self, digest: str, now: str) -> TokenInfo | None:
        rows = self._connection.execute(_TOKEN, (digest,)).fetchall()
        if not rows:
            return None
        info = token_info(rows[0])
        return info if info.active(now) else None

    def session(self, session_id: str) -> SessionInfo | None:
        rows = self._connection.execute(_SESSION, (session_id,)).fetchall()
        if not rows:
            return None
        return session_info(rows[0], owners_gone(self._connection, rows)[0])

    def page(self, session_id: str, selection: RecordFilter) -> list[RecordRow]:
        query, filters = queries.selected_rows_query(selection)
        # LIMIT NULL is no limit in PostgreSQL.
        arguments = (session_id, selection.after, *filters, selection.limit)
        return [queries.record_row(raw) for raw in self._connection.execute(query, arguments)]

    def participant_sessions(
        self, participant: str, among: Collection[str] | None
    ) -> frozenset[str]:
        query = _ROSTER
        arguments: list[object] = [participant]
        if among is not None:
            query += " AND s.id = ANY(%s)"
            arguments.append(sorted(among))
        return frozenset(str(row[0]) for row in self._connection.execute(query, arguments))
