"""Re-check every session's hash chain, its head, and the blobs and artifacts it cites.

Runs in a worker thread on its own read connection (WAL readers never block the writer), so
sessions may be written while it runs. The list of chains and their committed heads is read in
one read transaction, a consistent snapshot; each chain is then checked up to the head it had
in that snapshot, so a record appended meanwhile is neither checked nor mistaken for a break.

Each problem names the session and the record's ``seq`` so a person can look at it. A tampered
row is reported, never raised: even a column holding a value of the wrong SQL type (text where
a payload's bytes belong, say) becomes a :class:`ChainBreak`.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
from envharness.store.sources import verify_sources

__all__ = ["ChainBreak", "VerifyReport", "verify_store"]

_FETCH = 2000
_STATEFUL = (Outcome, Checkpoint, Intervention, SegmentStarted, OperationReceipt)

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
    """One problem found: which session, which record (``None`` = the session as a whole)."""

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


class _Chain(msgspec.Struct):
    """A chain as the snapshot saw it: its index entry (if any) and its highest integer seq."""

    head_seq: object = None
    head_digest: object = None
    indexed: bool = False
    last_seq: int | None = None


def verify_store(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    on_session: Callable[[str], None] | None = None,
) -> VerifyReport:
    chains = _snapshot(connection)
    blobs: dict[str, str | None] = {}
    breaks: list[ChainBreak] = []
    total = 0
    for chain_id in sorted(chains, key=lambda key: (not isinstance(key, str), str(key))):
        with _read_transaction(connection):
            count, found = _verify_chain(connection, artifacts, blobs, chain_id, chains[chain_id])
        total += count
        breaks.extend(found)
        if on_session is not None:
            on_session(str(chain_id))
    # Imported sources keep their own chains (envharness.store.sources); they count as chains.
    sources, imported, source_breaks = verify_sources(connection)
    breaks.extend(ChainBreak(*source_break) for source_break in source_breaks)
    return VerifyReport(
        sessions=len(chains) + sources, records=total + imported, breaks=tuple(breaks)
    )


@contextmanager
def _read_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: every statement inside sees the same committed state."""
    connection.execute("BEGIN")
    try:
        yield
    finally:
        if connection.in_transaction:
            connection.execute("COMMIT")


def _snapshot(connection: sqlite3.Connection) -> dict[object, _Chain]:
    """Every chain (session, experiment or optimizer run) with its committed head, read
    consistently.

    The index and the records are read in one transaction: read in two, a session committed
    between the reads would seem to have records but no index entry.
    """
    chains: dict[object, _Chain] = {}
    with _read_transaction(connection):
        for chain_id, head_seq, head_digest in connection.execute(
            "SELECT id, head_seq, head_digest FROM sessions"
            " UNION ALL SELECT id, head_seq, head_digest FROM experiments"
            " UNION ALL SELECT id, head_seq, head_digest FROM optimizer_runs"
        ):
            chains[chain_id] = _Chain(head_seq=head_seq, head_digest=head_digest, indexed=True)
        for chain_id, last_seq in connection.execute(
            "SELECT session_id, max(CASE WHEN typeof(seq) = 'integer' THEN seq END)"
            " FROM records GROUP BY session_id"
        ):
            chains.setdefault(chain_id, _Chain()).last_seq = last_seq
    return chains


def _verify_chain(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    blobs: dict[str, str | None],
    chain_id: object,
    chain: _Chain,
) -> tuple[int, list[ChainBreak]]:
    session_id = str(chain_id)
    breaks: list[ChainBreak] = []

    def problem(seq: int | None, text: str) -> None:
        breaks.append(ChainBreak(session_id, seq, text))

    head_seq = chain.head_seq if type(chain.head_seq) is int else None
    if chain.indexed and head_seq is None:
        problem(None, f"the session index's head_seq {_holds(chain.head_seq, int)}")
    if chain.indexed and not isinstance(chain.head_digest, str):
        problem(None, f"the session index's head_digest {_holds(chain.head_digest, str)}")
    # Only what the snapshot saw: records appended since are for the next run to check.
    bound = max(
        head_seq if head_seq is not None else -1,
        chain.last_seq if chain.last_seq is not None else -1,
    )
    cursor = connection.execute(
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
        " FROM records WHERE session_id = ? AND (seq <= ? OR typeof(seq) != 'integer')"
        " ORDER BY seq",
        (chain_id, bound),
    )
    expected_seq = 0
    prev: object = None
    head_digest_found: object = None
    count = 0
    while rows := cursor.fetchmany(_FETCH):
        for raw in rows:
            count += 1
            seq = raw[1] if type(raw[1]) is int else None
            wrong = [
                f"{name} column {_holds(value, expected)}"
                for (name, expected, nullable), value in zip(_COLUMNS, raw, strict=True)
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
                _check_row(connection, artifacts, blobs, RecordRow(*raw), problem)
    if not chain.indexed:
        problem(None, "records exist but the session index has no entry for this session")
    elif head_seq is not None:
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
    return count, breaks


def _check_row(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    blobs: dict[str, str | None],
    row: RecordRow,
    problem: Callable[[int | None, str], None],
) -> None:
    recomputed = digest_of(
        row.session_id, row.seq, row.kind, row.turn, row.participant, row.at, row.payload,
        row.prev,
    )  # fmt: skip
    if recomputed != row.digest:
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
    state = payload.state if isinstance(payload, _STATEFUL) else None
    if state:
        if state not in blobs:  # each distinct blob is read and hashed once per run
            blobs[state] = _blob_problem(connection, state)
        if (trouble := blobs[state]) is not None:
            problem(row.seq, trouble)
    if isinstance(payload, Artifact) and (trouble := artifacts.check(payload.sha256)):
        problem(row.seq, trouble)


def _blob_problem(connection: sqlite3.Connection, digest: str) -> str | None:
    found = connection.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
    if found is None:
        return f"state blob {digest} is missing"
    data = found[0]
    if not isinstance(data, bytes):
        return f"state blob {digest} {_holds(data, bytes)}"
    if hashlib.sha256(data).hexdigest() != digest:
        return f"state blob {digest} was modified"
    return None


def _holds(value: object, expected: type) -> str:
    """``holds text 'x', not an integer``: what a column holds instead of what it should."""
    found = "null" if value is None else _SQL_TYPES.get(type(value), type(value).__name__)
    shown = f" {value!r}" if expected is int and isinstance(value, str | int | float) else ""
    return f"holds {found}{shown}, not {_SQL_TYPES[expected]}"
