"""The quickstart store: synthetic sessions that show what evidence looks like.

Nothing here measures anything. The agents are a few lines each and behave badly on purpose,
so that a first look at a store meets every common kind of record: a blocked action, a finding,
a score that passed and one that did not, a session that failed with its reason.

The plan is data (:data:`COHORTS`): a later feature (experiments, branches, the viewer) adds a
cohort or a step after :func:`write_quickstart`'s loop rather than a second demo.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envharness.agent import AgentFactory
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticObservation,
    SyntheticScenarioInput,
)
from envharness.harness import AsyncEnvironmentHarness, Session
from envharness.scenario import Scenario
from envharness.store import RecordFilter, read_store

__all__ = ["COHORTS", "SCENARIOS", "Cohort", "QuickstartSummary", "write_quickstart"]


class OverreachingAgent:
    """Asks for 99 every third turn — outside the environment's -10..10, so it is blocked."""

    implementation = "quickstart-overreacher@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        return {"value": 99 if observation.turn % 3 == 0 else 2}


class DownhillAgent:
    """Subtracts three every turn, dragging shared totals below zero (a finding)."""

    implementation = "quickstart-downhill@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        return {"value": -3}


class FlakyAgent:
    """Raises on its third turn, so one session ends ``failed`` with the reason recorded."""

    implementation = "quickstart-flaky@1"

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if observation.turn == 2:
            raise RuntimeError("the flaky quickstart agent gave up (on purpose)")
        return {"value": 1}


def _scenario(scenario_id: str, starting_total: int, target: int | None) -> Scenario[Any]:
    return Scenario(
        id=scenario_id,
        input=SyntheticScenarioInput(starting_total=starting_total, target=target),
        metadata={"synthetic": True},
    )


SCENARIOS: tuple[Scenario[Any], ...] = (
    _scenario("warm-up", 0, 3),
    _scenario("count-down", 6, None),
    _scenario("far-target", 0, 40),
    _scenario("below-zero", -5, None),
    _scenario("overshoot", 9, 2),
)


@dataclass(frozen=True, slots=True)
class Cohort:
    """One roster, run over some scenarios by one harness."""

    name: str
    agents: Mapping[str, AgentFactory]
    scenarios: tuple[Scenario[Any], ...] = SCENARIOS


COHORTS: tuple[Cohort, ...] = (
    Cohort("solo", {"alice": SyntheticAgent}),
    Cohort("pair", {"alice": SyntheticAgent, "bob": OverreachingAgent}),
    Cohort("trio", {"alice": SyntheticAgent, "bob": OverreachingAgent, "carol": DownhillAgent}),
    Cohort("flaky", {"dana": FlakyAgent}, scenarios=SCENARIOS[:1]),
)


@dataclass(frozen=True, slots=True)
class QuickstartSummary:
    """What was written, and which session is worth looking at first."""

    store: Path
    sessions: tuple[Session, ...]
    records: int
    blocked: int
    findings: int
    showcase: str
    """A session with a blocked action and a finding, for the suggested ``show``."""


async def write_quickstart(
    store: Path,
    *,
    turns: int,
    cohorts: tuple[Cohort, ...] = COHORTS,
    progress: Callable[[int, int], None] | None = None,
) -> QuickstartSummary:
    """Run every cohort over its scenarios into ``store`` and count what was recorded.

    ``progress`` is called with (sessions done, sessions planned).
    """
    planned = sum(len(cohort.scenarios) for cohort in cohorts)
    sessions: list[Session] = []
    for cohort in cohorts:
        harness = AsyncEnvironmentHarness(
            store, environment=SyntheticEnvironment, agents=cohort.agents
        )
        for scenario in cohort.scenarios:
            sessions.append(await harness.run(scenario, turns=turns, seed=len(sessions)))
            if progress is not None:
                progress(len(sessions), planned)
    return await _summarise(store, tuple(sessions))


async def _summarise(store: Path, sessions: tuple[Session, ...]) -> QuickstartSummary:
    reader = await read_store(store)
    written = {session.id for session in sessions}
    records = sum(info.records for info in await reader.sessions() if info.id in written)
    blocked = findings = 0
    showcase: tuple[int, str] | None = None
    notable = RecordFilter(kinds=("action.blocked", "finding"))
    for session in sessions:
        kinds = [row.kind async for row in reader.rows(session.id, notable)]
        session_blocked = kinds.count("action.blocked")
        session_findings = kinds.count("finding")
        blocked += session_blocked
        findings += session_findings
        interest = (session_blocked > 0) + (session_findings > 0)
        if showcase is None or interest > showcase[0]:
            showcase = (interest, session.id)
    return QuickstartSummary(
        store=store,
        sessions=sessions,
        records=records,
        blocked=blocked,
        findings=findings,
        showcase=showcase[1] if showcase is not None else "",
    )
