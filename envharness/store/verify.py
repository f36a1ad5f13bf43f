"""Re-check every session's hash chain, its head, and the blobs and artifacts it cites.

Runs in a worker thread on its own read connection (WAL readers never block the writer).
Each problem names the session and the record's ``seq`` so a person can look at it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable

import msgspec

from envharness.records import (
    Artifact,
    Checkpoint,
    Intervention,
    Outcome,
    RecordRow,
    SegmentStarted,
    decode_payload,
    digest_of,
)
from envharness.store.artifacts import ArtifactFiles

__all__ = ["ChainBreak", "VerifyReport", "verify_store"]

_FETCH = 2000
_STATEFUL = (Outcome, Checkpoint, Intervention, SegmentStarted)


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


def verify_store(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    on_session: Callable[[str], None] | None = None,
) -> VerifyReport:
    heads = {
        row[0]: (row[1], row[2])
        for row in connection.execute("SELECT id, head_seq, head_digest FROM sessions")
    }
    in_records = [row[0] for row in connection.execute("SELECT DISTINCT session_id FROM records")]
    session_ids = sorted(set(heads) | set(in_records))
    breaks: list[ChainBreak] = []
    total = 0
    for session_id in session_ids:
        count, found = _verify_session(connection, artifacts, session_id, heads.get(session_id))
        total += count
        breaks.extend(found)
        if on_session is not None:
            on_session(session_id)
    return VerifyReport(sessions=len(session_ids), records=total, breaks=tuple(breaks))


def _verify_session(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    session_id: str,
    head: tuple[int, str] | None,
) -> tuple[int, list[ChainBreak]]:
    breaks: list[ChainBreak] = []

    def problem(seq: int | None, text: str) -> None:
        breaks.append(ChainBreak(session_id, seq, text))

    cursor = connection.execute(
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
        " FROM records WHERE session_id = ? ORDER BY seq",
        (session_id,),
    )
    expected_seq = 0
    prev: str | None = None
    count = 0
    while rows := cursor.fetchmany(_FETCH):
        for raw in rows:
            row = RecordRow(*raw)
            count += 1
            if row.seq != expected_seq:
                missing = (
                    f"{expected_seq}"
                    if row.seq == expected_seq + 1
                    else (f"{expected_seq}..{row.seq - 1}")
                )
                problem(expected_seq, f"record(s) seq {missing} missing before seq {row.seq}")
            elif row.prev != prev:
                problem(row.seq, "prev does not match the previous record's digest")
            payload = bytes(row.payload) if row.payload is not None else b""
            recomputed = digest_of(
                row.session_id, row.seq, row.kind, row.turn, row.participant, row.at,
                payload, row.prev,
            )  # fmt: skip
            if recomputed != row.digest:
                problem(row.seq, f"digest mismatch: the {row.kind!r} record was altered")
            else:
                _check_payload(connection, artifacts, row, payload, problem)
            expected_seq = row.seq + 1
            prev = row.digest
    if head is None:
        problem(None, "records exist but the session index has no entry for this session")
    else:
        head_seq, head_digest = head
        if expected_seq - 1 < head_seq:
            problem(
                expected_seq,
                f"chain ends at seq {expected_seq - 1} but {head_seq + 1} records were committed:"
                f" seq {expected_seq}..{head_seq} are missing",
            )
        elif expected_seq - 1 == head_seq and prev != head_digest:
            problem(head_seq, "the last record's digest differs from the committed head")
    return count, breaks


def _check_payload(
    connection: sqlite3.Connection,
    artifacts: ArtifactFiles,
    row: RecordRow,
    payload_bytes: bytes,
    problem: Callable[[int | None, str], None],
) -> None:
    try:
        payload = decode_payload(payload_bytes)
    except msgspec.DecodeError as exc:
        problem(row.seq, f"payload does not decode: {exc}")
        return
    tag = payload.__struct_config__.tag
    if tag != row.kind:
        problem(row.seq, f"kind column says {row.kind!r} but the payload is {tag!r}")
    state = payload.state if isinstance(payload, _STATEFUL) else None
    if state:
        blob = connection.execute("SELECT data FROM blobs WHERE digest = ?", (state,)).fetchone()
        if blob is None:
            problem(row.seq, f"state blob {state} is missing")
        elif hashlib.sha256(blob[0]).hexdigest() != state:
            problem(row.seq, f"state blob {state} was modified")
    if isinstance(payload, Artifact) and (trouble := artifacts.check(payload.sha256)):
        problem(row.seq, trouble)
