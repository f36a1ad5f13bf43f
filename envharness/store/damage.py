"""Telling a damaged database file apart from a store that is merely newer, locked or foreign.

SQLite reports a damaged file in words meant for other situations: a flipped byte in the
header's write-version field reads as "attempt to write a readonly database", one in the
schema version as "newer than this envharness", one in the schema's text surfaces as a
``UnicodeDecodeError`` with no file named. The checks here look at the file itself:

- :func:`header_problem`: the fixed fields of the 100-byte header that envharness never changes
  (https://www.sqlite.org/fileformat.html#the_database_header) — magic string, page size,
  format versions, reserved space, payload fractions, schema format, text encoding, the
  bytes reserved for expansion;
- :func:`schema_version_problem`: whether the schema version the file records is plausible,
  judged by the tables and columns it holds. Every migration (``database._MIGRATIONS``) creates
  or alters a named table, index or trigger, so a file whose version number disagrees with
  exactly the objects one version of ours makes has a damaged number, not a newer program;
- :func:`damage_in`: whether an error met while opening or reading means a damaged file.

Each answer is a sentence naming what is wrong; :func:`damaged_store` makes it the
:class:`~envharness.errors.DamagedStoreError` that carries the recovery advice. Nothing here
writes to a store.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path

from envharness.errors import DamagedStoreError
from envharness.store.blobs import add_sql_functions
from envharness.store.handles import read_start

__all__ = [
    "HEADER_SIZE",
    "RECOVERY_ADVICE",
    "damage_in",
    "damaged_store",
    "header_problem",
    "open_failure",
    "refuse_damage",
    "schema_signature",
    "schema_version_problem",
]

HEADER_SIZE = 100
_MAGIC = b"SQLite format 3\x00"
_CORRUPT = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)

RECOVERY_ADVICE = (
    "keep a copy of the store folder as it is (evidence.sqlite3 and any evidence.sqlite3-wal "
    "beside it) and restore the store from a backup; to salvage what is still readable, copy "
    "it into a new folder with SQLite's own tools (`sqlite3 evidence.sqlite3 .recover`, "
    "SQLite 3.41 or later, or `.dump`) and run `envharness verify` there: each surviving "
    "record is re-checked against its digest, and each gap is named"
)


def damaged_store(database: Path, problem: str) -> DamagedStoreError:
    """The error for a damaged file: which file, what is wrong, and what to do."""
    return DamagedStoreError(
        f"the store's database {str(database)!r} is damaged: {problem}. To recover, "
        f"{RECOVERY_ADVICE}"
    )


def refuse_damage(
    connection: sqlite3.Connection, database: Path, migrations: tuple[str, ...]
) -> None:
    """Raise :class:`DamagedStoreError` when the header, or the schema version it records, is
    damaged; called on opening, before anything is written. Costs one 100-byte read while
    the version is current."""
    if (problem := header_problem(database)) is not None:
        raise damaged_store(database, problem)
    found = int(connection.execute("PRAGMA user_version").fetchone()[0])
    if found != len(migrations):
        problem = schema_version_problem(connection, found, migrations)
        if problem is not None:
            raise damaged_store(database, problem)


def open_failure(database: Path, error: BaseException) -> DamagedStoreError | None:
    """The error to raise instead of ``error`` (met opening ``database``) when it means the
    file is damaged; ``None`` otherwise."""
    problem = damage_in(database, error)
    return damaged_store(database, problem) if problem is not None else None


def header_problem(database: Path) -> str | None:
    """What is wrong with the file's header, or ``None``: sound, empty, missing, or not an
    SQLite file at all (a foreign file is not a damaged store; SQLite's own error says so).

    Reads the first 100 bytes only; the fields checked never change once a store exists, so a
    checkpoint rewriting page 1 meanwhile cannot make a sound header look damaged. Read through
    :func:`~envharness.store.handles.read_start`, which never closes a descriptor of a file
    that this process's SQLite connections hold locks on (closing one would drop them all).
    """
    try:
        header = read_start(database, HEADER_SIZE)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"its header cannot be read ({os.strerror(exc.errno or 0) or exc})"
    if not header:
        return None  # a new, empty file (SQLite writes the header with the first table); or
        # one open here that no descriptor could be kept for: not read
    differing = sum(a != b for a, b in zip(header[: len(_MAGIC)], _MAGIC, strict=False))
    if len(header) < len(_MAGIC) or differing > len(_MAGIC) // 4:
        return None  # not SQLite's magic string, nor a damaged copy of it: a foreign file
    if differing:
        return f"the header's magic string reads {header[: len(_MAGIC)]!r}"
    if len(header) < HEADER_SIZE:
        return f"the file is {len(header)} bytes long, shorter than an SQLite header"
    return _field_problem(header)


def _field_problem(header: bytes) -> str | None:
    page_size = int.from_bytes(header[16:18], "big")
    if not (page_size == 1 or (512 <= page_size <= 32768 and page_size & (page_size - 1) == 0)):
        return f"the header's page size field holds {page_size}, not a power of two"
    for offset, field in ((18, "write"), (19, "read")):
        if header[offset] not in (1, 2):
            return (
                f"the header's file format {field} version (byte {offset}) holds "
                f"{header[offset]}, where SQLite writes 1 or 2"
            )
    if header[20]:  # a checksum or encryption extension would reserve bytes; envharness none
        return f"the header reserves {header[20]} bytes at the end of every page (byte 20), not 0"
    if tuple(header[21:24]) != (64, 32, 32):
        return f"the header's payload fractions (bytes 21-23) hold {tuple(header[21:24])}"
    if int.from_bytes(header[44:48], "big") not in range(5):
        return f"the header's schema format number holds {int.from_bytes(header[44:48], 'big')}"
    encoding = int.from_bytes(header[56:60], "big")
    if encoding not in (0, 1):  # 0: no table yet; envharness makes UTF-8 (1) stores only
        return f"the header's text encoding field holds {encoding}; envharness stores are UTF-8"
    if any(header[72:92]):
        return "the header's reserved bytes 72-91, always zero, are not"
    return None


def damage_in(database: Path, error: BaseException) -> str | None:
    """Whether ``error``, raised opening or reading ``database``, means the file is damaged.

    A ``UnicodeDecodeError`` from ``sqlite3`` is SQLite's own error message quoting bytes
    of the file that are not UTF-8 (a schema statement, say); ``SQLITE_CORRUPT`` and
    ``SQLITE_NOTADB`` mean damage when the file is an SQLite database by its header.
    """
    if isinstance(error, UnicodeDecodeError):
        return f"SQLite met bytes that are not UTF-8 where it expected text ({error.reason})"
    if not isinstance(error, sqlite3.Error):
        return None
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    if code not in _CORRUPT:
        return None
    if (problem := header_problem(database)) is not None:
        return problem
    if code == sqlite3.SQLITE_CORRUPT or _has_magic(database):
        return f"SQLite reports {error}"
    return None


def _has_magic(database: Path) -> bool:
    try:
        return read_start(database, len(_MAGIC)) == _MAGIC
    except OSError:
        return False


Signature = frozenset[tuple[str, str, str]]


def schema_signature(connection: sqlite3.Connection) -> Signature:
    """The schema's named objects (type, name, table) and each table's columns."""
    objects = connection.execute(
        "SELECT type, name, tbl_name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
    ).fetchall()
    columns = [
        ("column", str(table), str(column))
        for kind, table, _ in objects
        if kind == "table"
        for (column,) in connection.execute(
            "SELECT name FROM pragma_table_info(?)", (table,)
        ).fetchall()
    ]
    return frozenset((str(a), str(b), str(c)) for a, b, c in (*objects, *columns))


@functools.cache
def _signature_of_version(migrations: tuple[str, ...], version: int) -> Signature:
    """The signature a store made by ``migrations[:version]`` has (built in memory, once)."""
    scratch = sqlite3.connect(":memory:")
    add_sql_functions(scratch)  # the migrations call them (on no rows, here)
    try:
        for script in migrations[:version]:
            scratch.executescript(script)
        return schema_signature(scratch)
    finally:
        scratch.close()


def schema_version_problem(
    connection: sqlite3.Connection, found: int, migrations: tuple[str, ...]
) -> str | None:
    """Whether the schema version ``found`` in the header is implausible for the schema the
    file holds; ``None`` when it is ours, plausible, or genuinely newer.

    Only a version other than the current one is examined (the check reads the schema, and
    costs a few milliseconds the first time). A version above ours is a newer store unless
    the file holds exactly the objects our own current version makes; a version below ours
    must hold exactly that older version's objects, or migrating would fail halfway.
    """
    current = len(migrations)
    if found == current:
        return None
    try:
        # The version and the schema from one snapshot: another process may be migrating.
        began = not connection.in_transaction
        if began:
            connection.execute("BEGIN")
        try:
            found = int(connection.execute("PRAGMA user_version").fetchone()[0])
            signature = schema_signature(connection)
        finally:
            if began and connection.in_transaction:
                connection.execute("COMMIT")
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        return f"its schema cannot be read ({_describe(exc)})"
    if found == current:
        return None
    if found > current:
        if signature == _signature_of_version(migrations, current):
            return (
                f"the header records schema version {found}, but the file holds exactly the "
                f"tables of version {current}: the version number itself is damaged (on a "
                f"copy, `sqlite3 evidence.sqlite3 'PRAGMA user_version={current}'` restores it; "
                "then run `envharness verify` on the copy)"
            )
        return None
    if found < 0 or signature != _signature_of_version(migrations, found):
        matching = [
            version
            for version in range(current + 1)
            if signature == _signature_of_version(migrations, version)
        ]
        holds = (
            f"the tables of version {matching[0]}"
            if matching
            else "tables that match no version of this envharness"
        )
        return f"the header records schema version {found}, but the file holds {holds}"
    return None


def _describe(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, UnicodeDecodeError) else str(exc)
