"""When a session lets other tasks run: at a turn boundary whenever another task is ready to
run, and otherwise at least every ``YIELD_SECONDS``; a cancellation is heard at the next turn
boundary either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import sniffio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import (
    SyntheticAction,
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
)
from envharness.runtime.loop_passes import loop_passes

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


class TurnTwoAgent(SyntheticAgent):
    """Calls ``at_turn_two`` while choosing its second action: from inside the session."""

    at_turn_two: Callable[[], None]

    def act(self, observation: Any) -> SyntheticAction:
        if observation.turn == 1:  # the state before turn 2
            self.at_turn_two()
        return super().act(observation)


async def test_a_cancellation_from_inside_a_turn_is_heard_at_the_next_boundary(
    tmp_path: Path,
) -> None:
    scope = anyio.CancelScope()
    TurnTwoAgent.at_turn_two = scope.cancel
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": TurnTwoAgent}
    )
    async with harness:
        with scope:
            await harness.run(START, turns=50)
        [info] = await harness.sessions()
    assert scope.cancelled_caught
    assert (info.status, info.turns_completed) == ("stopped", 2)


async def test_a_task_an_agent_wakes_runs_before_the_next_turn(tmp_path: Path) -> None:
    heard = anyio.Event()
    TurnTwoAgent.at_turn_two = heard.set
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": TurnTwoAgent}
    )
    scope = anyio.CancelScope()

    async def stop_after_turn_2() -> None:
        await heard.wait()
        scope.cancel()

    async with harness:
        async with anyio.create_task_group() as group:
            group.start_soon(stop_after_turn_2)
            await anyio.wait_all_tasks_blocked()  # the watcher waits before the session starts
            with scope:
                await harness.run(START, turns=200)
        [info] = await harness.sessions()
    assert info.status == "stopped"
    # trio runs the tasks ready together in a random order: the session may play one more
    # turn before the watcher runs (it did before a session held the loop between yields).
    on_trio = sniffio.current_async_library() == "trio"
    assert info.turns_completed in ((2, 3) if on_trio else (2,))


async def test_a_woken_task_is_ready_and_a_session_passing_the_loop_is_not() -> None:
    passes = loop_passes()
    assert passes is loop_passes()  # one per loop, shared by its sessions
    woken = anyio.Event()
    seen: list[bool] = []

    async def wait() -> None:
        await woken.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        seen.append(passes.others_ready())
        woken.set()
        seen.append(passes.others_ready())
        passes.passing += 1  # as if the woken task were a session passing the loop
        seen.append(passes.others_ready())
        passes.passing -= 1
    on_trio = sniffio.current_async_library() == "trio"
    assert seen == ([True, True, True] if on_trio else [False, True, False])


def test_outside_any_loop_the_answer_is_always_yes() -> None:
    assert loop_passes().others_ready()
