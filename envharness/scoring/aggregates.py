"""Aggregates of versioned score reports: per metric n, mean, min, max and an interval.

Score reports are pooled only within one ``version``. A version names the scoring rules; a
metric called ``accuracy`` under ``grader@1`` and under ``grader@2`` measures different things,
and a mean over both would describe neither. So every aggregate is keyed by version, and an
experiment scored under two versions reports two aggregates side by side.

Within a version a session contributes one report: its last, since records are never rewritten
and a later report (a re-score) supersedes an earlier one of the same version.

A metric recorded as ``null`` (that is how a NaN or an infinity is recorded: JSON has neither)
or absent from a report is skipped, and counted in ``missing``: the mean is over the ``n``
finite values only, and ``missing`` says how many reports had nothing to give.

Where reports score participants apart (``Score.per_participant``: a zero-sum game's winner and
loser), each participant's metrics are aggregated the same way, over the reports that scored
participants apart (a report that scored other participants but not this one counts as
missing). A mean over both players of a zero-sum game is zero whoever plays well, so these are
never pooled across participants. There is no per-participant pass rate: a score's verdict is
the session's.

Costs are summed, not estimated: :class:`CostTotals` adds up the ``cost`` records agents
reported (an amount an agent did not report counts as nothing, and ``priced`` says how many
calls had a price) and how long the sessions ran.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec
from msgspec import UnsetType

from envharness.records import Cost, Score
from envharness.scoring.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    bootstrap_interval,
    bootstrap_seed,
    check_parameters,
    mean,
    wilson_interval,
)

__all__ = [
    "CostTally",
    "CostTotals",
    "FindingCounts",
    "MetricAggregate",
    "ParticipantAggregate",
    "PassRate",
    "ScoreAggregate",
    "SessionCosts",
    "Severity",
    "aggregate_scores",
    "count_findings",
]


Severity = Literal["info", "low", "medium", "high"]


class MetricAggregate(msgspec.Struct, frozen=True, kw_only=True):
    """One metric over the reports of one score version.

    ``n`` finite values went into ``mean``, ``min`` and ``max``; ``missing`` reports had it
    absent or ``null``. ``ci_low`` and ``ci_high`` bound the mean (percentile bootstrap); they
    are ``None`` when ``n < 2``, where there is no spread to resample.
    """

    name: str
    n: int
    missing: int
    mean: float | None
    min: float | None
    max: float | None
    ci_low: float | None
    ci_high: float | None


class PassRate(msgspec.Struct, frozen=True, kw_only=True):
    """How many reports passed, of those that said (``passed`` not ``None``), with a Wilson
    interval around the rate."""

    passed: int
    judged: int
    rate: float
    ci_low: float
    ci_high: float


class ParticipantAggregate(msgspec.Struct, frozen=True, kw_only=True):
    """One participant's own metrics, over the ``reports`` that scored participants apart."""

    participant: str
    reports: int
    metrics: tuple[MetricAggregate, ...]


class ScoreAggregate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Every metric of one score version, over ``reports`` score reports (one per session).

    ``participants``: each participant's own metrics, by name, where reports score them apart;
    left out of the JSON when none do, so a report of shared scores reads as it always has.
    """

    version: str
    reports: int
    metrics: tuple[MetricAggregate, ...]
    pass_rate: PassRate | None
    participants: tuple[ParticipantAggregate, ...] = ()


class CostTotals(msgspec.Struct, frozen=True, kw_only=True):
    """What was spent: the ``cost`` records summed, and the wall time it took.

    ``calls`` counts the costs reported and ``priced`` those with a price: money is summed over
    those only, so ``priced < calls`` means the true amount is higher. ``seconds`` sums what
    the calls themselves took (calls side by side overlap); ``wall_seconds`` is how long the
    sessions ran (for an experiment: how long it ran, its sessions side by side).
    """

    calls: int = 0
    priced: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class SessionCosts(msgspec.Struct, frozen=True, kw_only=True):
    """One session's :class:`CostTotals`, with what places it."""

    session_id: str
    scenario_id: str
    status: str
    costs: CostTotals


@dataclass(slots=True)
class CostTally:
    """A running sum of ``cost`` records (and of wall time), frozen by :meth:`totals`."""

    calls: int = 0
    priced: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0
    wall_seconds: float = 0.0

    def add(self, cost: Cost) -> None:
        self.calls += 1
        self.input_tokens += cost.input_tokens or 0
        self.output_tokens += cost.output_tokens or 0
        self.seconds += cost.seconds or 0.0
        if cost.usd is not None:
            self.priced += 1
            self.usd += cost.usd

    def include(self, totals: CostTotals) -> None:
        """Add another's costs (not its wall time: sessions side by side overlap)."""
        self.calls += totals.calls
        self.priced += totals.priced
        self.input_tokens += totals.input_tokens
        self.output_tokens += totals.output_tokens
        self.usd += totals.usd
        self.seconds += totals.seconds

    def totals(self) -> CostTotals:
        return CostTotals(
            calls=self.calls,
            priced=self.priced,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            usd=self.usd,
            seconds=self.seconds,
            wall_seconds=self.wall_seconds,
        )


class FindingCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Findings by severity."""

    high: int = 0
    medium: int = 0
    low: int = 0
    info: int = 0

    @property
    def total(self) -> int:
        return self.high + self.medium + self.low + self.info

    def __add__(self, other: FindingCounts) -> FindingCounts:
        return FindingCounts(
            high=self.high + other.high,
            medium=self.medium + other.medium,
            low=self.low + other.low,
            info=self.info + other.info,
        )


def count_findings(severities: Iterable[Severity]) -> FindingCounts:
    """Count findings given their severities."""
    counts = dict.fromkeys(FindingCounts.__struct_fields__, 0)
    for severity in severities:
        counts[severity] += 1
    return FindingCounts(**counts)


def aggregate_scores(
    reports: Iterable[Score],
    *,
    seed: int,
    scope: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
) -> tuple[ScoreAggregate, ...]:
    """Aggregate ``reports`` (one per session) separately for each score version.

    ``seed`` is the experiment's seed and ``scope`` what the reports are about (a scenario id,
    or ``None`` for the whole experiment): with the version and metric name they seed each
    bootstrap (see :func:`~envharness.scoring.bootstrap.bootstrap_seed`), so the same evidence
    always gives the same intervals. Versions come out sorted, metrics by name.
    """
    check_parameters(confidence, resamples)
    by_version: dict[str, list[Score]] = {}
    for report in reports:
        by_version.setdefault(report.version, []).append(report)
    return tuple(
        _one_version(version, by_version[version], seed, scope, confidence, resamples)
        for version in sorted(by_version)
    )


def _one_version(
    version: str,
    reports: Sequence[Score],
    seed: int,
    scope: str | None,
    confidence: float,
    resamples: int,
) -> ScoreAggregate:
    names = sorted({name for report in reports for name in report.metrics})
    metrics = tuple(
        _metric(
            name,
            [report.metrics for report in reports],
            bootstrap_seed(seed, version, scope, name),
            confidence,
            resamples,
        )
        for name in names
    )
    judged = [report.passed for report in reports if report.passed is not None]
    pass_rate = None
    if judged:
        passed = sum(judged)
        low, high = wilson_interval(passed, len(judged), confidence=confidence) or (0.0, 1.0)
        pass_rate = PassRate(
            passed=passed, judged=len(judged), rate=passed / len(judged), ci_low=low, ci_high=high
        )
    return ScoreAggregate(
        version=version,
        reports=len(reports),
        metrics=metrics,
        pass_rate=pass_rate,
        participants=_participants(version, reports, seed, scope, confidence, resamples),
    )


def _participants(
    version: str,
    reports: Sequence[Score],
    seed: int,
    scope: str | None,
    confidence: float,
    resamples: int,
) -> tuple[ParticipantAggregate, ...]:
    """Each participant's own metrics; the seed adds the participant to the shared metric's
    parts, so a participant's interval never repeats the stream of a shared one."""
    scored = [
        report.per_participant
        for report in reports
        if not isinstance(report.per_participant, UnsetType)
    ]
    found: list[ParticipantAggregate] = []
    for participant in sorted({name for each in scored for name in each}):
        own = [each.get(participant, {}) for each in scored]
        names = sorted({name for metrics in own for name in metrics})
        found.append(
            ParticipantAggregate(
                participant=participant,
                reports=len(own),
                metrics=tuple(
                    _metric(
                        name,
                        own,
                        bootstrap_seed(seed, version, scope, name, participant),
                        confidence,
                        resamples,
                    )
                    for name in names
                ),
            )
        )
    return tuple(found)


def _metric(
    name: str,
    reports: Sequence[Mapping[str, float | None]],
    seed: int,
    confidence: float,
    resamples: int,
) -> MetricAggregate:
    finite = [value for report in reports if (value := _finite(report.get(name))) is not None]
    interval = bootstrap_interval(finite, seed=seed, confidence=confidence, resamples=resamples)
    return MetricAggregate(
        name=name,
        n=len(finite),
        missing=len(reports) - len(finite),
        mean=mean(finite) if finite else None,
        min=min(finite) if finite else None,
        max=max(finite) if finite else None,
        ci_low=interval[0] if interval else None,
        ci_high=interval[1] if interval else None,
    )


def _finite(value: float | None) -> float | None:
    """The value when it is a finite number; ``None`` for null, NaN and the infinities."""
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)
