"""A session's score as evidence: the environment's report asked once its turns are over,
checked, and turned into a ``score`` record and its ``finding`` records.

Apart from the runner because none of it is about running turns: what an environment's
``score()`` may return (a :class:`ScoreReport` or a plain mapping of metrics), and the clear
error for each way it can be wrong, are the same wherever a session is played.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from msgspec import UNSET

from envharness.contracts.environment import Environment, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.records import Finding, Payload, Score
from envharness.runtime.checks import (
    SessionFailure,
    awaited,
    checked,
    checked_score,
    invoke,
    is_pending,
)

__all__ = ["score_payloads", "score_report"]


async def score_report(
    environment: Environment[Any, Any], state: Any, scenario: Scenario[Any]
) -> ScoreReport | None:
    """The environment's report on ``state`` (``None`` when it scores nothing)."""
    if getattr(environment, "score", None) is None:
        return None
    report = invoke(environment, "score", state, scenario)
    if is_pending(report):
        report = await awaited(report, "score")
    if report is None or isinstance(report, ScoreReport):  # asked first: Mapping's is an ABC
        return report
    if not isinstance(report, Mapping):
        raise SessionFailure(
            f"environment score() returned {type(report).__name__}; return a "
            "ScoreReport or a mapping of metric names to numbers"
        )
    return ScoreReport(metrics=dict(report))


def score_payloads(
    report: ScoreReport,
    environment: Environment[Any, Any],
    participants: Mapping[str, object],
    outcome_seqs: Mapping[int, Sequence[int]],
) -> Iterator[Payload]:
    """The ``score`` record, then a ``finding`` for each of the report's findings (citing the
    outcomes of the turns it names), each checked as it is reached: a bad finding fails the
    session after the score is recorded."""
    version = report.version or environment.spec.scoring_version or "1"
    given = report.per_participant
    per_participant: dict[str, dict[str, float | None]] = {}
    if given or type(given) is not dict:  # most scores have none: no sets to compare
        per_participant = {participant: dict(metrics) for participant, metrics in given.items()}
        unknown = sorted(set(per_participant) - set(participants))
        if unknown:
            raise SessionFailure(
                f"environment score() scored {', '.join(map(repr, unknown))}, who is not a "
                f"participant (participants: {', '.join(participants)}); "
                "per_participant keys must be participant names"
            )
    yield checked_score(
        Score(
            version=version,
            metrics=dict(report.metrics),
            passed=report.passed,
            uncertainty=dict(report.uncertainty),
            per_participant=per_participant or UNSET,
        )
    )
    for finding in report.findings:
        cites = tuple(seq for turn in finding.turns for seq in outcome_seqs.get(turn, ()))
        found = Finding(
            title=finding.title, detail=finding.detail, severity=finding.severity, cites=cites
        )
        yield checked(found, "a finding from the environment's score()")
