"""Pause and resume, agents' own state across branches and pauses, and after_turn changes."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    CommandAgent,
    ConfigurationError,
    EnvironmentHarness,
    Record,
    Scenario,
)
from envharness.advanced import OperationResult, SessionRunner
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import Checkpoint, Intervention, Log, Outcome, SessionStatus

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=-3, target=100))
ENDLESS = Scenario(id="endless", input=SyntheticScenarioInput(starting_total=0))
ECHO = Path(__file__).resolve().parents[2] / "agents" / "python" / "echo_agent.py"


def harness_for(store: Path, **options: Any) -> AsyncEnvironmentHarness:
    options.setdefault("agents", {"alice": SyntheticAgent})
    return AsyncEnvironmentHarness(store, environment=SyntheticEnvironment, **options)


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Record]:
    return [record async for record in harness.records(session_id)]


def statuses(records: list[Record]) -> list[str | None]:
    return [r.payload.status for r in records if isinstance(r.payload, SessionStatus)]


def totals(records: list[Record]) -> list[float | None]:
    return [r.payload.signals["total"] for r in records if isinstance(r.payload, Outcome)]


# -- pause -------------------------------------------------------------------------------------


async def test_a_paused_session_finishes_its_turn_and_resumes_from_there(store_path: Path) -> None:
    harness = harness_for(store_path)

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed == 2:
            harness.pause(session_id[:12])  # a unique prefix will do

    paused = await harness.run(START, turns=5, progress=progress)
    assert (paused.status, paused.turns_completed) == ("paused", 2)
    assert paused.reason == "paused on request; resume it to go on"
    records = await records_of(harness, paused.id)
    assert statuses(records) == ["running", "paused"]
    assert not [r for r in records if r.kind == "score"]  # not finished: no score yet
    [checkpoint] = [r.payload for r in records if isinstance(r.payload, Checkpoint)]
    assert (checkpoint.label, checkpoint.turn) == ("paused", 2)
    resumed = await harness.resume(paused.id)
    assert (resumed.status, resumed.turns_completed) == ("completed", 5)
    records = await records_of(harness, paused.id)
    assert statuses(records) == ["running", "paused", "running", "completed"]
    straight = await harness.run(START, turns=5)
    assert totals(records) == totals(await records_of(harness, straight.id))
    assert (await harness.verify()).ok


async def test_only_a_session_running_here_can_be_paused(store_path: Path) -> None:
    harness = harness_for(store_path)
    done = await harness.run(START, turns=1)
    with pytest.raises(ConfigurationError, match="is not running in this harness"):
        harness.pause(done.id)
    with pytest.raises(ConfigurationError, match="is not running in this harness"):
        harness.pause("")


async def test_a_paused_experiment_starts_nothing_new_and_resumes_to_the_end(
    store_path: Path,
) -> None:
    harness = harness_for(store_path)
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(3)
    ]
    experiment = harness.experiment("pausable", scenarios, turns=3, max_concurrency=1)

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed == 1:
            experiment.pause()

    result = await experiment.run(progress=progress)
    assert result.status == "paused"
    assert (result.completed, result.stopped) == (0, 3)
    assert [s.result.status for s in result.sessions] == ["paused"]
    assert result.sessions[0].result.turns_completed == 1
    resumed = await experiment.resume()
    assert (resumed.status, resumed.completed, resumed.total) == ("completed", 3, 3)
    assert (await harness.verify()).ok


def test_the_blocking_face_starts_pauses_stops_and_resumes(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    played = threading.Event()

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed >= 1:
            played.set()

    running = harness.start(ENDLESS, turns=1_000_000, progress=progress)
    assert running.id.startswith("ses_")
    assert played.wait(60)
    paused = running.pause()
    assert paused.status == "paused"
    assert 0 < paused.turns_completed < 1_000_000
    more = harness.start(START, turns=3).pause()  # may pause before its first turn, or not
    assert more.status in ("paused", "completed")
    if more.status == "paused":
        assert harness.resume(more).status == "completed"
    stopped = harness.start(ENDLESS, turns=1_000_000).stop()
    assert stopped.status == "stopped"
    with harness:
        quick = harness.start(START, turns=2)
        assert quick.wait().status == "completed"
    experiment = harness.experiment("blocking", [ENDLESS], turns=1_000_000)
    experiment.start()
    result = experiment.pause()
    assert result is not None
    assert result.status == "paused"


# -- agents' own state -------------------------------------------------------------------------


def echo() -> CommandAgent:
    return CommandAgent([sys.executable, str(ECHO)], implementation="echo@1")


def agent_logs(records: list[Record]) -> list[str]:
    return [r.payload.message for r in records if isinstance(r.payload, Log)]


async def test_a_branch_restores_the_agents_checkpointed_state(store_path: Path) -> None:
    harness = harness_for(store_path, agents={"alice": echo()}, checkpoint_every=2)
    session = await harness.run(START, turns=3)
    first, *_ = await harness.checkpoints(session.id)
    child = await harness.branch(first, intervention={"kind": "reset-total", "value": 0})
    await harness.continue_(child.id, turns=1)
    logs = agent_logs(await records_of(harness, child.id))
    assert "restored the agent's state from the checkpoint" in logs
    assert "bye after 3 acts" in logs  # 2 before the checkpoint, 1 in the branch


async def test_a_paused_command_agent_resumes_with_its_own_state(store_path: Path) -> None:
    harness = harness_for(store_path, agents={"alice": echo()})

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed == 2:
            harness.pause(session_id)

    paused = await harness.run(START, turns=4, progress=progress)
    assert paused.status == "paused"
    await harness.resume(paused.id)
    logs = agent_logs(await records_of(harness, paused.id))
    assert "bye after 2 acts" in logs
    assert "bye after 4 acts" in logs


# -- after_turn --------------------------------------------------------------------------------


class Bonus:
    name = "bonus"
    version = "1"
    config: dict[str, Any] = {}  # noqa: RUF012 - read-only by contract

    async def run(self, state: Any, request: Any) -> OperationResult:
        changed = msgspec.structs.replace(state, total=state.total + 100)
        return OperationResult(result=None, state=changed, changed_state=True)


class BonusAfterTurns(SessionRunner):
    async def after_turn(self, turn: int, state: Any) -> Any:
        _, state = await self.operate("bonus", None, state)
        return state


class HalveAfterTurns(SessionRunner):
    """Changes the state without an operation: the runtime records it as an intervention."""

    async def after_turn(self, turn: int, state: Any) -> Any:
        return msgspec.structs.replace(state, total=state.total // 2)


@pytest.mark.parametrize("runner", [BonusAfterTurns, HalveAfterTurns])
async def test_resume_restores_what_after_turn_left(
    store_path: Path, runner: type[SessionRunner]
) -> None:
    harness = harness_for(store_path, runner=runner, operations=[Bonus()])

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed == 2:
            harness.pause(session_id)

    paused = await harness.run(START, turns=4, progress=progress)
    resumed = await harness.resume(paused.id)
    assert resumed.turns_completed == 4
    straight = await harness.run(START, turns=4)
    split_records = await records_of(harness, paused.id)
    straight_records = await records_of(harness, straight.id)
    assert totals(split_records) == totals(straight_records)
    scores = [
        [r.payload for r in records if r.kind == "score"]
        for records in (split_records, straight_records)
    ]
    assert scores[0] == scores[1]
    if runner is HalveAfterTurns:
        changes = [r for r in straight_records if isinstance(r.payload, Intervention)]
        # Turn 2 ends at 0, which halving leaves as it is: nothing changed, nothing recorded.
        assert [r.turn for r in changes] == [1, 3, 4]
        assert changes[0].payload.intervention == {"kind": "after_turn"}
