"""The evidence reader of imported trajectories: their source's chain, checked as it is read.

:class:`SourceEvidence` is the ``imported`` reader of
:class:`~envharness.trajectories.binding.Evidence`: snapshots, exports and datasets read an
imported trajectory's records through it, exactly as they read a native one's through the
journal. It reads the source's chain over the trajectory's range (first to last position),
recomputes every record's hash, checks each ``prev`` against the hash before, and finally the
last hash against the trajectory's ``head_digest`` — one changed byte fails at its record. It
yields the records of the trajectory's own episode (others' records in the range are checked,
not yielded), each with its export line ``{"type":"source_record","record":{…import line…}}``;
the inner object is an import line, so an exported trajectory can be imported again.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from envharness.store.sources import SourceRow, SourcesAt, SourceStore, chain_problem
from envharness.trajectories.binding import EvidenceRow
from envharness.trajectories.errors import EvidenceMismatchError
from envharness.trajectories.model import Trajectory
from envharness.trajectories.sources.format import encode_source_row
from envharness.trajectories.sources.projection import (
    SOURCE_DIGEST_ALGORITHM,
    split_trajectory_id,
)

__all__ = ["SourceEvidence", "verify_imported"]


class SourceEvidence:
    """Reads imported trajectories' records from ``store`` (its backend, or a SQLite store's
    directory; an :class:`~envharness.trajectories.binding.EvidenceReader`)."""

    def __init__(self, store: SourcesAt) -> None:
        self.sources = SourceStore(store)

    async def rows(self, trajectory: Trajectory) -> AsyncGenerator[EvidenceRow, None]:
        journal = trajectory.journal
        name = trajectory.session_id
        ids = split_trajectory_id(name)
        if journal.algorithm != SOURCE_DIGEST_ALGORITHM or ids is None:
            raise EvidenceMismatchError(
                f"imported trajectory {name}: binds its range with {journal.algorithm!r}, "
                f"not {SOURCE_DIGEST_ALGORITHM!r} over a source's chain; it was not projected "
                "from an imported source",
                session_id=name,
                seq=None,
            )
        episode = ids[1]
        previous: SourceRow | None = None
        stored = self.sources.rows(
            journal.chain, after=journal.first_seq - 1, upto=journal.last_seq
        )
        async with aclosing(stored) as rows:
            async for row in rows:
                _check(name, journal.chain, journal.first_seq, previous, row)
                previous = row
                if row.episode == episode:
                    yield EvidenceRow(
                        row.position, row.kind, row.turn, row.participant, row.payload,
                        b'{"type":"source_record","record":' + encode_source_row(row) + b"}",
                    )  # fmt: skip
        if previous is None or previous.position != journal.last_seq:
            last = previous.position if previous is not None else journal.first_seq - 1
            raise EvidenceMismatchError(
                f"imported trajectory {name}: source {journal.chain!r} ends at position {last}, "
                f"before the bound head {journal.last_seq}: the records were removed "
                "(`envharness verify` checks the whole store)",
                session_id=name,
                seq=last + 1,
            )
        if previous.hash != journal.head_digest:
            raise EvidenceMismatchError(
                f"imported trajectory {name}: the source's hash at position {journal.last_seq} "
                f"is {previous.hash}, but the trajectory bound {journal.head_digest}: the "
                "records were rewritten",
                session_id=name,
                seq=journal.last_seq,
            )


async def verify_imported(store: SourcesAt, trajectory: Trajectory) -> int:
    """Raise :class:`EvidenceMismatchError` (naming the first record found wrong) unless the
    stored chain of an imported trajectory's source still matches its binding; returns how
    many of the trajectory's own records were read."""
    count = 0
    async with aclosing(SourceEvidence(store).rows(trajectory)) as rows:
        async for _ in rows:
            count += 1
    return count


def _check(name: str, source: str, first: int, previous: SourceRow | None, row: SourceRow) -> None:
    expected = first if previous is None else previous.position + 1
    if row.position != expected:
        raise EvidenceMismatchError(
            f"imported trajectory {name}: position {expected} of source {source!r} is "
            "missing (`envharness verify` checks the whole store)",
            session_id=name,
            seq=expected,
        )
    # The first record's prev lies outside the range: its own hash covers it.
    found = chain_problem(previous, row, stored=True) if previous is not None else _hash_only(row)
    if found is not None:
        raise EvidenceMismatchError(
            f"imported trajectory {name}: source {source!r} {found[1]}",
            session_id=name,
            seq=row.position,
        )


def _hash_only(row: SourceRow) -> tuple[str, str] | None:
    found = chain_problem(None, row, stored=True)
    return found if found is not None and found[0] == "hash" else None
