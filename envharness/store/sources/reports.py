"""What an import sends and answers, and what health and episode listings report."""

from __future__ import annotations

import msgspec

__all__ = [
    "EpisodeInfo",
    "ImportBatch",
    "ImportReceipt",
    "SourceGap",
    "SourceHealth",
    "health_problems",
]

_REASON_SHOWN = 200


class ImportBatch(msgspec.Struct, frozen=True, kw_only=True):
    """Who sends a batch and how: kept with each import, never hashed (it is ours, not the
    source's)."""

    source: str
    format: str
    """The source's own format: ``envharness`` (import lines) or an importer's (``otel-genai``)."""
    importer: str
    """Name and version of the code that turned the input into source records."""
    origin: str = ""
    """Where the input came from (a file name), for people reading the import log."""
    training: bool = False
    """The sender declares these records may be used to train models."""


class ImportReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """What an import did. ``stored`` new records; ``duplicates`` already held, identical."""

    import_id: str
    source: str
    format: str
    stored: int
    duplicates: int
    first_position: int
    last_position: int
    head_position: int
    head_hash: str


class SourceGap(msgspec.Struct, frozen=True):
    """Positions ``first .. last`` (inclusive) the source has not delivered."""

    first: int
    last: int


class SourceHealth(msgspec.Struct, frozen=True, kw_only=True):
    """Where one source stands.

    ``head_position`` / ``head_hash``: the last acknowledged (stored) record; -1 / ``None``
    before the first. ``offered_position``: the highest position any import offered, stored or
    not; ``backlog`` the positions offered beyond the head. ``gaps``: positions a refused import
    skipped. ``capture_failures``: records in which the source says it lost something.
    ``refused``: imports refused since the last one that stored something.
    """

    source: str
    head_position: int
    head_hash: str | None
    records: int
    episodes: int
    formats: tuple[str, ...]
    offered_position: int
    backlog: int
    gaps: tuple[SourceGap, ...]
    capture_failures: int
    last_capture_failure: str | None
    imports: int
    refused: int
    last_refusal: str | None
    updated_at: str


def health_problems(health: SourceHealth) -> list[str]:
    """Why ``health`` is not healthy, in words with the fix; empty when it is.

    Unhealthy is what an import can mend: positions skipped (gaps), positions offered and not
    stored (backlog), the last imports refused. A capture failure is not: it is the source's
    own account of what it lost, kept as evidence, and no import can undo it. A source that
    holds no record (a store from before refused imports into new sources wrote nothing) has
    nothing acknowledged to be unhealthy about.
    """
    if health.head_position < 0:
        return []
    problems: list[str] = []
    for gap in health.gaps:
        span = str(gap.first) if gap.first == gap.last else f"{gap.first}..{gap.last}"
        problems.append(
            f"position(s) {span} were never imported (a refused import skipped them); import "
            "them, then the refused records again"
        )
    if health.backlog and not health.gaps:
        problems.append(
            f"{health.backlog} offered position(s) after the head {health.head_position} are "
            "not stored: re-send them from the source"
        )
    if health.refused and not health.backlog:
        reason = (health.last_refusal or "")[:_REASON_SHOWN]
        problems.append(f"its last {health.refused} import(s) were refused: {reason}")
    return problems


class EpisodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One episode (run, trace, sample) of a source: where its records lie in the chain.

    ``training`` is true when every import that brought one of its records declared it.
    """

    source: str
    episode: str
    first_position: int
    last_position: int
    records: int
    head_hash: str
    formats: tuple[str, ...]
    importers: tuple[str, ...]
    training: bool
