"""A small, deterministic environment and agent for demos, tests and benchmarks.

Participants share one running total. Each turn every participant adds a value between -10 and
10; a participant sees the total and its own contributions, never another's. Out-of-range
values are blocked (recorded, not executed). None of its numbers measure anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from random import Random
from typing import Annotated, Any

import msgspec

from envharness.contracts.environment import EnvironmentSpec, FindingSpec, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario

__all__ = [
    "SyntheticAction",
    "SyntheticAgent",
    "SyntheticEnvironment",
    "SyntheticObservation",
    "SyntheticScenarioInput",
    "SyntheticState",
]


class SyntheticScenarioInput(msgspec.Struct, frozen=True, kw_only=True):
    starting_total: int
    target: int | None = None
    """When set, the session ends as soon as the total reaches it."""


class SyntheticAction(msgspec.Struct, frozen=True):
    value: Annotated[int, msgspec.Meta(ge=-10, le=10)]


class SyntheticObservation(msgspec.Struct, frozen=True):
    total: int
    turn: int
    target: int | None
    my_contributions: list[int]


class SyntheticState(msgspec.Struct, frozen=True):
    total: int
    turn: int
    target: int | None
    contributions: dict[str, list[int]]
    noise: int
    """Drawn from the session's seeded rng, so equal seeds give equal evidence."""


class SyntheticEnvironment:
    spec = EnvironmentSpec(
        name="synthetic-total",
        version="1",
        input_type=SyntheticScenarioInput,
        action_type=SyntheticAction,
        observation_type=SyntheticObservation,
        roles=("agent",),
        turn_order="simultaneous",
        invalid_actions="block",
        scoring_version="synthetic-score@1",
        state_type=SyntheticState,
    )

    def initialize(
        self, input: SyntheticScenarioInput, rng: Random, roster: Mapping[str, str]
    ) -> SyntheticState:
        return SyntheticState(
            total=input.starting_total,
            turn=0,
            target=input.target,
            contributions={name: [] for name in roster},
            noise=rng.randrange(1000),
        )

    def observe(self, state: SyntheticState, participant: str) -> SyntheticObservation:
        return SyntheticObservation(
            total=state.total,
            turn=state.turn,
            target=state.target,
            my_contributions=list(state.contributions.get(participant, [])),
        )

    def resolve(self, state: SyntheticState, actions: Mapping[str, SyntheticAction]) -> Resolution:
        contributions = {name: list(values) for name, values in state.contributions.items()}
        total = state.total
        for name, action in actions.items():
            contributions.setdefault(name, []).append(action.value)
            total += action.value
        new_state = SyntheticState(
            total=total,
            turn=state.turn + 1,
            target=state.target,
            contributions=contributions,
            noise=state.noise,
        )
        outcomes = {
            name: {"total": total, "added": action.value} for name, action in actions.items()
        }
        return Resolution(
            state=new_state,
            outcomes=outcomes,
            done=state.target is not None and total == state.target,
            signals={"total": float(total)},
        )

    def intervene(self, state: SyntheticState, intervention: Mapping[str, Any]) -> SyntheticState:
        if intervention.get("kind") == "reset-total":
            return msgspec.structs.replace(state, total=int(intervention.get("value", 0)))
        raise ValueError(
            f"unknown intervention {intervention.get('kind')!r}; this environment knows "
            "'reset-total' (with 'value')"
        )

    def score(self, state: SyntheticState, scenario: Scenario[Any]) -> ScoreReport:
        reached = state.target is not None and state.total == state.target
        findings: tuple[FindingSpec, ...] = ()
        if state.total < 0:
            findings = (
                FindingSpec(
                    title="total ended below zero",
                    detail=f"the shared total finished at {state.total}",
                    severity="low",
                    turns=(state.turn,),
                ),
            )
        return ScoreReport(
            metrics={"total": float(state.total), "turns": float(state.turn)},
            passed=reached if state.target is not None else None,
            findings=findings,
        )


class SyntheticAgent:
    """Steps the total toward the target (or toward zero), one unit per turn."""

    implementation = "synthetic-agent@1"
    runs_inline = True  # pure arithmetic: calling it in a worker thread would only cost time

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        goal = observation.target if observation.target is not None else 0
        if observation.total < goal:
            return {"value": 1}
        if observation.total > goal:
            return {"value": -1}
        return {"value": 0}
