"""The turn loop's short cuts keep their behaviour: a turn awaits only what a session uses.

A runner that keeps the default ``before_turn``/``after_turn`` is not asked for them, an agent
that runs inline answers without a coroutine, and only agents that take feedback have it kept
for them; each of these is checked here against what the slower path did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envharness import AsyncEnvironmentHarness, BudgetExhausted, Record, Scenario
from envharness.advanced import SessionRunner
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import Observation, OperationReceipt
from tests.runtime.test_lifecycle import Bonus  # the operation both sides of a turn use

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Record]:
    return [record async for record in harness.records(session_id)]


class BonusBeforeTurns(SessionRunner):
    """Overrides ``before_turn`` only: the turn is played on the state it returns."""

    async def before_turn(self, turn: int, state: Any) -> Any:
        _, state = await self.operate("bonus", None, state)
        return state


async def test_an_overridden_before_turn_is_played_on(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": SyntheticAgent},
        runner=BonusBeforeTurns,
        operations=[Bonus()],
    )
    result = await harness.run(START, turns=2)
    assert result.status == "completed"
    records = await records_of(harness, result.id)
    receipts = [r.turn for r in records if isinstance(r.payload, OperationReceipt)]
    assert receipts == [1, 2]
    seen = [r.payload.observation["total"] for r in records if isinstance(r.payload, Observation)]
    # 0 + 100, then the agent steps toward zero (99), plus 100 again.
    assert seen == [100, 199]


class Raising:
    implementation = "raising@1"
    runs_inline = True

    def act(self, observation: Any) -> Any:
        raise ValueError("no move")


class Broke:
    implementation = "broke@1"
    runs_inline = True

    def act(self, observation: Any) -> Any:
        raise BudgetExhausted("the card was declined")


async def test_an_inline_agent_that_raises_fails_its_session_naming_it(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Raising}
    )
    result = await harness.run(START, turns=3)
    assert (result.status, result.turns_completed) == ("failed", 0)
    assert result.reason == "agent 'alice' raised ValueError: no move"


async def test_an_inline_agent_out_of_budget_stops_its_session(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Broke}
    )
    result = await harness.run(START, turns=3)
    assert (result.status, result.turns_completed) == ("stopped", 0)
    assert result.reason == "budget: the card was declined (agent 'alice')"


class Listener:
    implementation = "listener@1"
    runs_inline = True

    def __init__(self) -> None:
        self.heard: list[tuple[int, Any, str | None]] = []

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1 if observation.turn < 2 else 11}  # the third answer is blocked

    def feedback(self, turn: int, outcome: Any, blocked: str | None) -> None:
        self.heard.append((turn, outcome, blocked))


async def test_only_the_agents_that_listen_are_told_and_each_only_its_own(
    store_path: Path,
) -> None:
    listener = Listener()
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": lambda: listener, "bob": SyntheticAgent},
    )
    result = await harness.run(START, turns=3)
    assert result.status == "completed"
    assert [(turn, outcome) for turn, outcome, _ in listener.heard[:2]] == [
        (1, {"total": 1, "added": 1}),  # bob steps toward zero from 0: adds 0
        (2, {"total": 1, "added": 1}),  # bob now adds -1
    ]
    turn, outcome, blocked = listener.heard[2]
    assert (turn, outcome) == (3, None)
    assert blocked is not None
    assert "value" in blocked  # why it was blocked: the value out of range
