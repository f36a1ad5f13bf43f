"""A session's score as evidence: the report checked, the ``score`` record, then each
``finding``, citing the outcomes of the turns it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.contracts.environment import FindingSpec, ScoreReport
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import Finding, Score

pytestmark = pytest.mark.anyio

START = Scenario(id="s", input=SyntheticScenarioInput(starting_total=0, target=10**9))


class Judging(SyntheticEnvironment):
    """Scores with two findings: one citing turn 2, one whose severity is not one we know."""

    def score(self, state: Any, scenario: Scenario[Any]) -> ScoreReport:
        return ScoreReport(
            metrics={"total": 1.0},
            findings=(
                FindingSpec(title="turn 2 went well", turns=(2,)),
                FindingSpec(title="odd", severity="dire"),  # type: ignore[arg-type]
            ),
        )


async def test_the_score_is_recorded_then_a_bad_finding_fails_the_session(tmp_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=Judging, agents={"alice": SyntheticAgent}
    )
    async with harness:
        result = await harness.run(START, turns=3)
        records = [record async for record in harness.records(result.id)]
    assert result.status == "failed"
    assert "a finding from the environment's score()" in (result.reason or "")
    outcomes = {r.turn: r.seq for r in records if r.kind == "outcome"}
    payloads = [r.payload for r in records if isinstance(r.payload, Score | Finding)]
    assert [type(p) for p in payloads] == [Score, Finding]  # the score, the good finding
    assert payloads[1].cites == (outcomes[2],)  # type: ignore[union-attr]
