"""Re-check a store: the database file, then every chain's records, head, blobs and artifacts.

Runs in a worker thread on its own read connection (WAL readers never block the writer), so
sessions may be written while it runs. The list of chains and their committed heads is read in
one read transaction, a consistent snapshot; each chain is then checked up to the head it had
in that snapshot, so a record appended meanwhile is neither checked nor mistaken for a break.

What is checked, in order (``docs/evidence.md`` lists it for users):

1. the file as a whole — its header (:func:`~envharness.store.damage.header_problem`, read
   without closing a descriptor of the file: :mod:`envharness.store.handles`) and SQLite's
   own ``PRAGMA quick_check`` (the b-trees' structure and every row's format), or ``PRAGMA
   integrity_check`` with ``full=True`` (also every index against its table). Each finding
   is a *store-level* break, named :data:`STORE` instead of a session;
2. every chain (session, experiment, optimizer run): each record's columns, seq, ``prev``
   link and digest, the state blobs and artifacts it cites, the index's committed head, and
   the records table against both its indexes, (session, seq) and records-by-kind: SQLite's
   ``quick_check`` does not compare them, and reads filtered by kind go through the latter
   (:mod:`envharness.store.verify_indexes`);
3. the text of every other table (the indexes of sessions, experiments, tokens, ...);
4. imported sources' chains (:mod:`envharness.store.sources`);
5. the write-ahead log and the acknowledged high-water mark (:mod:`envharness.store.wal`).

Each problem names the session and the record's ``seq`` so a person can look at it. A damaged
or tampered row is reported, never raised: a column holding a value of the wrong SQL type, or
text whose bytes are not UTF-8, becomes a :class:`ChainBreak` of that record, and a part of the
file SQLite cannot read ends the check of that chain with a break, never the whole run.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import msgspec

from envharness.records import (
    Artifact,
    Checkpoint,
    Intervention,
    OperationReceipt,
    Outcome,
    RecordRow,
    SegmentStarted,
    decode_payload,
    digest_of,
)
from envharness.store.artifacts import ArtifactFiles
from envharness.store.blobs import SELECT_BLOB, BlobDamage, unpack
from envharness.store.damage import header_problem
from envharness.store.database import DATABASE_NAME
from envharness.store.verify_indexes import EntrySum, check_indexes, why
from envharness.store.wal import wal_breaks

__all__ = [
    "STATEFUL",
    "STORE",
    "ChainBreak",
    "VerifyReport",
    "check_record",
    "digest_holds",
    "verify_store",
]

STORE = DATABASE_NAME
"""The ``session_id`` of a store-level break: the database file as a whole, not one chain."""

_FETCH = 2000
STATEFUL = (Outcome, Checkpoint, Intervention, SegmentStarted, OperationReceipt)
"""The payloads that cite a state blob (their ``state``)."""
_INDEXES = ("sessions", "experiments", "optimizer_runs")
"""The tables that index chains, each keyed by ``id``."""
_PER_RECORD = ("records", "source_records")
"""Tables whose every column of every row the chain checks read already."""

# The type each column of a record row must hold, and whether it may be NULL.
_COLUMNS: tuple[tuple[str, type, bool], ...] = (
    ("session_id", str, False),
    ("seq", int, False),
    ("kind", str, False),
    ("turn", int, True),
    ("participant", str, True),
    ("at", str, False),
    ("payload", bytes, False),
    ("prev", str, True),
    ("digest", str, False),
)
_SQL_TYPES = {str: "text", int: "an integer", float: "a real number", bytes: "bytes"}


class ChainBreak(msgspec.Struct, frozen=True):
    """One problem found: which session, which record (``None`` = the session as a whole).

    A break of the database file as a whole has :data:`STORE` as its ``session_id``."""

    session_id: str
    seq: int | None
    problem: str


class VerifyReport(msgspec.Struct, frozen=True):
    sessions: int
    records: int
    breaks: tuple[ChainBreak, ...]

    @property
    def ok(self) -> bool:
        return not self.breaks


@dataclass(frozen=True)
class Undecodable:
    """A TEXT value whose bytes are not UTF-8, kept as stored so a break can quote them."""

    raw: bytes

    def __str__(self) -> str:
        return self.raw.decode("utf-8", "backslashreplace")


def _text(raw: bytes) -> str | Undecodable:
    """The text factory while verifying: undecodable text becomes a value, not an error."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return Undecodable(raw)


class _Chain(msgspec.Struct):
    """A chain as the snapshot saw it: its index entry (if any), its highest integer seq, and
    the sum of its entries as the records table holds them (``None``: the table could not be
    read whole)."""

    head_seq: object = None
    head_digest: object = None
    table: str | None = None
    last_seq: int | None = None
    in_table: EntrySum | None = msgspec.field(default_factory=EntrySum)


def verify_store(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    on_session: Callable[[str], None] | None = None,
    *,
    full: bool = False,
) -> VerifyReport:
    """Check everything on ``connection`` (a reader of the store); ``full`` runs SQLite's
    ``integrity_check`` instead of its ``quick_check`` (slower: every index against its
    table)."""
    factory = connection.text_factory
    connection.text_factory = _text
    try:
        return _verify(connection, artifacts, on_session, full)
    finally:
        connection.text_factory = factory


def _verify(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    on_session: Callable[[str], None] | None,
    full: bool,
) -> VerifyReport:
    breaks = list(_file_breaks(connection, full))
    chains, unindexed = _snapshot(connection, breaks)
    blobs: dict[str, str | None] = {}
    total = 0
    for chain_id in sorted(chains, key=lambda key: (not isinstance(key, str), str(key))):
        chain = chains[chain_id]
        found: list[ChainBreak] = []
        try:
            with _read_transaction(connection):
                total += _verify_chain(connection, artifacts, blobs, chain_id, chain, found)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            found.append(
                ChainBreak(
                    str(chain_id), None, f"the chain could not be read to its end: {why(exc)}"
                )
            )
        if chain.table is None and not unindexed:
            found.append(
                ChainBreak(
                    str(chain_id),
                    None,
                    "records exist but the session index has no entry for this session",
                )
            )
        breaks.extend(found)
        if on_session is not None:
            on_session(str(chain_id))
    breaks.extend(_text_breaks(connection))
    # Imported sources keep their own chains (envharness.store.sources); they count as chains.
    sources = imported = 0
    # Imported here: the sources reach the PostgreSQL backend, whose own verify builds on this.
    from envharness.store.sources.verify import verify_sources

    try:
        sources, imported, source_breaks = verify_sources(connection)
        breaks.extend(ChainBreak(*source_break) for source_break in source_breaks)
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        breaks.append(ChainBreak(STORE, None, f"imported sources could not be read: {why(exc)}"))
    # The write-ahead log and the acknowledged high-water mark (envharness.store.wal).
    breaks.extend(ChainBreak(*found) for found in wal_breaks(connection))
    return VerifyReport(
        sessions=len(chains) + sources, records=total + imported, breaks=tuple(breaks)
    )


@contextmanager
def _read_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: every statement inside sees the same committed state."""
    connection.execute("BEGIN")
    try:
        yield
    except BaseException:
        if connection.in_transaction:
            with suppress(sqlite3.Error):  # the error being raised says more than this one
                connection.execute("ROLLBACK")
        raise
    if connection.in_transaction:
        connection.execute("COMMIT")


def _file_breaks(connection: sqlite3.Connection, full: bool) -> Iterator[ChainBreak]:
    """The database file as a whole: its header, then SQLite's own check of its b-trees."""
    try:
        files = {row[1]: row[2] for row in connection.execute("PRAGMA database_list")}
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        yield ChainBreak(STORE, None, f"SQLite cannot list the database file: {why(exc)}")
        return
    file = files.get("main")
    if isinstance(file, str) and file and (problem := header_problem(Path(file))):
        yield ChainBreak(STORE, None, f"the file's header is damaged: {problem}")
    pragma = "integrity_check" if full else "quick_check"
    try:
        findings = [row[0] for row in connection.execute(f"PRAGMA {pragma}")]
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        yield ChainBreak(STORE, None, f"SQLite's {pragma} could not finish: {why(exc)}")
        return
    for row in findings:
        # One row may hold several findings, a line each, under a "*** in database" heading.
        for finding in str(row).splitlines():
            if finding != "ok" and not finding.startswith("*** in database"):
                yield ChainBreak(STORE, None, f"SQLite's {pragma} found: {finding}")


def _snapshot(
    connection: sqlite3.Connection, breaks: list[ChainBreak]
) -> tuple[dict[object, _Chain], bool]:
    """Every chain (session, experiment or optimizer run) with its committed head, read
    consistently, and whether some index could not be read (then a chain missing from the
    indexes is not a break of its own: the unreadable index is).

    The index and the records are read in one transaction: read in two, a session committed
    between the reads would seem to have records but no index entry.
    """
    chains: dict[object, _Chain] = {}
    unindexed = False
    try:
        with _read_transaction(connection):
            for table in _INDEXES:
                try:
                    for chain_id, head_seq, head_digest in connection.execute(
                        f"SELECT id, head_seq, head_digest FROM {table}"
                    ):
                        chains[chain_id] = _Chain(head_seq, head_digest, table)
                except (sqlite3.Error, UnicodeDecodeError) as exc:
                    unindexed = True
                    breaks.append(
                        ChainBreak(STORE, None, f"the {table} index cannot be read: {why(exc)}")
                    )
            # The table itself, not an index: each chain's entries as its rows hold them, for
            # _check_indexes to hold both indexes against.
            for chain_id, seq, kind, pos in connection.execute(
                "SELECT session_id, seq, kind, pos FROM records NOT INDEXED"
            ):
                chain = chains.get(chain_id)
                if chain is None:
                    chain = chains[chain_id] = _Chain()
                if chain.in_table is not None:
                    chain.in_table.add(kind, seq, pos)
                if type(seq) is int and (chain.last_seq is None or seq > chain.last_seq):
                    chain.last_seq = seq
                if isinstance(chain_id, Undecodable):  # the walk finds it by the index: say so
                    breaks.append(
                        ChainBreak(
                            str(chain_id),
                            seq if type(seq) is int else None,
                            f"session_id column {_holds(chain_id, str)}",
                        )
                    )
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        breaks.append(ChainBreak(STORE, None, f"the records cannot be listed by chain: {why(exc)}"))
        for chain in chains.values():
            chain.in_table = None
    return chains, unindexed


def _verify_chain(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    blobs: dict[str, str | None],
    chain_id: object,
    chain: _Chain,
    breaks: list[ChainBreak],
) -> int:
    session_id = str(chain_id)

    def problem(seq: int | None, text: str) -> None:
        breaks.append(ChainBreak(session_id, seq, text))

    blob_problem = functools.partial(_blob_problem, connection)
    head_seq = chain.head_seq if type(chain.head_seq) is int else None
    if chain.table is not None:
        if head_seq is None:
            problem(None, f"the session index's head_seq {_holds(chain.head_seq, int)}")
        if not isinstance(chain.head_digest, str):
            problem(None, f"the session index's head_digest {_holds(chain.head_digest, str)}")
        if isinstance(chain_id, str) and not _found_by_id(connection, chain.table, chain_id):
            problem(
                None,
                f"the {chain.table} index cannot find this id by its key (its primary-key"
                " index is damaged): reads by id fail",
            )
    # Only what the snapshot saw: records appended since are for the next run to check.
    bound = max(
        head_seq if head_seq is not None else -1,
        chain.last_seq if chain.last_seq is not None else -1,
    )
    # A session id that is not UTF-8 is looked up by its bytes.
    match, key = (
        ("CAST(? AS TEXT)", chain_id.raw) if isinstance(chain_id, Undecodable) else ("?", chain_id)
    )
    where = f"session_id = {match} AND (seq <= ? OR typeof(seq) != 'integer')"
    cursor = connection.execute(
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest, pos"
        f" FROM records WHERE {where} ORDER BY seq",
        (key, bound),
    )
    expected_seq = 0
    prev: object = None
    head_digest_found: object = None
    count = 0
    walked = EntrySum()
    while rows := cursor.fetchmany(_FETCH):
        for raw in rows:
            count += 1
            walked.add(raw[2], raw[1], raw[9])
            seq = raw[1] if type(raw[1]) is int else None
            wrong = [
                f"{name} column {_holds(value, expected)}"
                for (name, expected, nullable), value in zip(_COLUMNS, raw[:9], strict=True)
                if not (type(value) is expected or (nullable and value is None))
            ]
            if seq is not None:
                if seq < expected_seq:
                    problem(seq, f"seq {seq} is out of order: seq {expected_seq} was expected")
                elif seq > expected_seq:
                    missing = (
                        f"{expected_seq}"
                        if seq == expected_seq + 1
                        else f"{expected_seq}..{seq - 1}"
                    )
                    problem(expected_seq, f"record(s) seq {missing} missing before seq {seq}")
                elif not wrong and raw[7] != prev:
                    problem(seq, "prev does not match the previous record's digest")
                expected_seq = max(expected_seq, seq + 1)
                if seq == head_seq:
                    head_digest_found = raw[8]
            for text in wrong:
                problem(seq, text)
            prev = raw[8]
            if not wrong:
                check_record(RecordRow(*raw[:9]), problem, blobs, blob_problem, artifacts.check)
    if chain.table is not None and head_seq is not None:
        last = expected_seq - 1
        if last < head_seq:
            problem(
                expected_seq,
                f"chain ends at seq {last} but {head_seq + 1} records were committed:"
                f" seq {expected_seq}..{head_seq} are missing",
            )
        else:
            if isinstance(chain.head_digest, str) and head_digest_found != chain.head_digest:
                problem(head_seq, f"the digest of seq {head_seq} differs from the committed head")
            if last > head_seq:
                problem(
                    head_seq + 1,
                    f"records seq {head_seq + 1}..{last} lie beyond the committed head"
                    f" (seq {head_seq}) in the session index",
                )
    check_indexes(connection, where, (key, bound), chain.in_table, walked, problem)
    return count


def _found_by_id(connection: sqlite3.Connection, table: str, chain_id: str) -> bool:
    """Whether the table's primary key finds the id its own rows hold (reads by id use it)."""
    row = connection.execute(f"SELECT count(*) FROM {table} WHERE id = ?", (chain_id,)).fetchone()
    return bool(row and row[0] == 1)


def _text_breaks(connection: sqlite3.Connection) -> Iterator[ChainBreak]:
    """Text that is not UTF-8 in the tables no chain check reads whole (the chain indexes,
    tokens, snapshots, ...): each such value is a break of its chain, or of the store."""
    try:
        with _read_transaction(connection):
            tables = [
                str(name)
                for (name,) in connection.execute(
                    "SELECT name FROM sqlite_schema WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
                ).fetchall()
                if name not in _PER_RECORD
            ]
            for table in tables:
                yield from _table_text_breaks(connection, table)
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        yield ChainBreak(STORE, None, f"a table's text could not be read: {why(exc)}")


def _table_text_breaks(connection: sqlite3.Connection, table: str) -> Iterator[ChainBreak]:
    columns = [
        str(name)
        for name, declared in connection.execute(
            "SELECT name, type FROM pragma_table_info(?)", (table,)
        ).fetchall()
        if str(declared).upper() == "TEXT"
    ]
    if not columns:
        return
    quoted = ", ".join(f'"{column}"' for column in columns)
    cursor = connection.execute(f'SELECT {quoted} FROM "{table}"')
    while rows := cursor.fetchmany(_FETCH):
        for row in rows:
            for column, value in zip(columns, row, strict=True):
                if not isinstance(value, Undecodable):
                    continue
                key = row[0]
                if table in _INDEXES and isinstance(key, str):
                    yield ChainBreak(
                        key, None, f"the {table} index's {column} column {_holds(value, str)}"
                    )
                else:
                    yield ChainBreak(
                        STORE,
                        None,
                        f"table {table}, row {columns[0]} {str(key)!r}: column {column}"
                        f" {_holds(value, str)}",
                    )


def digest_holds(row: RecordRow) -> bool:
    """Whether the row's digest is the one its fields make: an altered record's is not."""
    recomputed = digest_of(
        row.session_id, row.seq, row.kind, row.turn, row.participant, row.at, row.payload,
        row.prev,
    )  # fmt: skip
    return recomputed == row.digest


def check_record(
    row: RecordRow,
    problem: Callable[[int | None, str], None],
    blobs: dict[str, str | None],
    blob_problem: Callable[[str], str | None],
    artifact_problem: Callable[[str], str | None],
) -> None:
    """One record's own checks, for every engine's verify: its digest, its payload, and the
    state blob and artifact it cites. ``blobs`` keeps each blob's answer for the run, so each
    distinct blob is read and hashed once (``blob_problem`` is asked only the first time)."""
    if not digest_holds(row):
        problem(row.seq, f"digest mismatch: the {row.kind!r} record was altered")
        return
    try:
        payload = decode_payload(row.payload)
    except msgspec.DecodeError as exc:
        problem(row.seq, f"payload does not decode: {exc}")
        return
    tag = payload.__struct_config__.tag
    if tag != row.kind:
        problem(row.seq, f"kind column says {row.kind!r} but the payload is {tag!r}")
    state = payload.state if isinstance(payload, STATEFUL) else None
    if state:
        if state not in blobs:
            blobs[state] = blob_problem(state)
        if (trouble := blobs[state]) is not None:
            problem(row.seq, trouble)
    if isinstance(payload, Artifact) and (trouble := artifact_problem(payload.sha256)):
        problem(row.seq, trouble)


def _blob_problem(connection: sqlite3.Connection, digest: str) -> str | None:
    try:
        found = connection.execute(SELECT_BLOB, (digest,)).fetchone()
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        return f"state blob {digest} cannot be read: {why(exc)}"
    if found is None:
        return f"state blob {digest} is missing"
    codec, data = found
    if not isinstance(data, bytes):
        return f"state blob {digest} {_holds(data, bytes)}"
    try:
        unpack(digest, codec, data)
    except BlobDamage as exc:  # decompressed and checked in one place, the store's readers' too
        return str(exc)
    return None


def _holds(value: object, expected: type) -> str:
    """``holds text 'x', not an integer``: what a column holds instead of what it should."""
    if isinstance(value, Undecodable):
        return f"holds text that is not UTF-8 ({value.raw!r})"
    found = "null" if value is None else _SQL_TYPES.get(type(value), type(value).__name__)
    shown = f" {value!r}" if expected is int and isinstance(value, str | int | float) else ""
    return f"holds {found}{shown}, not {_SQL_TYPES[expected]}"
