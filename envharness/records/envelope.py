"""The record envelope, its canonical bytes, and the per-session hash chain.

A record's ``digest`` is the sha256 of the canonical JSON (keys sorted) of every other field,
with ``prev`` holding the digest of the session's previous record. The payload enters the
digest as the exact bytes that were stored, so verification never depends on re-encoding
decoded values (which would change when a payload type gains a field).
"""

from __future__ import annotations

import functools
import hashlib
import time
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from envharness.records.payloads import Payload

__all__ = [
    "Record",
    "RecordRow",
    "SessionChain",
    "canonical",
    "decode_payload",
    "decode_record",
    "digest_of",
    "encode_record",
    "utc_now_text",
]

_canonical_encoder = msgspec.json.Encoder(order="sorted")
_record_decoder = msgspec.json.Decoder()
_payload_decoder: msgspec.json.Decoder[Payload] = msgspec.json.Decoder(Payload)
_plain_encoder = msgspec.json.Encoder()


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One evidence entry, as readers see it."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: datetime
    payload: Payload
    prev: str | None
    digest: str


class RecordRow(NamedTuple):
    """A sealed record as stored: the payload stays in its digested bytes."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: bytes
    prev: str | None
    digest: str


class _Body(msgspec.Struct, frozen=True):
    """The fields a digest covers; encoded with sorted keys so field order never matters."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes: what every digest in envharness is computed over."""
    return _canonical_encoder.encode(value)


def digest_of(
    session_id: str,
    seq: int,
    kind: str,
    turn: int | None,
    participant: str | None,
    at: str,
    payload: bytes,
    prev: str | None,
) -> str:
    body = _Body(session_id, seq, kind, turn, participant, at, msgspec.Raw(payload), prev)
    return hashlib.sha256(_canonical_encoder.encode(body)).hexdigest()


def utc_now_text() -> str:
    """The current time as RFC 3339 UTC text with microseconds, the form stored in ``at``.

    Same text as ``datetime.now(UTC).isoformat(timespec="microseconds")`` with ``Z`` for
    ``+00:00``, at a third of the cost: every sealed record pays for it.
    """
    second, microsecond = divmod(time.time_ns() // 1000, 1_000_000)
    return f"{_utc_second_text(second)}.{microsecond:06d}Z"


@functools.lru_cache(maxsize=8)
def _utc_second_text(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def decode_payload(data: bytes) -> Payload:
    return _payload_decoder.decode(data)


def decode_record(row: RecordRow) -> Record:
    return Record(
        session_id=row.session_id,
        seq=row.seq,
        kind=row.kind,
        turn=row.turn,
        participant=row.participant,
        at=msgspec.convert(row.at, datetime),
        payload=decode_payload(row.payload),
        prev=row.prev,
        digest=row.digest,
    )


def encode_record(row: RecordRow) -> bytes:
    """One JSON object for export: the envelope with the payload bytes embedded verbatim."""
    return _plain_encoder.encode(
        {
            "session_id": row.session_id,
            "seq": row.seq,
            "kind": row.kind,
            "turn": row.turn,
            "participant": row.participant,
            "at": row.at,
            "payload": msgspec.Raw(row.payload),
            "prev": row.prev,
            "digest": row.digest,
        }
    )


class SessionChain:
    """Seals records for one session: dense ``seq`` from 0, each linked to the previous digest.

    One chain per session and one writer per chain; the store's UNIQUE (session, seq) turns a
    second writer's attempt into a :class:`~envharness.errors.ChainConflictError`.
    """

    __slots__ = ("_next_seq", "_prev", "session_id")

    def __init__(self, session_id: str, *, next_seq: int = 0, prev: str | None = None) -> None:
        self.session_id = session_id
        self._next_seq = next_seq
        self._prev = prev

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def head(self) -> str | None:
        """Digest of the last sealed record (``None`` before the first)."""
        return self._prev

    def seal(
        self,
        payload: Payload,
        *,
        turn: int | None = None,
        participant: str | None = None,
    ) -> RecordRow:
        data = _canonical_encoder.encode(payload)
        kind: str = payload.__struct_config__.tag  # type: ignore[assignment]
        at = utc_now_text()
        seq = self._next_seq
        digest = digest_of(self.session_id, seq, kind, turn, participant, at, data, self._prev)
        row = RecordRow(self.session_id, seq, kind, turn, participant, at, data, self._prev, digest)
        self._next_seq = seq + 1
        self._prev = digest
        return row
