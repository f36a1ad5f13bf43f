"""Scoring: aggregates of versioned score reports, with reproducible uncertainty.

:func:`experiment_report` reads one experiment from a store and returns an
:class:`ExperimentReport`: per scenario and pooled over the experiment, for each score version
separately, every metric's n, mean, min, max and a percentile-bootstrap confidence interval
seeded from the experiment's seed; pass rates with a Wilson interval; sessions by status;
findings by severity, each pointing at the records it cites; and, where scores are per
participant, each participant's metrics apart. ``docs/scoring.md`` explains the choices.
"""

from envharness.scoring.aggregates import (
    FindingCounts,
    MetricAggregate,
    ParticipantAggregate,
    PassRate,
    ScoreAggregate,
    aggregate_scores,
    count_findings,
)
from envharness.scoring.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    bootstrap_interval,
    bootstrap_seed,
    wilson_interval,
)
from envharness.scoring.report import (
    ExperimentReport,
    FindingRef,
    ScenarioReport,
    experiment_report,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "ExperimentReport",
    "FindingCounts",
    "FindingRef",
    "MetricAggregate",
    "ParticipantAggregate",
    "PassRate",
    "ScenarioReport",
    "ScoreAggregate",
    "aggregate_scores",
    "bootstrap_interval",
    "bootstrap_seed",
    "count_findings",
    "experiment_report",
    "wilson_interval",
]
