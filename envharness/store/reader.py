"""Paged reads on their own connections.

Each page is one short read transaction (keyset pagination on ``seq``), so a reader that pauses
between pages — a slow HTTP client, an export piped into ``less`` — holds no lock and pins no
WAL snapshot while it waits. Writers are never blocked by readers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, Collection, Sequence
from pathlib import Path

import anyio
import msgspec

from envharness.errors import ConfigurationError
from envharness.records import RecordRow
from envharness.store.schema import DATABASE_NAME, translate_sqlite_error, unwritable_store

__all__ = [
    "PAGE_SIZE",
    "RecordFilter",
    "SessionInfo",
    "database_uri",
    "iterate_rows",
    "open_reader",
]

PAGE_SIZE = 500


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A session as listed: the derived index, not evidence (``verify`` checks it)."""

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
    " head_seq + 1"
)


class RecordFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which records of a session to read; every field narrows the selection."""

    after: int = -1
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


def open_reader(directory: Path) -> sqlite3.Connection:
    """A read-only connection; reads never take the write lock.

    Raises :class:`StoreError` when the database cannot be opened.
    """
    try:
        connection = sqlite3.connect(
            database_uri(directory), uri=True, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise unwritable_store(directory) or translate_sqlite_error(exc, directory) from exc
    try:
        connection.execute("PRAGMA query_only=ON")
    except BaseException as exc:
        connection.close()
        if isinstance(exc, sqlite3.Error):
            raise translate_sqlite_error(exc, directory) from exc
        raise
    return connection


def database_uri(directory: Path) -> str:
    """The read-only SQLite URI of the store's database.

    ``as_uri`` percent-encodes the path, so a directory named with ``?``, ``#`` or ``%`` names
    that directory instead of starting the URI's query or fragment (or being decoded).
    """
    return f"{(directory / DATABASE_NAME).resolve().as_uri()}?mode=ro"


def session_info(row: Sequence[object]) -> SessionInfo:
    return msgspec.convert(dict(zip(_FIELDS, row, strict=True)), SessionInfo)


_FIELDS = tuple(SessionInfo.__struct_fields__)


async def iterate_rows(
    directory: Path, session_id: str, selection: RecordFilter, page_size: int = PAGE_SIZE
) -> AsyncGenerator[RecordRow, None]:
    """Yield the session's rows in ``seq`` order, one short transaction per page."""
    clauses = ["session_id = ?", "seq > ?"]
    parameters: list[object] = [session_id]
    if selection.kinds:
        clauses.append(f"kind IN ({', '.join('?' * len(selection.kinds))})")
        parameters.extend(selection.kinds)
    if selection.participant is not None:
        clauses.append("participant = ?")
        parameters.append(selection.participant)
    if selection.turn is not None:
        clauses.append("turn = ?")
        parameters.append(selection.turn)
    query = (
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
        f" WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT ?"
    )
    connection = await anyio.to_thread.run_sync(open_reader, directory)
    try:
        after = selection.after
        remaining = selection.limit
        while remaining is None or remaining > 0:
            size = page_size if remaining is None else min(page_size, remaining)
            arguments = (parameters[0], after, *parameters[1:], size)
            try:
                page = await anyio.to_thread.run_sync(_fetch, connection, query, arguments)
            except sqlite3.Error as exc:
                raise translate_sqlite_error(exc, directory) from exc
            for row in page:
                yield row
            if len(page) < size:
                return
            after = page[-1].seq
            if remaining is not None:
                remaining -= len(page)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(connection.close)


def _fetch(
    connection: sqlite3.Connection, query: str, arguments: Sequence[object]
) -> list[RecordRow]:
    return [RecordRow(*row) for row in connection.execute(query, arguments)]
