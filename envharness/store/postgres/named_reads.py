"""The service's named reads (:class:`~envharness.store.named_reads.NamedReads`) in
PostgreSQL's own SQL, on one psycopg connection the caller holds.

A statement costs a round trip to the server, so the reads a request is about to make
(:class:`~envharness.store.named_reads.ReadAhead`: its token's check, the session with its
runner's liveness, a participant's roster, the page) go in **one** statement: a head row
carrying the first three as JSON, ``UNION ALL`` the page's rows. The named reads then answer
from it, each once and only for exactly the arguments read ahead (a read ahead is never
answered twice: a second read of the same thing is a fresh one); anything else is read as
before. The caller's checks, and their order, do not change: rows read ahead for a request
that is then refused are dropped with the connection's answer. psycopg's pipeline mode would
also save the round trips, but on loopback it cost more client time than it saved
(``docs/architecture.md``).

A session's status here is shown as the store's other readers show it: a chain still marked
running whose owner lock no connection holds is ``interrupted`` (:mod:`.liveness`), on
whichever host its runner was. Rows are fetched in binary (``bytea`` as it is stored, no hex)
straight into :class:`~envharness.records.RecordRow`: the columns' types are already the
row's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import msgspec

from envharness.records import RecordRow
from envharness.store.postgres import queries
from envharness.store.postgres.driver import Connection
from envharness.store.postgres.liveness import HELD_KEYS, owners_gone
from envharness.store.postgres.ownership import owner_key
from envharness.store.read_ahead import ReadAhead
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

_HEAD_TOKEN = f"(SELECT json_build_array({TOKEN_COLUMNS}) FROM tokens WHERE secret_sha256 = %s)"
_HEAD_SESSION = (
    f"(SELECT json_build_array({SESSION_COLUMNS}, CASE WHEN owner IS NULL THEN NULL"
    f" ELSE EXISTS ({HELD_KEYS} AND (classid::bigint << 32) | objid::bigint = %s::bigint) END)"
    " FROM sessions WHERE id = %s)"
)
"""The session's columns, then whether its owner lock is held (read only while it has an
owner), as :func:`~.liveness.owners_gone` tells it."""
_HEAD_ROSTER = f"EXISTS ({_ROSTER} AND s.id = %s)"
_HEAD_COLUMNS = "NULL::text, NULL::bigint, NULL::text, NULL::bigint, NULL::text, NULL::text"
_NOTHING = "NULL::json"


class _Head(msgspec.Struct, array_like=True):
    token: list[Any] | None
    session: list[Any] | None
    in_roster: bool | None


_head = msgspec.json.Decoder(_Head)


class PostgresReads:
    """The named reads on ``connection`` (blocking: the caller is in a worker thread)."""

    __slots__ = ("_connection", "_page", "_roster", "_session", "_token")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._token: tuple[str, Sequence[object] | None] | None = None
        self._session: tuple[str, SessionInfo | None] | None = None
        self._roster: tuple[str, str, bool] | None = None
        self._page: tuple[str, RecordFilter, list[RecordRow]] | None = None

    def read_ahead(self, plan: ReadAhead) -> None:
        """Make ``plan``'s reads in one statement, for the named reads to answer from."""
        arguments: list[object] = []
        token = session = roster = _NOTHING
        if plan.token is not None:
            token = _HEAD_TOKEN
            arguments.append(plan.token)
        session = _HEAD_SESSION
        arguments += [owner_key(plan.session_id), plan.session_id]
        if plan.participant is not None:
            roster = _HEAD_ROSTER
            arguments += [plan.participant, plan.session_id]
        head = (
            f"SELECT {_HEAD_COLUMNS}, convert_to(json_build_array({token}, {session},"
            f" {roster})::text, 'UTF8'), NULL::text, NULL::text"
        )
        if plan.page is not None:
            page, filters = queries.selected_rows_query(plan.page)
            head = f"{head} UNION ALL ({page}) ORDER BY 2"
            arguments += [plan.session_id, plan.page.after, *filters, plan.page.limit]
        rows: list[RecordRow] = []
        found = None
        for raw in self._connection.cursor(binary=True).execute(head, arguments):
            if raw[0] is None:
                found = _head.decode(raw[6])
            else:
                rows.append(RecordRow(*raw))
        if found is None:  # the head row is always there; without it, nothing is kept
            return
        if plan.token is not None:
            self._token = (plan.token, found.token)
        self._session = (plan.session_id, _session(found.session))
        if plan.participant is not None:
            self._roster = (plan.participant, plan.session_id, bool(found.in_roster))
        if plan.page is not None:
            self._page = (plan.session_id, plan.page, rows)

    def token(self, digest: str, now: str) -> TokenInfo | None:
        ahead = self._token
        if ahead is not None and ahead[0] == digest:
            row, self._token = ahead[1], None
        else:
            rows = self._connection.execute(_TOKEN, (digest,)).fetchall()
            row = rows[0] if rows else None
        if row is None:
            return None
        info = token_info(row)
        return info if info.active(now) else None

    def session(self, session_id: str) -> SessionInfo | None:
        ahead = self._session
        if ahead is not None and ahead[0] == session_id:
            self._session = None
            return ahead[1]
        rows = self._connection.execute(_SESSION, (session_id,)).fetchall()
        if not rows:
            return None
        return session_info(rows[0], owners_gone(self._connection, rows)[0])

    def page(self, session_id: str, selection: RecordFilter) -> list[RecordRow]:
        ahead = self._page
        if ahead is not None and ahead[0] == session_id and ahead[1] == selection:
            self._page = None
            return ahead[2]
        query, filters = queries.selected_rows_query(selection)
        # LIMIT NULL is no limit in PostgreSQL.
        arguments = (session_id, selection.after, *filters, selection.limit)
        cursor = self._connection.cursor(binary=True).execute(query, arguments)
        return [RecordRow(*raw) for raw in cursor]

    def participant_sessions(
        self, participant: str, among: Collection[str] | None
    ) -> frozenset[str]:
        ahead = self._roster
        if ahead is not None and ahead[0] == participant and list(among or ()) == [ahead[1]]:
            self._roster = None
            return frozenset([ahead[1]]) if ahead[2] else frozenset()
        query = _ROSTER
        arguments: list[object] = [participant]
        if among is not None:
            query += " AND s.id = ANY(%s)"
            arguments.append(sorted(among))
        return frozenset(str(row[0]) for row in self._connection.execute(query, arguments))


def _session(row: list[Any] | None) -> SessionInfo | None:
    """The session from the head row: its columns, then whether its owner lock is held."""
    if row is None:
        return None
    *columns, held = row
    owner = columns[-1]
    return session_info(columns, {owner: not held} if isinstance(owner, str) else {})
