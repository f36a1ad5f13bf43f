"""The agent lifecycle seam: lifespans, feedback after commit, logs and protocol violations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.contracts.agent import AgentContext
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.protocol import ProtocolViolationError
from envharness.records import Log, ProtocolViolation, SessionStatus

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


class Lifecycle:
    """Remembers everything the runtime told it, in order."""

    implementation = "lifecycle@1"
    events: list[Any]

    def __init__(self) -> None:
        self.events = []
        self.context: AgentContext | None = None

    @asynccontextmanager
    async def lifespan(self, context: AgentContext) -> AsyncIterator[None]:
        self.context = context
        self.events.append("start")
        context.log("warming up", "info", "stderr")
        try:
            yield
        finally:
            self.events.append("stop")

    async def act(self, observation: Any) -> dict[str, int]:
        self.events.append(("act", observation.turn))
        return {"value": 99 if observation.turn == 0 else 1}

    def feedback(self, turn: int, outcome: Any, blocked: str | None) -> None:
        self.events.append(("feedback", turn, outcome, blocked is not None))


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Any]:
    return [record async for record in harness.records(session_id)]


async def test_lifespan_wraps_the_turns_and_feedback_follows_each_turn(store_path: Path) -> None:
    agent = Lifecycle()
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": lambda: agent}
    )
    session = await harness.run(START, turns=3, seed=7)
    assert session.status == "completed"
    assert agent.events == [
        "start",
        ("act", 0),
        ("feedback", 1, None, True),  # {"value": 99} was blocked
        ("act", 1),
        ("feedback", 2, {"added": 1, "total": 1}, False),
        ("act", 2),
        ("feedback", 3, {"added": 1, "total": 2}, False),
        "stop",
    ]
    assert agent.context is not None
    assert (agent.context.session_id, agent.context.participant, agent.context.seed) == (
        session.id,
        "alice",
        7,
    )
    assert agent.context.environment.name == "synthetic-total"
    [log] = [r for r in await records_of(harness, session.id) if isinstance(r.payload, Log)]
    assert (log.participant, log.turn, log.payload.message, log.payload.stream) == (
        "alice",
        None,  # logged while starting, outside any turn
        "warming up",
        "stderr",
    )


async def test_an_agent_that_cannot_start_fails_the_session_before_any_turn(
    store_path: Path,
) -> None:
    class Unstartable(Lifecycle):
        @asynccontextmanager
        async def lifespan(self, context: AgentContext) -> AsyncIterator[None]:
            raise OSError("exec format error")
            yield

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Unstartable}
    )
    session = await harness.run(START, turns=3)
    assert session.status == "failed"
    assert session.reason == "agent 'alice' failed while starting: OSError: exec format error"
    assert session.turns_completed == 0


async def test_a_protocol_violation_is_recorded_with_its_bytes(store_path: Path) -> None:
    stopped = []

    class Garbled(Lifecycle):
        async def act(self, observation: Any) -> dict[str, int]:
            raise ProtocolViolationError("invalid_json", "line 1 is not JSON", b"{not json\n")

        @asynccontextmanager
        async def lifespan(self, context: AgentContext) -> AsyncIterator[None]:
            try:
                yield
            finally:
                stopped.append(True)

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Garbled}
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    assert session.reason == "agent 'alice' broke the protocol while acting: line 1 is not JSON"
    assert stopped == [True]
    records = await records_of(harness, session.id)
    [violation] = [r for r in records if isinstance(r.payload, ProtocolViolation)]
    assert violation.participant == "alice"
    assert violation.payload.problem == "invalid_json: line 1 is not JSON"
    assert violation.payload.excerpt == "{not json\n"
    sha = violation.payload.artifact
    assert sha is not None
    assert (store_path / "artifacts" / sha[:2] / sha).read_bytes() == b"{not json\n"
    status = next(r.payload for r in records if isinstance(r.payload, SessionStatus) and r.seq > 2)
    assert status.error is not None
    assert status.error.type == "ProtocolViolationError"
    assert (await harness.verify()).ok


async def test_feedback_that_fails_fails_the_session(store_path: Path) -> None:
    class Deaf(Lifecycle):
        def feedback(self, turn: int, outcome: Any, blocked: str | None) -> None:
            raise BrokenPipeError("agent went away")

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Deaf}
    )
    session = await harness.run(START, turns=2)
    assert session.status == "failed"
    assert session.reason == (
        "agent 'alice' failed while taking feedback: BrokenPipeError: agent went away"
    )
    assert session.turns_completed == 1  # the turn itself was committed before feedback
