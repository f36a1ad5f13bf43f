"""The SQLite store's index statements, run unchanged on a PostgreSQL connection.

The rules that keep the derived indexes in step with the records (the journal's
``_update_index``) and the lineage queries are the SQLite store's own: they are imported, not
copied, and given this adapter in place of a ``sqlite3.Connection``. It rewrites the few
spellings the two dialects do not share — ``?`` and ``:name`` placeholders, SQLite's two-argument
``MAX`` — and nothing else, so a statement this cannot take fails loudly instead of being
guessed at.

Positional statements go out as PostgreSQL's own ``$1``, ``$2``… through psycopg's raw cursor:
psycopg otherwise parses every statement for its ``%s`` placeholders and caches the parse only
for statements under 4 KiB with at most 50 parameters, so the journal's many-rows statements
(the index's, 64 chains to one) were parsed again at every call — 1 ms of the writer's thread
each, more than the round trip they replaced.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from envharness.store.postgres.driver import Connection, psycopg_module

__all__ = ["SqliteStyle", "translate", "translate_positional"]

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_SCALAR_MAX = re.compile(r"\bMAX\((\w+), \?\)")


@functools.lru_cache(maxsize=1024)
def translate(statement: str) -> str:
    """``statement`` in psycopg's placeholders; ``%`` and quoted text are refused, since
    neither occurs in the statements this serves and both would need escaping rules."""
    return _NAMED.sub(r"%(\1)s", _portable(statement)).replace("?", "%s")


@functools.lru_cache(maxsize=1024)
def translate_positional(statement: str) -> str:
    """``statement``, whose parameters are all ``?``, in PostgreSQL's ``$1``, ``$2``… (for
    psycopg's raw cursor, which sends it as it is)."""
    parts = _portable(statement).split("?")
    return "".join(f"{part}${number}" for number, part in enumerate(parts[:-1], 1)) + parts[-1]


def _portable(statement: str) -> str:
    if "%" in statement or "'" in statement.replace("'created'", ""):
        raise ValueError(f"a statement this adapter does not translate: {statement!r}")
    return _SCALAR_MAX.sub(r"GREATEST(\1, ?)", statement)


class _Result:
    """What the shared code reads of a ``sqlite3.Cursor``: rows and ``rowcount``."""

    __slots__ = ("_cursor", "rowcount")

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.rowcount: int = cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall()) if self._cursor.description else []

    def fetchmany(self, size: int) -> list[Any]:
        return list(self._cursor.fetchmany(size)) if self._cursor.description else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class SqliteStyle:
    """A psycopg connection that answers ``execute`` as ``sqlite3`` does, for shared code."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def execute(
        self, statement: str, parameters: Sequence[object] | Mapping[str, object] = ()
    ) -> _Result:
        if isinstance(parameters, Mapping):
            return _Result(self._connection.execute(translate(statement), dict(parameters)))
        cursor = psycopg_module().RawCursor(self._connection)
        return _Result(cursor.execute(translate_positional(statement), tuple(parameters)))

    def executemany(self, statement: str, rows: Iterable[Sequence[object]]) -> None:
        """``statement`` once per row, as ``sqlite3`` runs it (psycopg pipelines them)."""
        with self._connection.cursor() as cursor:
            cursor.executemany(translate(statement), rows)
