"""Imported sources moved from one store into another (``copy-store``), checked on the way.

A copy keeps what an import stored, not what re-importing would make of it: the import log's
rows (each batch's format, importer, training declaration, refusals) and every record with the
import that brought it are written unchanged, so health, episodes and trajectories read the
same from the destination. Every record's hash is recomputed and its link to the one before
checked, as ``verify`` does, and the source's acknowledged head is compared with the last
record; the ``sources`` entry is written last, so a copy that stops part way leaves records
that ``verify`` reports as having no entry rather than a head that claims them.

Both ends are a store's backend, SQLite or PostgreSQL, written through the SQL both run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from envharness.errors import StoreError
from envharness.store.backend import SqliteBackend
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.sources.chain import COLUMNS, SourceRow, chain_problem
from envharness.store.sources.reads import POSTGRES, SQLITE

__all__ = ["COPY_PAGE", "copy_sources", "refuse_held_sources"]

COPY_PAGE = 1000
"""Records read, checked and written at a time: one transaction each, bounded memory."""

_IMPORT_COLUMNS = (
    "id, source, at, format, importer, origin, training, first_position, last_position, stored,"
    " duplicates, status, problem, problem_kind, problem_position"
)
_INSERT_IMPORT = f"INSERT INTO source_imports ({_IMPORT_COLUMNS}) VALUES ({', '.join('?' * 15)})"
_INSERT_RECORD = f"INSERT INTO source_records ({COLUMNS}, import_id) VALUES ({', '.join('?' * 12)})"
_INSERT_HEAD = (
    "INSERT INTO sources (id, created_at, updated_at, head_position, head_hash)"
    " VALUES (?, ?, ?, ?, ?)"
)
Backend = SqliteBackend | PostgresBackend


async def copy_sources(source: Backend, destination: Backend) -> tuple[int, int]:
    """Copy every imported source of ``source`` into ``destination``, which must hold none;
    returns the sources and the records copied. A :class:`StoreError` names the first record
    that does not hold, or a destination that already has sources (left untouched)."""
    await refuse_held_sources(destination)
    order = (POSTGRES if isinstance(source, PostgresBackend) else SQLITE).import_order
    listed = "SELECT DISTINCT source FROM source_imports UNION SELECT id FROM sources"
    names = sorted(str(row[0]) for row in await source.read(_rows(listed)))
    records = 0
    for name in names:
        imports = await source.read(
            _rows(
                f"SELECT {_IMPORT_COLUMNS} FROM source_imports WHERE source = ? ORDER BY {order}",
                name,
            )
        )
        if imports:
            await destination.write(functools.partial(_insert, _INSERT_IMPORT, imports))
        records += await _copy_records(source, destination, name)
    return len(names), records


async def refuse_held_sources(destination: Backend) -> None:
    """Refuse a destination that already holds imported sources (before anything is copied:
    a source copied beside one of the same name would mix two chains)."""
    held = await destination.read(_rows("SELECT COUNT(*) FROM source_imports"))
    if int(held[0][0]):
        raise StoreError(
            "the destination store already holds imported sources; copy into a new, empty "
            "store (nothing was written to it)"
        )


async def _copy_records(source: Backend, destination: Backend, name: str) -> int:
    """``name``'s records a page at a time, each checked, then its ``sources`` entry."""
    previous: SourceRow | None = None
    copied = 0
    while True:
        page = await source.read(
            _rows(
                f"SELECT {COLUMNS}, import_id FROM source_records WHERE source = ?"
                f" AND position > ? ORDER BY position LIMIT {COPY_PAGE}",
                name,
                -1 if previous is None else previous.position,
            )
        )
        for values in page:
            row = SourceRow(*values[:-1])
            expected = 0 if previous is None else previous.position + 1
            found = chain_problem(previous, row, stored=True)
            if row.position != expected or found is not None:
                problem = found[1] if found else f"position {expected} is missing"
                raise StoreError(
                    f"the source store's imported source {name!r} breaks at position "
                    f"{row.position}: {problem}; run `envharness verify` on the source"
                )
            previous = row
        if page:
            await destination.write(functools.partial(_insert, _INSERT_RECORD, page))
            copied += len(page)
        if len(page) < COPY_PAGE:
            break
    heads = await source.read(
        _rows(
            "SELECT id, created_at, updated_at, head_position, head_hash FROM sources WHERE id = ?",
            name,
        )
    )
    last = (previous.position, previous.hash) if previous is not None else None
    head = (int(heads[0][3]), str(heads[0][4])) if heads else None
    if head != last:
        raise StoreError(
            f"the source store's imported source {name!r} ends at {last} (position, hash) but "
            f"its acknowledged head is {head}; run `envharness verify` on the source"
        )
    if heads:
        await destination.write(functools.partial(_insert, _INSERT_HEAD, heads))
    return copied


def _rows(statement: str, *arguments: object) -> Callable[[Any], list[Any]]:
    """A read of ``statement``'s rows, on a ``sqlite3`` or SQLite-style PostgreSQL connection."""
    return lambda connection: list(connection.execute(statement, arguments).fetchall())


def _insert(statement: str, rows: Sequence[Sequence[object]], connection: Any) -> None:
    connection.executemany(statement, [tuple(row) for row in rows])
