"""A source's chain: the record as stored, its hash, and the rules that link one to the next.

Each source is one hash chain: positions dense from 0, each record's ``hash`` the sha256 of its
canonical bytes, ``prev`` the hash of the record before it — our own digest recipe
(docs/evidence.md) over a source record's fields (:func:`source_hash_of`). These checks need no
store: an import runs them on a batch before its transaction, ``verify`` on what is stored.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Literal, NamedTuple

import msgspec

from envharness.errors import ConfigurationError
from envharness.records import canonical
from envharness.store.sources.errors import SourceChainError, SourceFormatError

__all__ = [
    "CAPTURE_FAILED",
    "BatchCheck",
    "COLUMNS",
    "KNOWN_SCHEMA_VERSIONS",
    "SOURCE_SCHEMA_VERSION",
    "SourceRow",
    "chain_problem",
    "check_batch",
    "check_source_id",
    "position_span",
    "source_hash_of",
]

SOURCE_SCHEMA_VERSION = 1
"""The import record schema this envharness writes (docs/imports.md)."""
KNOWN_SCHEMA_VERSIONS = frozenset({SOURCE_SCHEMA_VERSION})
"""Every import record schema version this envharness reads."""
CAPTURE_FAILED = "capture.failed"
"""The kind of record in which a source says it failed to capture something."""
COLUMNS = (
    "source, position, schema_version, episode, kind, turn, participant, at, payload, prev, hash"
)
"""The ``source_records`` columns of a :class:`SourceRow`, in its order."""

_SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)+")
_MAX_SOURCE_ID = 200


class SourceRow(NamedTuple):
    """One imported record as stored: the payload stays in the bytes its hash covers."""

    source: str
    position: int
    schema_version: int
    episode: str
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: bytes
    prev: str | None
    hash: str


class _Body(msgspec.Struct, frozen=True):
    """The fields a source record's hash covers (every field but ``hash``); keys sorted."""

    source: str
    position: int
    schema_version: int
    episode: str
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None


def source_hash_of(
    source: str,
    position: int,
    schema_version: int,
    episode: str,
    kind: str,
    turn: int | None,
    participant: str | None,
    at: str,
    payload: bytes,
    prev: str | None,
) -> str:
    """sha256 (hex) of the canonical JSON of a source record without its ``hash``.

    The payload enters as its exact bytes, as in our own digests (docs/evidence.md).
    """
    body = _Body(
        source, position, schema_version, episode, kind, turn, participant, at,
        msgspec.Raw(payload), prev,
    )  # fmt: skip
    return hashlib.sha256(canonical(body)).hexdigest()


def _recomputed(row: SourceRow) -> str:
    return source_hash_of(*row[:10])


def check_source_id(source: str) -> str:
    """``source`` when it is a namespaced source id (``namespace/name``); an error otherwise."""
    if len(source) <= _MAX_SOURCE_ID and _SOURCE_ID.fullmatch(source):
        return source
    raise ConfigurationError(
        f"source {source!r} is not a namespaced source id: give it as NAMESPACE/NAME, e.g. "
        "acme/nightly-evals or otel/weather-agent (letters, digits, '.', '_', '-'; at most "
        f"{_MAX_SOURCE_ID} characters); the namespace keeps one tool's records from another's"
    )


def chain_problem(
    previous: SourceRow | None, row: SourceRow, *, stored: bool = False
) -> tuple[Literal["hash", "chain", "gap"], str] | None:
    """What is wrong with ``row`` following ``previous`` in one batch (``None``: nothing).

    ``previous`` is ``None`` for the first record of a batch: its link to what the store
    already holds is checked inside the import transaction. ``stored`` says the rows were read
    back from the store (``verify``, exports): a break there is not the producer's to fix, so
    the message says the stored record was altered rather than how to hash a line.
    """
    if row.position < 0:
        return "chain", f"position {row.position} is negative; positions count from 0"
    recomputed = _recomputed(row)
    if recomputed != row.hash:
        if stored:
            return "hash", (
                f"position {row.position}: its stored hash {row.hash!r} does not match its "
                f"stored content (recomputed {recomputed}): the record was altered after it "
                "was imported (the store was tampered with or damaged)"
            )
        return "hash", (
            f"position {row.position}: its hash {row.hash!r} does not match its content "
            f"(recomputed {recomputed}); the record changed after it was hashed, or the hash "
            "was computed another way: hash the canonical JSON of every other field, with the "
            "payload's exact bytes (docs/imports.md, 'The hash')"
        )
    if row.position == 0 and row.prev is not None:
        return "chain", (
            f"position 0 is the first record of the source: its prev must be null, not {row.prev!r}"
        )
    if previous is None:
        return None
    if row.position != previous.position + 1:
        if row.position <= previous.position:
            return "chain", (
                f"position {row.position} follows position {previous.position}: records "
                "must come in ascending positions, each once; sort the file by position"
            )
        missing = position_span(previous.position + 1, row.position - 1)
        return "gap", (
            f"position {row.position} follows position {previous.position}: "
            f"position(s) {missing} are missing; send them in this batch, in order"
        )
    if row.prev != previous.hash and stored:
        return "chain", (
            f"position {row.position}: its stored prev {row.prev!r} is not the hash of "
            f"position {previous.position} ({previous.hash}): the stored chain was altered "
            "after it was imported (the store was tampered with or damaged)"
        )
    if row.prev != previous.hash:
        return "chain", (
            f"position {row.position}: its prev {row.prev!r} is not the hash of position "
            f"{previous.position} ({previous.hash}); the source's chain is broken there: "
            "re-export from the source, or set prev to the previous record's hash and rehash"
        )
    return None


def check_batch(source: str, rows: Sequence[SourceRow], *, prefix: str = "") -> None:
    """Refuse a batch that is not one unbroken piece of ``source``'s chain (``prefix`` starts
    each message, e.g. the file's name)."""
    check = BatchCheck(source, prefix=prefix)
    for row in rows:
        check(row)


class BatchCheck:
    """:func:`check_batch` one record at a time, for a batch too large to hold: each record
    needs only the one before it, so a whole import is checked in constant memory."""

    __slots__ = ("_previous", "prefix", "source")

    def __init__(self, source: str, *, prefix: str = "") -> None:
        self.source = source
        self.prefix = prefix
        self._previous: SourceRow | None = None

    def __call__(self, row: SourceRow) -> None:
        """Refuse ``row`` unless it continues the records checked before it."""
        source, prefix = self.source, self.prefix
        if row.source != source:
            raise SourceFormatError(
                f"{prefix}position {row.position} belongs to source {row.source!r}, not "
                f"{source!r}; import each source's records under its own name",
                source=source,
                position=row.position,
            )
        if row.schema_version not in KNOWN_SCHEMA_VERSIONS:
            raise SourceFormatError(
                prefix + _schema_message(row.schema_version, row.position),
                source=source,
                position=row.position,
                problem="schema",
            )
        found = chain_problem(self._previous, row)
        if found is not None:
            problem, text = found
            raise SourceChainError(
                f"{prefix}source {source!r} {text}",
                source=source,
                position=row.position,
                problem=problem,
            )
        self._previous = row


def _schema_message(version: object, position: int | None) -> str:
    where = f"position {position}: " if position is not None else ""
    known = ", ".join(str(known) for known in sorted(KNOWN_SCHEMA_VERSIONS))
    return (
        f"{where}schema_version {version!r} is not one this envharness reads ({known}); "
        "upgrade envharness to import it, or have the source write schema_version "
        f"{SOURCE_SCHEMA_VERSION} (docs/imports.md)"
    )


def position_span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"
