"""The record envelope, its canonical bytes, and the per-session hash chain.

A record's ``digest`` is the sha256 of the canonical JSON (keys sorted) of every other field,
with ``prev`` holding the digest of the session's previous record. The payload enters the
digest as the exact bytes that were stored, so verification never depends on re-encoding
decoded values (which would change when a payload type gains a field).
"""

from __future__ import annotations

import collections.abc
import hashlib
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any, overload

import msgspec

from envharness.records.payloads import EnvironmentRef, Payload, SessionCreated

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


class RecordRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A sealed record as stored: the payload stays in its digested bytes.

    Not a garbage-collected object at all (``gc=False``: it holds only strings, ints, bytes
    and ``None``, so it is never part of a cycle). A session's rows live until their commit,
    with ~30 sessions waiting for it at a time: as a ``NamedTuple`` (a tuple subclass, which
    CPython always tracks) each row counted towards the next young collection and was a fifth
    of what every collection found alive and carried into the older generations. Still a
    sequence of its nine fields, in order, for the code that binds, unpacks or slices it like
    the tuple it was (a registered ``Sequence``); hot paths take
    :func:`msgspec.structs.astuple` instead. Unlike the tuple, a row equals only a row.
    """

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: bytes
    prev: str | None
    digest: str

    def __len__(self) -> int:
        return 9

    def __iter__(self) -> Iterator[Any]:
        return iter(_astuple(self))

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Any, ...]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return _astuple(self)[index]

    def __contains__(self, value: object) -> bool:
        return value in _astuple(self)

    def __reversed__(self) -> Iterator[Any]:
        return iter(_astuple(self)[::-1])

    def index(self, value: object) -> int:
        return _astuple(self).index(value)

    def count(self, value: object) -> int:
        return _astuple(self).count(value)


collections.abc.Sequence.register(RecordRow)  # isinstance and match see the sequence it is


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
    ``+00:00``, at a third of the cost: every sealed record pays for it, and the records sealed
    within one second share the formatting of that second (kept in one tuple, so that a thread
    never reads one second's number with another's text).
    """
    global _last_second
    second, microsecond = divmod(time.time_ns() // 1000, 1_000_000)
    last = _last_second  # one read: another thread may replace it meanwhile, never tear it
    if last[0] != second:
        last = _last_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{last[1]}.{microsecond:06d}Z"


_last_second: tuple[int, str] = (-1, "")
"""The second :func:`utc_now_text` formatted last, and its text."""


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
        if payload.__class__ is SessionCreated:
            data = _encode_created(payload)
        else:
            data = _canonical_encoder.encode(payload)
        kind: str = payload.__struct_config__.tag  # type: ignore[assignment]
        at = utc_now_text()
        seq = self._next_seq
        prev = self._prev
        session_id = self.session_id
        # digest_of, inline: every record of every session is sealed here.
        body = _Body(session_id, seq, kind, turn, participant, at, msgspec.Raw(data), prev)
        digest = _sha256(_canonical_encoder.encode(body)).hexdigest()
        self._next_seq = seq + 1
        self._prev = digest
        return RecordRow(session_id, seq, kind, turn, participant, at, data, prev, digest)


class _EncodedEnvironment:
    """The last environment a ``session.created`` recorded, with its canonical bytes."""

    __slots__ = ("bytes", "environment")

    def __init__(self, environment: EnvironmentRef | None, data: bytes) -> None:
        self.environment = environment
        self.bytes = msgspec.Raw(data)


_last_environment = _EncodedEnvironment(None, b"")


def _encode_created(payload: SessionCreated) -> bytes:
    """The record's canonical bytes, its environment encoded once for all the sessions that
    share it.

    Every session of an experiment records the same environment (one frozen
    :class:`EnvironmentRef` per spec, with the JSON Schemas of its types): most of the
    record, and with keys sorted, more than half the cost of encoding it. The bytes kept for
    that very object go in as raw JSON where the sorted encoder would have written them, so
    the record is byte for byte what encoding it whole gives (a test compares the two)."""
    global _last_environment  # replaced whole: another thread sees the old entry or the new
    config = payload.config
    kept = _last_environment
    if kept.environment is not config.environment:
        kept = _EncodedEnvironment(
            config.environment, _canonical_encoder.encode(config.environment)
        )
        _last_environment = kept
    shared = msgspec.structs.replace(config, environment=kept.bytes)
    return _canonical_encoder.encode(SessionCreated(config=shared))


_sha256 = hashlib.sha256
_astuple = msgspec.structs.astuple
