"""What the first review broke: every way out of a session leaves a whole chain and a status."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import (
    AgentReply,
    AsyncEnvironmentHarness,
    EnvironmentSpec,
    Resolution,
    Scenario,
    ScoreReport,
)
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import ActionAttempted, Observation

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


class Increment:
    implementation = "increment@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1}


def harness(store: Path, environment: Any = SyntheticEnvironment, **agents: Any) -> Any:
    return AsyncEnvironmentHarness(
        store, environment=environment, agents=agents or {"alice": Increment}
    )


async def test_cancelling_while_a_turn_is_being_committed_leaves_no_gap(store_path: Path) -> None:
    class Slow(SyntheticEnvironment):
        def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
            time.sleep(0.05)  # blocks the loop: the cancel lands at the next checkpoint, the flush
            return super().resolve(state, actions)

    h = harness(store_path, Slow)
    for delay in (0.01, 0.06, 0.11, 0.16):
        with anyio.move_on_after(delay):
            await h.run(START, turns=5)
    report = await h.verify()
    assert report.ok, report.breaks
    assert {info.status for info in await h.sessions()} <= {"stopped", "completed"}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_system_exit_inside_an_agent_still_ends_the_session(
    store_path: Path, kind: str
) -> None:
    class Exiting:
        implementation = "exiting@1"

        def act(self, observation: Any) -> dict[str, int]:
            raise SystemExit(3)

    class AsyncExiting:
        implementation = "exiting@1"

        async def act(self, observation: Any) -> dict[str, int]:
            raise SystemExit(3)

    h = harness(store_path, alice=Exiting if kind == "sync" else AsyncExiting)
    with pytest.raises(SystemExit):
        await h.run(START, turns=2)
    [info] = await h.sessions()
    assert info.status == "failed"
    assert info.reason == "SystemExit raised inside the session: 3"
    assert (await h.verify()).ok


async def test_an_agent_cannot_change_the_state_through_its_observation(store_path: Path) -> None:
    class Cards:
        spec = EnvironmentSpec(name="cards", version="1", input_type=SyntheticScenarioInput)

        def initialize(self, input: Any, rng: Any, roster: Any) -> dict[str, Any]:
            return {"hand": ["ace"]}

        def observe(self, state: dict[str, Any], participant: str) -> Any:
            return state["hand"]  # the live list: the runtime must not hand it out

        def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
            return Resolution(state=state)

        def intervene(self, state: Any, intervention: Any) -> Any:
            return state

    class Cheater:
        implementation = "cheater@1"

        def act(self, observation: list[str]) -> dict[str, int]:
            observation.append("joker")
            return {"value": 0}

    h = harness(store_path, Cards, alice=Cheater)
    session = await h.run(START, turns=2)
    assert session.status == "completed"
    shown = [
        r.payload.observation
        async for r in h.records(session.id)
        if isinstance(r.payload, Observation)
    ]
    assert shown == [["ace"], ["ace"]]


@pytest.mark.parametrize(
    ("resolution", "message"),
    [
        ({"signals": {"x": "high"}}, "signals is not valid: signal 'x' is str 'high'"),
        ({"done": "no"}, "done must be True or False, not 'no'"),
        ({"outcomes": [1]}, "outcomes must be a mapping, not list"),
        ({"signals": None}, "signals must be a mapping, not NoneType"),
        ({"artifacts": {"a": "text"}}, "artifacts['a'] must be bytes, not str"),
    ],
)
async def test_a_malformed_resolution_fails_the_session_naming_the_field(
    store_path: Path, resolution: dict[str, Any], message: str
) -> None:
    class Sloppy(SyntheticEnvironment):
        def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
            return Resolution(state=state, **resolution)

    h = harness(store_path, Sloppy)
    session = await h.run(START, turns=2)
    assert session.status == "failed"
    assert message in (session.reason or "")
    assert (await h.verify()).ok
    assert [r async for r in h.records(session.id)]  # every record still reads back


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ("great", "score() returned str; return a ScoreReport"),
        ({"accuracy": "high"}, "score() report is not valid: Expected `float | null`"),
        (ScoreReport(metrics={"a": 1.0}, passed="yes"), "Expected `bool | null`"),  # type: ignore[arg-type]
    ],
)
async def test_a_malformed_score_fails_the_session_naming_the_field(
    store_path: Path, report: Any, message: str
) -> None:
    class Judging(SyntheticEnvironment):
        def score(self, state: Any, scenario: Any) -> Any:
            return report

    h = harness(store_path, Judging)
    session = await h.run(START, turns=1)
    assert session.status == "failed"
    assert message in (session.reason or "")
    assert (await h.verify()).ok


async def test_odd_actions_are_recorded_not_lost(store_path: Path) -> None:
    class Odd:
        implementation = "odd@1"

        def act(self, observation: Any) -> Any:
            return {1: 2}

    session = await harness(store_path, alice=Odd).run(START, turns=1)
    assert session.status == "completed"  # the synthetic environment blocks what it cannot use
    h = harness(store_path, alice=Odd)
    [attempt] = [
        r.payload async for r in h.records(session.id) if isinstance(r.payload, ActionAttempted)
    ]
    assert attempt.action == {"1": 2}


async def test_a_cost_that_is_not_a_cost_is_named(store_path: Path) -> None:
    class Priced:
        implementation = "priced@1"

        def act(self, observation: Any) -> AgentReply:
            return AgentReply({"value": 1}, cost={"usd": 1})  # type: ignore[arg-type]

    session = await harness(store_path, alice=Priced).run(START, turns=1)
    assert session.status == "failed"
    assert "reported a cost of type dict; use envharness.Cost(" in (session.reason or "")


async def test_an_agents_own_timeout_error_is_its_failure_not_ours(store_path: Path) -> None:
    class Upstream:
        implementation = "upstream@1"

        async def act(self, observation: Any) -> dict[str, int]:
            raise TimeoutError("the model endpoint timed out")

    session = await harness(store_path, alice=Upstream).run(START, turns=1)
    assert session.reason == "agent 'alice' raised TimeoutError: the model endpoint timed out"
