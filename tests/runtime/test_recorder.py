"""When a session lets other tasks run: every turn when someone hears of its turns, otherwise
at least every ``YIELD_SECONDS``; a cancellation is heard at the next turn boundary either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import (
    SyntheticAction,
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
)

pytestmark = pytest.mark.anyio

START = Scenario(id="s", input=SyntheticScenarioInput(starting_total=0, target=10**9))


async def test_a_long_fast_session_nobody_watches_still_lets_other_tasks_run(
    tmp_path: Path,
) -> None:
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    passes = 0
    done = False

    async def count_passes() -> None:
        nonlocal passes
        while not done:
            passes += 1
            await anyio.lowlevel.checkpoint()

    async with harness, anyio.create_task_group() as group:
        group.start_soon(count_passes)
        await anyio.lowlevel.checkpoint()
        started = passes
        result = await harness.run(START, turns=3000)  # tens of milliseconds of turns
        during = passes - started
        done = True
    assert result.status == "completed"
    assert during >= 3  # the other task ran while the turns were played, not only after


class CancellingAgent(SyntheticAgent):
    """Cancels the caller's scope while choosing its second action: from inside the session."""

    scope: anyio.CancelScope

    def act(self, observation: Any) -> SyntheticAction:
        if observation.turn == 1:  # the state before turn 2
            self.scope.cancel()
        return super().act(observation)


async def test_a_cancellation_from_inside_a_turn_is_heard_at_the_next_boundary(
    tmp_path: Path,
) -> None:
    scope = anyio.CancelScope()
    CancellingAgent.scope = scope
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": CancellingAgent}
    )
    async with harness:
        with scope:
            await harness.run(START, turns=50)
        [info] = await harness.sessions()
    assert scope.cancelled_caught
    assert (info.status, info.turns_completed) == ("stopped", 2)
