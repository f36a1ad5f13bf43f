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
from envharness.store.reader import SESSION_COLUMNS, RecordFilter, SessionInfo, session_info

__all__ = ["page_rows", "session_by_id"]

_SESSION_QUERY = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
_ROW_COLUMNS = "session_id, seq, kind, turn, participant, at, payload, prev, digest"


def session_by_id(connection: sqlite3.Connection, session_id: str) -> SessionInfo | None:
    """The session with exactly this id (no prefix matching: one primary-key lookup)."""
    rows = connection.execute(_SESSION_QUERY, (session_id,)).fetchall()
    return session_info(rows[0]) if rows else None


def page_rows(
    connection: sqlite3.Connection, session_id: str, selection: RecordFilter
) -> list[RecordRow]:
    """The session's rows that ``selection`` picks, in ``seq`` order, in one statement: the
    same selection :func:`~envharness.store.reader.iterate_rows` reads page by page."""
    clauses = ["session_id = ?", "seq > ?"]
    arguments: list[object] = [session_id, selection.after]
    if selection.kinds:
        clauses.append(f"kind IN ({', '.join('?' * len(selection.kinds))})")
        arguments.extend(selection.kinds)
    if selection.participant is not None:
        clauses.append("participant = ?")
        arguments.append(selection.participant)
    if selection.turn is not None:
        clauses.append("turn = ?")
        arguments.append(selection.turn)
    if selection.until is not None:
        clauses.append("seq <= ?")
        arguments.append(selection.until)
    query = f"SELECT {_ROW_COLUMNS} FROM records WHERE {' AND '.join(clauses)} ORDER BY seq"
    if selection.limit is not None:
        query += " LIMIT ?"
        arguments.append(selection.limit)
    return [RecordRow(*row) for row in connection.execute(query, arguments)]
