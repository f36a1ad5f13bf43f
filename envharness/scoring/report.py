"""An experiment's report: its frozen configuration, and its scores per scenario and overall.

Everything comes from the evidence through the store's read API: the configuration from the
experiment's own chain (``experiment.created``), the sessions and their statuses from the
session index, and each session's ``score``, ``finding`` and ``cost`` records (with its
segments' times, for what it spent). Nothing is written, so a
report can be made while the experiment runs; once it has ended, every report of it is the same
(the bootstrap is seeded from the experiment's recorded seed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime

import anyio
import msgspec

from envharness.contracts.budget import SegmentClock
from envharness.errors import StoreError
from envharness.records import (
    Cost,
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    Finding,
    Score,
    SegmentEnded,
    SegmentStarted,
    decode_payload,
)
from envharness.scoring.aggregates import (
    CostTally,
    CostTotals,
    FindingCounts,
    ScoreAggregate,
    SessionCosts,
    Severity,
    aggregate_scores,
    count_findings,
)
from envharness.scoring.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, check_parameters
from envharness.store import SessionCounts, SessionInfo
from envharness.store.locate import AnyStore

__all__ = ["ExperimentReport", "FindingRef", "ScenarioReport", "experiment_report"]

_KINDS = (
    "experiment.created",
    "experiment.status",
    "score",
    "finding",
    "cost",
    "segment.started",
    "segment.ended",
)


class FindingRef(msgspec.Struct, frozen=True, kw_only=True):
    """A finding where it was recorded (``session_id``, ``seq``) and the records it cites."""

    session_id: str
    scenario_id: str
    seq: int
    severity: Severity
    title: str
    detail: str = ""
    cites: tuple[int, ...] = ()


class ScenarioReport(msgspec.Struct, frozen=True, kw_only=True):
    """One scenario over its trials: sessions by status, score aggregates per version, findings.

    ``unscored`` counts sessions without any score report (a session is scored when it
    completes, so failed and stopped ones usually have none).
    """

    id: str
    sessions: SessionCounts
    unscored: int
    scores: tuple[ScoreAggregate, ...]
    finding_counts: FindingCounts
    findings: tuple[FindingRef, ...]


class ExperimentReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an experiment found: per scenario, and pooled over every session (``scores``).

    ``total`` sessions were planned (scenarios x trials); ``sessions`` counts those recorded
    by status and ``not_started`` the rest. ``confidence`` and ``resamples`` are the bootstrap
    parameters the intervals were computed with; the bootstrap's seed derives from
    ``config.seed``, so the same evidence gives the same report. ``costs`` sums what every
    session spent (and how long the experiment ran); ``session_costs`` is each session's own.
    """

    id: str
    name: str
    status: str
    reason: str | None
    created_at: str
    config: ExperimentConfig
    total: int
    sessions: SessionCounts
    not_started: int
    unscored: int
    scores: tuple[ScoreAggregate, ...]
    finding_counts: FindingCounts
    scenarios: tuple[ScenarioReport, ...]
    confidence: float
    resamples: int
    costs: CostTotals = CostTotals()
    session_costs: tuple[SessionCosts, ...] = ()


async def experiment_report(
    store: AnyStore,
    experiment_id: str,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
) -> ExperimentReport:
    """Read the experiment ``experiment_id`` (or a unique prefix) and aggregate its scores.

    Raises :class:`~envharness.errors.NotFoundError` for an unknown id and
    :class:`~envharness.errors.ConfigurationError` for parameters out of range. The bootstrap
    runs in a worker thread: a large experiment's resampling must not stall the event loop.
    """
    check_parameters(confidence, resamples)
    info = await store.experiment(experiment_id)
    sessions = await store.sessions(experiment_id=info.id)
    config, status, reason, evidence, ran = await _read(store, info.id, sessions)

    counts = _counts(session.status for session in sessions)
    session_costs = tuple(
        SessionCosts(
            session_id=session.info.id,
            scenario_id=session.info.scenario_id,
            status=session.info.status,
            costs=session.spent.totals(),
        )
        for session in evidence
    )

    def build() -> ExperimentReport:
        scenarios = _scenarios(config, evidence, confidence, resamples)
        return ExperimentReport(
            id=info.id,
            name=config.name,
            status=status or info.status,
            reason=reason if status is not None else info.reason,
            created_at=info.created_at,
            config=config,
            total=info.total,
            sessions=counts,
            not_started=max(0, info.total - counts.recorded),
            unscored=sum(scenario.unscored for scenario in scenarios),
            scores=aggregate_scores(
                (score for session in evidence for score in session.scores),
                seed=config.seed,
                confidence=confidence,
                resamples=resamples,
            ),
            finding_counts=sum(
                (scenario.finding_counts for scenario in scenarios), start=FindingCounts()
            ),
            scenarios=scenarios,
            confidence=confidence,
            resamples=resamples,
            costs=_total(session_costs, ran),
            session_costs=session_costs,
        )

    return await anyio.to_thread.run_sync(build)


@dataclass(slots=True)
class _Evidence:
    """What one session contributes: its last score report per version, and its findings."""

    info: SessionInfo
    scores: list[Score] = field(default_factory=list)
    findings: list[FindingRef] = field(default_factory=list)
    spent: CostTally = field(default_factory=CostTally)
    clock: SegmentClock = field(default_factory=SegmentClock)


async def _read(
    store: AnyStore, experiment_id: str, sessions: Sequence[SessionInfo]
) -> tuple[ExperimentConfig, str | None, str | None, list[_Evidence], float]:
    """One pass, in commit order, over the experiment's chain and its sessions' scores,
    findings, costs and segments: the frozen configuration, the last recorded status (with its
    reason), what each session contributes, and how long the experiment ran. Sessions that
    appeared after ``sessions`` was listed are left out: the report describes one moment."""
    evidence = {info.id: _Evidence(info) for info in sessions}
    latest: dict[str, dict[str, Score]] = {info.id: {} for info in sessions}
    config: ExperimentConfig | None = None
    status: str | None = None
    reason: str | None = None
    ran = 0.0
    running_since: datetime | None = None
    rows = store.experiment_rows_so_far(experiment_id, kinds=_KINDS)
    async with aclosing(rows):
        async for row in rows:
            payload = decode_payload(row.payload)
            if isinstance(payload, ExperimentCreated) and row.session_id == experiment_id:
                config = payload.config
            elif isinstance(payload, ExperimentStatus) and row.session_id == experiment_id:
                status, reason = payload.status, payload.reason
                at = datetime.fromisoformat(row.at)
                if running_since is not None:
                    ran += max(0.0, (at - running_since).total_seconds())
                running_since = at if status == "running" else None
            elif row.session_id not in evidence:
                continue
            elif isinstance(payload, Cost):
                evidence[row.session_id].spent.add(payload)
            elif isinstance(payload, SegmentStarted | SegmentEnded):
                evidence[row.session_id].clock.saw(row.kind, datetime.fromisoformat(row.at))
            elif isinstance(payload, Score):
                latest[row.session_id][payload.version] = payload  # a later one supersedes
            elif isinstance(payload, Finding):
                session = evidence[row.session_id]
                session.findings.append(_finding(session.info, row.seq, payload))
    if config is None:
        raise StoreError(
            f"experiment {experiment_id} has no experiment.created record; "
            "run `envharness verify` on the store"
        )
    for session_id, scores in latest.items():
        evidence[session_id].scores.extend(scores[version] for version in sorted(scores))
    last_seen: datetime | None = None
    for session in evidence.values():
        # A segment still running (or one that crashed) ran until its session last wrote.
        updated = datetime.fromisoformat(session.info.updated_at)
        session.spent.wall_seconds += session.clock.seconds(until=updated)
        last_seen = updated if last_seen is None else max(last_seen, updated)
    if running_since is not None and last_seen is not None:
        ran += max(0.0, (last_seen - running_since).total_seconds())
    return config, status, reason, list(evidence.values()), ran


def _total(sessions: Iterable[SessionCosts], ran: float) -> CostTotals:
    tally = CostTally(wall_seconds=ran)
    for session in sessions:
        tally.include(session.costs)
    return tally.totals()


def _finding(info: SessionInfo, seq: int, finding: Finding) -> FindingRef:
    return FindingRef(
        session_id=info.id,
        scenario_id=info.scenario_id,
        seq=seq,
        severity=finding.severity,
        title=finding.title,
        detail=finding.detail,
        cites=finding.cites,
    )


def _scenarios(
    config: ExperimentConfig,
    evidence: Sequence[_Evidence],
    confidence: float,
    resamples: int,
) -> tuple[ScenarioReport, ...]:
    """One report per scenario, in the configuration's order (then any other, as found)."""
    grouped: dict[str, list[_Evidence]] = {scenario.id: [] for scenario in config.scenarios}
    for session in evidence:
        grouped.setdefault(session.info.scenario_id, []).append(session)
    return tuple(
        ScenarioReport(
            id=scenario_id,
            sessions=_counts(session.info.status for session in sessions),
            unscored=sum(1 for session in sessions if not session.scores),
            scores=aggregate_scores(
                (score for session in sessions for score in session.scores),
                seed=config.seed,
                scope=scenario_id,
                confidence=confidence,
                resamples=resamples,
            ),
            finding_counts=count_findings(
                found.severity for session in sessions for found in session.findings
            ),
            findings=tuple(f for session in sessions for f in session.findings),
        )
        for scenario_id, sessions in grouped.items()
    )


def _counts(statuses: Iterable[str]) -> SessionCounts:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return msgspec.convert(counts, SessionCounts)
