"""The import line: one hash-chained source record per line of JSON (``docs/imports.md``).

A producer (another tool) writes its records as lines::

    {"schema_version": 1, "source": "acme/nightly-evals", "position": 0, "episode": "run-1",
     "kind": "episode.started", "at": "2026-01-05T09:00:00Z", "payload": {...},
     "prev": null, "hash": "…"}

``hash`` is the sha256 of the canonical JSON of every other field, with the payload's exact
bytes — the recipe of our own digests — and ``prev`` the hash of the position before.
:class:`SourceChain` seals records that way for Python producers (and for our importers of other
formats). :func:`read_source_lines` turns lines back into checked rows, naming the line and
position of anything wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Annotated, Any

import msgspec

from envharness.records import canonical, utc_now_text
from envharness.store.sources import (
    KNOWN_SCHEMA_VERSIONS,
    SOURCE_SCHEMA_VERSION,
    SourceChainError,
    SourceFormatError,
    SourceRow,
    chain_problem,
    check_source_id,
    source_hash_of,
)
from envharness.trajectories.sources.kinds import check_payload

__all__ = [
    "MAX_EPISODE_LENGTH",
    "MAX_INTEGER",
    "SourceChain",
    "SourceRecord",
    "encode_source_row",
    "encoding_problem",
    "read_source_lines",
    "row_problem",
]

MAX_EPISODE_LENGTH = 200
MAX_INTEGER = 2**63 - 1
"""The largest position or turn: SQLite's INTEGER is a signed 64-bit number."""
_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)*")
_HASH = re.compile(r"[0-9a-f]{64}")
_plain = msgspec.json.Encoder()


class SourceRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One import line. Unknown fields are refused: the hash would not cover them."""

    schema_version: int
    source: str
    position: int
    episode: str
    kind: str
    at: str
    payload: msgspec.Raw
    prev: str | None
    hash: str
    turn: int | None = None
    participant: str | None = None


class _Peek(msgspec.Struct, forbid_unknown_fields=False):
    """What is read of a line before the rest: its version and position, for the errors."""

    schema_version: Any = None
    position: Any = None
    resourceSpans: Any = None  # OTLP's name: the line is of the other format


_peek = msgspec.json.Decoder(_Peek)
_line = msgspec.json.Decoder(SourceRecord)
_moment = msgspec.json.Decoder(datetime)

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]


class _WellFormed(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A :class:`SourceRecord` whose fields already pass most of :func:`row_problem`'s checks,
    as constraints msgspec runs while decoding (``re.search``, hence the anchors). Only the
    fast path decodes with it: a line it refuses goes through the full checks, which name
    the problem in words (:func:`_decode_checked`). ``hash`` and ``prev`` are left to the
    chain (:func:`_continues`): a hash equal to the one recomputed is a sha256 in hex."""

    schema_version: int
    source: str
    position: _Count
    episode: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_EPISODE_LENGTH)]
    kind: Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*\Z")]
    at: str
    payload: msgspec.Raw
    prev: str | None
    hash: str
    turn: _Count | None = None
    participant: str | None = None


_well_formed = msgspec.json.Decoder(_WellFormed)


def encode_source_row(row: SourceRow) -> bytes:
    """One import line (without the newline) for a stored row: the payload's bytes verbatim,
    so the line re-imports, and re-hashes, to the same record."""
    return _plain.encode(
        {
            "schema_version": row.schema_version,
            "source": row.source,
            "position": row.position,
            "episode": row.episode,
            "kind": row.kind,
            "turn": row.turn,
            "participant": row.participant,
            "at": row.at,
            "payload": msgspec.Raw(row.payload),
            "prev": row.prev,
            "hash": row.hash,
        }
    )


class SourceChain:
    """Seals records for one source: positions from ``next_position``, each linked to the hash
    before it. To continue a source that already holds records, start from its head
    (``SourceStore.head``)."""

    __slots__ = ("_next", "_prev", "source")

    def __init__(self, source: str, *, next_position: int = 0, prev: str | None = None) -> None:
        self.source = check_source_id(source)
        self._next = next_position
        self._prev = prev

    @property
    def next_position(self) -> int:
        return self._next

    def seal(
        self,
        episode: str,
        kind: str,
        payload: Any,
        *,
        at: str | None = None,
        turn: int | None = None,
        participant: str | None = None,
    ) -> SourceRow:
        """The next record of the chain; ``payload`` (a JSON object) is encoded canonically."""
        data = canonical(payload)
        at = at or utc_now_text()
        position = self._next
        digest = source_hash_of(
            self.source, position, SOURCE_SCHEMA_VERSION, episode, kind, turn, participant, at,
            data, self._prev,
        )  # fmt: skip
        row = SourceRow(
            self.source, position, SOURCE_SCHEMA_VERSION, episode, kind, turn, participant, at,
            data, self._prev, digest,
        )  # fmt: skip
        self._next = position + 1
        self._prev = digest
        return row


def read_source_lines(
    source: str, lines: Iterable[bytes], *, origin: str = "input"
) -> Iterator[SourceRow]:
    """Decode and check import lines of ``source``: each record well formed, hashed right, and
    chained to the line before it. Blank lines are skipped.

    Raises :class:`~envharness.store.sources.SourceImportError` naming ``origin``, the line
    and the position at fault.
    """
    check_source_id(source)
    previous: SourceRow | None = None
    for number, text in enumerate(lines, start=1):
        if not text or text.isspace():  # what ``strip`` would empty, without copying the line
            continue
        row = _well_formed_row(source, text)
        if row is not None and _continues(previous, row):
            previous = row
            yield row
            continue
        # Something is wrong, or unusual: the full checks, in their order, say what.
        row = _decode_checked(source, text, f"{origin} line {number}")
        found = chain_problem(previous, row)
        if found is not None:
            problem, detail = found
            raise SourceChainError(
                f"{origin} line {number}: {detail}",
                source=source,
                position=row.position,
                problem=problem,
            )
        previous = row
        yield row


def _not_utf8(data: bytes) -> str | None:
    """Why ``data`` is not UTF-8 text, in words with the fix (``None``: it is)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); lines are "
            "UTF-8: re-encode the file, e.g. `iconv -f latin1 -t utf-8`"
        )
    return None


def encoding_problem(text: bytes) -> str | None:
    """Why a line that did not decode as JSON is not even UTF-8 text, if that is why: a byte
    order mark, UTF-16, or another encoding (``None``: its text is UTF-8)."""
    if text.startswith(b"\xef\xbb\xbf"):
        return "starts with a byte order mark (U+FEFF); save the file as UTF-8 without one"
    if text.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in text:
        return "is UTF-16, not UTF-8; re-encode the file, e.g. `iconv -f utf-16 -t utf-8`"
    return _not_utf8(text)


def _well_formed_row(source: str, text: bytes) -> SourceRow | None:
    """The row of a line that passes every check of :func:`_decode_checked`, decoded once;
    ``None`` for any other line (never a different verdict: the full checks then run).

    The fast path of an import (issue 20): the full checks peek at the line before decoding
    it, and check the fields in Python; here msgspec checks most of them while decoding."""
    try:
        record = _well_formed.decode(text)
    except msgspec.DecodeError:  # a ValidationError too
        return None
    if record.schema_version not in KNOWN_SCHEMA_VERSIONS or record.source != source:
        return None
    payload = bytes(record.payload)
    # An ASCII line is UTF-8 throughout; only another line needs its payload decoded.
    if not payload.startswith(b"{") or not (text.isascii() or _not_utf8(payload) is None):
        return None
    try:
        moment = _moment.decode(_plain.encode(record.at))
    except msgspec.MsgspecError:
        return None
    if moment.tzinfo is None or check_payload(record.kind, payload) is not None:
        return None
    return SourceRow(
        record.source, record.position, record.schema_version, record.episode, record.kind,
        record.turn, record.participant, record.at, payload, record.prev, record.hash,
    )  # fmt: skip


def _continues(previous: SourceRow | None, row: SourceRow) -> bool:
    """Whether a row of :func:`_well_formed_row` passes the rest of the full checks: its hash
    and its link. Its hash then equals the one recomputed; its ``prev`` the hash of the row
    before, or null, or (first of a batch) a hash in form, linked inside the transaction."""
    if chain_problem(previous, row) is not None:
        return False
    return previous is not None or row.prev is None or _HASH.fullmatch(row.prev) is not None


def _decode_checked(source: str, text: bytes, where: str) -> SourceRow:
    """Decode one line and check every field, raising an error that names the problem."""
    try:
        peek = _peek.decode(text)
    except msgspec.DecodeError as exc:
        encoding = encoding_problem(text)
        raise SourceFormatError(
            f"{where}: {encoding}"
            if encoding is not None
            else f"{where}: not a JSON object ({exc}); each line holds one source record "
            "(docs/imports.md)",
            source=source,
            position=None,
        ) from None
    position = peek.position if type(peek.position) is int else None
    if peek.schema_version is None and peek.resourceSpans is not None:
        raise SourceFormatError(
            f"{where}: this is an OpenTelemetry trace export, not envharness import lines; "
            "import it with --format otel-genai (format='otel-genai')",
            source=source,
            position=None,
        )
    if peek.schema_version not in KNOWN_SCHEMA_VERSIONS or type(peek.schema_version) is not int:
        known = ", ".join(str(version) for version in sorted(KNOWN_SCHEMA_VERSIONS))
        found = (
            "no schema_version"
            if peek.schema_version is None
            else (f"schema_version {peek.schema_version!r}")
        )
        raise SourceFormatError(
            f"{where}{_at(position)}: {found} is not one this envharness reads ({known}); "
            "upgrade envharness to import it, or have the source write schema_version "
            f"{SOURCE_SCHEMA_VERSION} (docs/imports.md)",
            source=source,
            position=position,
            problem="schema",
        )
    try:
        record = _line.decode(text)
    except msgspec.DecodeError as exc:  # a ValidationError, or a field that is not UTF-8
        encoding = encoding_problem(text)
        raise SourceFormatError(
            f"{where}{_at(position)}: {encoding}"
            if encoding is not None
            else f"{where}{_at(position)}: {exc}; see docs/imports.md for the fields of a line",
            source=source,
            position=position,
        ) from None
    row = SourceRow(
        record.source, record.position, record.schema_version, record.episode, record.kind,
        record.turn, record.participant, record.at, bytes(record.payload), record.prev,
        record.hash,
    )  # fmt: skip
    problem = row_problem(source, row)
    if problem is not None:
        raise SourceFormatError(
            f"{where}{_at(position)}: {problem}", source=source, position=position
        )
    return row


def _at(position: int | None) -> str:
    return f" (position {position})" if position is not None else ""


def row_problem(source: str, row: SourceRow) -> str | None:
    """What is wrong with one record's fields or, for a kind that shapes the trajectory, its
    payload (``None``: nothing). Lines and records sealed in Python pass the same checks, so
    whatever is stored projects, and exports as lines that import again."""
    return _field_problem(source, row) or check_payload(row.kind, row.payload)


def _field_problem(source: str, record: SourceRow) -> str | None:
    if record.source != source:
        return (
            f"the record belongs to source {record.source!r}, but it is being imported as "
            f"{source!r}; import the file as {record.source!r}"
        )
    if record.position < 0:
        return f"position {record.position} is negative; positions count from 0"
    if record.position > MAX_INTEGER or (record.turn is not None and record.turn > MAX_INTEGER):
        return (
            f"position and turn must be at most {MAX_INTEGER} (2^63 - 1), the largest "
            "number the store holds"
        )
    if not record.episode or len(record.episode) > MAX_EPISODE_LENGTH:
        return (
            f"episode must be a non-empty string of at most {MAX_EPISODE_LENGTH} characters "
            "(the source's id of the run, trace or sample the record belongs to)"
        )
    if not _KIND.fullmatch(record.kind):
        return (
            f"kind {record.kind!r} is not a kind name: lowercase words joined by dots, "
            "e.g. model.call or episode.ended"
        )
    if record.turn is not None and record.turn < 0:
        return f"turn {record.turn} is negative; turns count from 0 (or give null)"
    if not _HASH.fullmatch(record.hash):
        return f"hash {record.hash!r} is not a sha256 in lowercase hex (64 digits)"
    if record.prev is not None and not _HASH.fullmatch(record.prev):
        return f"prev {record.prev!r} is neither null nor a sha256 in lowercase hex"
    if not bytes(record.payload).startswith(b"{"):
        return "payload must be a JSON object ({...})"
    # The payload is kept as raw bytes, so the JSON decoder never checks its text: bytes
    # that are not UTF-8 would be stored, hashed and exported as lines no reader can decode.
    encoding = _not_utf8(bytes(record.payload))
    if encoding is not None:
        return f"payload {encoding}"
    try:
        moment = msgspec.json.decode(_plain.encode(record.at), type=datetime)
    except msgspec.ValidationError:
        moment = None
    if moment is None or moment.tzinfo is None:
        return (
            f"at {record.at!r} is not an RFC 3339 time with a zone, "
            "e.g. 2026-01-05T09:00:00Z or 2026-01-05T10:00:00+01:00"
        )
    return None
