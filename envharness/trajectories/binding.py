"""The digest check: does the stored evidence still match a trajectory's :class:`JournalRange`?

Why the head digest is enough: each record's digest covers its own bytes and ``prev``, the
digest of the record before it. So the stored digest of the range's last record binds every
record before it. The check reads the range in ``seq`` order and, for each record, recomputes
its digest from the stored bytes and compares it with the stored one, checks ``prev`` against
the digest before, and finally compares the last digest with the bound ``head_digest``. One
changed byte anywhere in the range fails at that record (its recomputed digest differs); a
range rewritten with fresh digests fails at the head. Memory is constant: one page at a time.

Evidence is read through an :class:`EvidenceReader`, which checks as it reads and yields each
record with its export line. :class:`Evidence` picks the reader by provenance: the journal for
native trajectories (:class:`JournalEvidence`), the source's own chain for imported ones (the
reader the imports side provides; :func:`envharness.trajectories.readers.evidence_for`
composes the two).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import NamedTuple, Protocol

from envharness.records import RecordRow, digest_of, encode_record
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore
from envharness.trajectories.errors import EvidenceMismatchError, TrajectoryError
from envharness.trajectories.model import DIGEST_ALGORITHM, JournalRange, Trajectory

__all__ = [
    "ChainReader",
    "Evidence",
    "EvidenceReader",
    "EvidenceRow",
    "JournalEvidence",
    "RangeCheck",
    "StoreChains",
    "check_evidence",
]


class EvidenceRow(NamedTuple):
    """One record of a trajectory's evidence, already checked against its binding.

    ``line`` is its export line without the newline: a JSON object with a ``type`` field
    (``{"type":"record","record":{...}}`` for native records).
    """

    seq: int
    kind: str
    turn: int | None
    participant: str | None
    payload: bytes
    line: bytes


class EvidenceReader(Protocol):
    """Reads a trajectory's evidence in order, checking it as it goes: raises
    :class:`EvidenceMismatchError` at the first record that does not match the binding (and
    after the last, when the range ends short of its head or at another digest)."""

    def rows(self, trajectory: Trajectory) -> AsyncIterator[EvidenceRow]: ...


class ChainReader(Protocol):
    """Reads a chain's stored rows from ``first`` to ``last`` (inclusive), in ``seq`` order."""

    def rows(self, chain: str, first: int, last: int) -> AsyncIterator[RecordRow]: ...


class StoreChains:
    """A :class:`ChainReader` over a store's journal."""

    def __init__(self, store: AnyStore) -> None:
        self.store = store

    def rows(self, chain: str, first: int, last: int) -> AsyncIterator[RecordRow]:
        selection = RecordFilter(after=first - 1, limit=max(0, last - first + 1))
        return self.store.rows(chain, selection)


class RangeCheck:
    """Checks rows of one range as they stream past (so an export can check and write at once).

    ``check(row)`` raises :class:`EvidenceMismatchError` at the first record that does not
    match; ``finish()`` checks that the range ended at its bound head.
    """

    def __init__(self, journal: JournalRange) -> None:
        self.journal = journal
        if journal.algorithm != DIGEST_ALGORITHM:
            raise self._error(
                None, f"binds its range with {journal.algorithm!r}, which this envharness "
                f"does not know (it knows {DIGEST_ALGORITHM!r})"
            )  # fmt: skip
        self._expected = journal.first_seq
        self._prev: str | None = None

    def check(self, row: RecordRow) -> None:
        journal = self.journal
        if row.seq > journal.last_seq:
            return
        if row.seq != self._expected:
            missing = (
                f"seq {self._expected}"
                if row.seq == self._expected + 1
                else f"seq {self._expected}..{row.seq - 1}"
            )
            raise self._error(self._expected, f"record {missing} is missing")
        if not isinstance(row.payload, bytes) or not isinstance(row.digest, str):
            raise self._error(row.seq, f"the {row.kind!r} record's stored columns were altered")
        recomputed = digest_of(
            row.session_id, row.seq, row.kind, row.turn, row.participant, row.at, row.payload,
            row.prev,
        )  # fmt: skip
        if recomputed != row.digest:
            raise self._error(
                row.seq,
                f"the {row.kind!r} record was altered: its content no longer has its digest",
            )
        if self._prev is not None and row.prev != self._prev:
            raise self._error(row.seq, "its prev does not match the digest of the record before")
        self._prev = row.digest
        self._expected = row.seq + 1

    def finish(self) -> None:
        journal = self.journal
        if self._expected <= journal.last_seq:
            raise self._error(
                self._expected,
                f"the chain ends before the bound head: seq {self._expected}..{journal.last_seq}"
                " are missing",
            )
        if self._prev != journal.head_digest:
            raise self._error(
                journal.last_seq,
                f"its digest is {self._prev}, but the trajectory bound {journal.head_digest}: "
                "the records were rewritten",
            )

    def _error(self, seq: int | None, problem: str) -> EvidenceMismatchError:
        where = f"record seq {seq}" if seq is not None else "the range"
        return EvidenceMismatchError(
            f"trajectory {self.journal.chain}: {where}: {problem} "
            "(`envharness verify` checks the whole store)",
            session_id=self.journal.chain,
            seq=seq,
        )


async def check_evidence(reader: EvidenceReader, trajectory: Trajectory) -> int:
    """Raise :class:`EvidenceMismatchError` unless the trajectory's stored evidence matches
    its binding; returns how many records were read."""
    count = 0
    rows = reader.rows(trajectory)
    try:
        async for _ in rows:
            count += 1
    finally:
        aclose = getattr(rows, "aclose", None)
        if aclose is not None:
            await aclose()
    return count


class JournalEvidence:
    """The :class:`EvidenceReader` of native trajectories: their session's chain."""

    def __init__(self, chains: ChainReader) -> None:
        self.chains = chains

    async def rows(self, trajectory: Trajectory) -> AsyncGenerator[EvidenceRow, None]:
        journal = trajectory.journal
        checker = RangeCheck(journal)
        async with aclosing(_generator(self.chains, journal)) as rows:
            async for row in rows:
                checker.check(row)
                if row.seq <= journal.last_seq:
                    yield EvidenceRow(
                        row.seq, row.kind, row.turn, row.participant, row.payload,
                        b'{"type":"record","record":' + encode_record(row) + b"}",
                    )  # fmt: skip
        checker.finish()


class Evidence:
    """Reads any trajectory's evidence: native from the journal, imported through
    ``imported`` (the imports side's reader of source chains)."""

    def __init__(self, native: EvidenceReader, imported: EvidenceReader | None = None) -> None:
        self.native = native
        self.imported = imported

    def rows(self, trajectory: Trajectory) -> AsyncIterator[EvidenceRow]:
        if trajectory.provenance.origin == "native":
            return self.native.rows(trajectory)
        if self.imported is None:
            raise TrajectoryError(
                f"trajectory {trajectory.session_id} was imported from source "
                f"{trajectory.provenance.source!r}, and this envharness has no reader for "
                "imported evidence"
            )
        return self.imported.rows(trajectory)


async def _generator(chains: ChainReader, journal: JournalRange) -> AsyncGenerator[RecordRow, None]:
    rows = chains.rows(journal.chain, journal.first_seq, journal.last_seq)
    try:
        async for row in rows:
            yield row
    finally:
        aclose = getattr(rows, "aclose", None)
        if aclose is not None:
            await aclose()
