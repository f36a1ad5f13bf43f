"""How well a run went, read back from the store when ``run`` ends: a session's latest score
report per version, or an experiment's report (what ``experiments show`` prints)."""

from __future__ import annotations

from os import PathLike

from envharness.records import Score
from envharness.scoring import ExperimentReport, experiment_report
from envharness.store import RecordFilter
from envharness.store.locate import reading_store

__all__ = ["experiment_results", "session_scores"]


async def session_scores(store: str | PathLike[str], session_id: str) -> list[Score]:
    """The session's latest score report of each version, versions sorted by name (a later
    report of a version supersedes an earlier one, as in an experiment's report)."""
    latest: dict[str, Score] = {}
    async with reading_store(store) as reader:
        async for record in reader.records(session_id, RecordFilter(kinds=("score",))):
            if isinstance(record.payload, Score):
                latest[record.payload.version] = record.payload
    return [latest[version] for version in sorted(latest)]


async def experiment_results(store: str | PathLike[str], experiment_id: str) -> ExperimentReport:
    async with reading_store(store) as reader:
        return await experiment_report(reader, experiment_id)
