"""Single queries on a connection the caller already holds, for reads made in one hop.

Handing work to a worker thread costs a service request more than its small queries do (a
hop is ~0.1-0.2 ms on an idle 2-core machine, far more on a loaded one, against ~0.01 ms to
look up a token, a session or a roster), so the service makes every read a request needs — its
session, the participant's roster check, the page — in one worker-thread call on one pooled
reader (:func:`~envharness.store.connections.read_in_thread`).
These are those reads, blocking, each one statement: rows keep their payloads as the digested
bytes, so an answer can embed them unchanged.
"""

from __future__ import annotations

import sqlite3

from envharness.records import RecordRow
from envharness.store.reader import (
    SESSION_COLUMNS,
    RecordFilter,
    SessionInfo,
    selected_rows_query,
    session_info,
)

__all__ = ["page_rows", "session_by_id"]

_SESSION_QUERY = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"


def session_by_id(connection: sqlite3.Connection, session_id: str) -> SessionInfo | None:
    """The session with exactly this id (no prefix matching: one primary-key lookup)."""
    rows = connection.execute(_SESSION_QUERY, (session_id,)).fetchall()
    return session_info(rows[0]) if rows else None


def page_rows(
    connection: sqlite3.Connection, session_id: str, selection: RecordFilter
) -> list[RecordRow]:
    """The session's rows that ``selection`` picks, in ``seq`` order, in one statement: the
    same selection :func:`~envharness.store.reader.iterate_rows` reads page by page."""
    query, filters = selected_rows_query(selection)
    limit = -1 if selection.limit is None else selection.limit  # SQLite: a negative LIMIT is none
    arguments = (session_id, selection.after, *filters, limit)
    return [RecordRow(*row) for row in connection.execute(query, arguments)]
