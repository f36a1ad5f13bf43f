"""The turn loop: what it records, how failures end a session, and that nothing is lost."""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from envharness import (
    AgentReply,
    AsyncEnvironmentHarness,
    Cost,
    EnvironmentSpec,
    Record,
    Resolution,
    Scenario,
)
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    Artifact,
    Finding,
    Observation,
    Outcome,
    Score,
    SessionCreated,
    SessionStatus,
)

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


class Increment:
    implementation = "increment@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1}


class AsyncIncrement:
    implementation = "async-increment@1"

    async def act(self, observation: Any) -> dict[str, int]:
        await anyio.lowlevel.checkpoint()
        return {"value": 1}


async def run(
    store: Path,
    agents: Mapping[str, Any],
    *,
    environment: Any = SyntheticEnvironment,
    turns: int = 3,
    scenario: Scenario[Any] = START,
    **options: Any,
) -> tuple[Any, list[Record]]:
    harness = AsyncEnvironmentHarness(store, environment=environment, agents=agents, **options)
    session = await harness.run(scenario, turns=turns)
    records = [record async for record in harness.records(session.id)]
    return session, records


def kinds(records: list[Record]) -> list[str]:
    return [record.kind for record in records]


async def test_a_session_records_every_step_in_order(store_path: Path) -> None:
    session, records = await run(store_path, {"alice": Increment}, turns=2)
    assert session.status == "completed"
    assert session.turns_completed == 2
    assert kinds(records) == [
        "session.created",
        "session.status",
        "segment.started",
        *["observation", "action.attempted", "action.executed", "outcome"] * 2,
        "score",
        "session.status",
        "segment.ended",
    ]
    assert [record.seq for record in records] == list(range(len(records)))
    assert all(r.prev == p.digest for p, r in itertools.pairwise(records))
    last = records[-2].payload
    assert isinstance(last, SessionStatus)
    assert last.status == "completed"


async def test_async_agents_run_like_sync_ones(store_path: Path) -> None:
    session, records = await run(store_path, {"alice": AsyncIncrement, "bob": Increment})
    assert session.status == "completed"
    outcomes = [r.payload for r in records if isinstance(r.payload, Outcome)]
    assert [o.signals["total"] for o in outcomes] == [2.0, 4.0, 6.0]


async def test_each_participant_observes_only_its_own_view(store_path: Path) -> None:
    class Giver:
        implementation = "giver@1"

        def __init__(self, value: int) -> None:
            self.value = value

        def act(self, observation: Any) -> dict[str, int]:
            return {"value": self.value}

    _, records = await run(
        store_path, {"alice": lambda: Giver(1), "bob": lambda: Giver(5)}, turns=2
    )
    seen = {
        (r.participant, r.turn): r.payload.observation
        for r in records
        if isinstance(r.payload, Observation)
    }
    assert seen[("alice", 2)]["my_contributions"] == [1]
    assert seen[("bob", 2)]["my_contributions"] == [5]
    created = records[0].payload
    assert isinstance(created, SessionCreated)
    assert created.config.participants["alice"].implementation == "giver@1"


class Ordered:
    """Sequential rules: each participant sees the state its predecessors left."""

    spec = EnvironmentSpec(
        name="ordered", version="1", input_type=SyntheticScenarioInput, turn_order="sequential"
    )

    def initialize(self, input: SyntheticScenarioInput, rng: Random, roster: Any) -> list[str]:
        return []

    def observe(self, state: list[str], participant: str) -> dict[str, Any]:
        return {"log": state}

    def resolve(self, state: list[str], actions: Mapping[str, Any]) -> Resolution:
        [(name, _)] = actions.items()
        return Resolution(state=[*state, name], outcomes={name: len(state)})

    def intervene(self, state: list[str], intervention: Mapping[str, Any]) -> list[str]:
        return state


async def test_sequential_participants_act_in_roster_order(store_path: Path) -> None:
    _, records = await run(
        store_path, {"alice": Increment, "bob": Increment}, environment=Ordered, turns=2
    )
    observed = [
        (r.turn, r.participant, r.payload.observation["log"])
        for r in records
        if isinstance(r.payload, Observation)
    ]
    assert observed == [
        (1, "alice", []),
        (1, "bob", ["alice"]),
        (2, "alice", ["alice", "bob"]),
        (2, "bob", ["alice", "bob", "alice"]),
    ]
    steps = [r.participant for r in records if isinstance(r.payload, Outcome)]
    assert steps == ["alice", "bob", "alice", "bob"]


async def test_equal_states_are_stored_once(store_path: Path) -> None:
    class Still(Ordered):
        def resolve(self, state: list[str], actions: Mapping[str, Any]) -> Resolution:
            return Resolution(state=state)

    _, records = await run(store_path, {"alice": Increment}, environment=Still, turns=4)
    digests = {r.payload.state for r in records if isinstance(r.payload, Outcome)}
    assert len(digests) == 1
    with sqlite3.connect(store_path / "evidence.sqlite3") as connection:
        blobs = connection.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert blobs == 1


async def test_costs_are_recorded_when_an_agent_reports_them(store_path: Path) -> None:
    class Priced:
        implementation = "priced@1"

        def act(self, observation: Any) -> AgentReply:
            return AgentReply({"value": 1}, cost=Cost(input_tokens=10, usd=0.002))

    _, records = await run(store_path, {"alice": Priced}, turns=1)
    [cost] = [r for r in records if r.kind == "cost"]
    assert cost.participant == "alice"
    assert cost.payload == Cost(input_tokens=10, usd=0.002)


async def test_scores_and_findings_cite_the_records_they_rest_on(store_path: Path) -> None:
    class Down:
        implementation = "down@1"

        def act(self, observation: Any) -> dict[str, int]:
            return {"value": -1}

    _, records = await run(store_path, {"alice": Down}, turns=2)
    [score] = [r.payload for r in records if isinstance(r.payload, Score)]
    assert score.version == "synthetic-score@1"
    assert score.metrics["total"] == -2.0
    [finding] = [r.payload for r in records if isinstance(r.payload, Finding)]
    cited = {r.seq: r for r in records}[finding.cites[0]]
    assert cited.kind == "outcome"
    assert cited.turn == 2


async def test_an_environment_can_finish_early(store_path: Path) -> None:
    target = Scenario(id="reach", input=SyntheticScenarioInput(starting_total=0, target=2))
    session, _ = await run(store_path, {"a": SyntheticAgent}, turns=10, scenario=target)
    assert session.status == "completed"
    assert session.turns_completed == 2
    assert session.reason == "the environment reported done at turn 2"


async def test_artifacts_are_kept_content_addressed(store_path: Path) -> None:
    class Reporting(SyntheticEnvironment):
        def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
            resolution = super().resolve(state, actions)
            return Resolution(
                state=resolution.state,
                outcomes=resolution.outcomes,
                artifacts={"report.txt": b"total=%d" % resolution.state.total},
            )

    _, records = await run(store_path, {"a": Increment}, environment=Reporting, turns=1)
    [artifact] = [r.payload for r in records if isinstance(r.payload, Artifact)]
    path = store_path / "artifacts" / artifact.sha256[:2] / artifact.sha256
    assert path.read_bytes() == b"total=1"


# -- failures end the session with a reason, never crash the caller ----------------------------


async def test_an_agent_that_raises_fails_the_session_with_its_traceback(
    store_path: Path,
) -> None:
    class Broken:
        implementation = "broken@1"

        def act(self, observation: Any) -> dict[str, int]:
            raise RuntimeError("model endpoint refused")

    session, records = await run(store_path, {"alice": Broken})
    assert session.status == "failed"
    assert session.reason == "agent 'alice' raised RuntimeError: model endpoint refused"
    status = records[-2].payload
    assert isinstance(status, SessionStatus)
    assert status.error is not None
    assert status.error.type == "RuntimeError"
    assert "model endpoint refused" in (status.error.traceback or "")
    assert kinds(records)[-3:] == ["observation", "session.status", "segment.ended"]


async def test_a_non_dict_action_fails_the_session_and_is_still_recorded(
    store_path: Path,
) -> None:
    class Lister:
        implementation = "lister@1"

        def act(self, observation: Any) -> list[int]:
            return [1, 2]

    session, records = await run(store_path, {"alice": Lister}, environment=Ordered)
    assert session.status == "failed"
    assert "expected a dict (a JSON object), got list" in (session.reason or "")
    [attempt] = [r.payload for r in records if isinstance(r.payload, ActionAttempted)]
    assert attempt.action == [1, 2]


async def test_invalid_actions_are_blocked_where_the_environment_says_so(
    store_path: Path,
) -> None:
    class Wild:
        implementation = "wild@1"

        def act(self, observation: Any) -> Any:
            return {"value": 99} if observation.turn == 0 else "nonsense"

    session, records = await run(store_path, {"alice": Wild, "bob": Increment}, turns=2)
    assert session.status == "completed"
    blocked = [r.payload for r in records if isinstance(r.payload, ActionBlocked)]
    assert [b.action for b in blocked] == [{"value": 99}, "nonsense"]
    assert "Expected `int` <= 10 - at `$.value`" in blocked[0].reason
    executed = [(r.turn, r.participant) for r in records if r.kind == "action.executed"]
    assert executed == [(1, "bob"), (2, "bob")]


async def test_an_agent_that_times_out_fails_the_session(store_path: Path) -> None:
    class Slow:
        implementation = "slow@1"

        async def act(self, observation: Any) -> dict[str, int]:
            await anyio.sleep(30)
            return {"value": 1}

    session, _ = await run(store_path, {"alice": Slow}, action_timeout=0.05)
    assert session.status == "failed"
    assert session.reason == "agent 'alice' did not answer within 0.05s (action_timeout)"


async def test_unencodable_state_fails_the_session_clearly(store_path: Path) -> None:
    class Opaque(SyntheticEnvironment):
        def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
            return Resolution(state=object())

    session, records = await run(store_path, {"alice": Increment}, environment=Opaque)
    assert session.status == "failed"
    assert "environment state (object) is not encodable by msgspec" in (session.reason or "")
    assert "use a msgspec Struct, a dataclass or plain JSON types" in (session.reason or "")
    assert kinds(records)[-2:] == ["session.status", "segment.ended"]


async def test_an_environment_that_raises_fails_the_session(store_path: Path) -> None:
    class Crashing(SyntheticEnvironment):
        def observe(self, state: Any, participant: str) -> Any:
            raise KeyError(participant)

    session, _ = await run(store_path, {"alice": Increment}, environment=Crashing)
    assert session.status == "failed"
    assert session.reason == "environment observe() raised KeyError: 'alice'"


async def test_a_non_finite_signal_does_not_break_the_store(store_path: Path) -> None:
    class Weird(SyntheticEnvironment):
        def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
            resolution = super().resolve(state, actions)
            return Resolution(state=resolution.state, signals={"ratio": math.nan})

    session, records = await run(store_path, {"alice": Increment}, environment=Weird, turns=1)
    assert session.status == "completed"
    [outcome] = [r.payload for r in records if isinstance(r.payload, Outcome)]
    assert outcome.signals == {"ratio": None}


async def test_cancelling_a_run_ends_it_stopped_with_everything_recorded(
    store_path: Path,
) -> None:
    started = anyio.Event()

    class Patient:
        implementation = "patient@1"

        async def act(self, observation: Any) -> dict[str, int]:
            if observation.turn == 2:
                started.set()
                await anyio.sleep(30)
            return {"value": 1}

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": Patient}
    )
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: harness.run(START, turns=10))
        await started.wait()
        group.cancel_scope.cancel()
    [info] = await harness.sessions()
    assert info.status == "stopped"
    assert info.turns_completed == 2
    assert info.reason == "the run was cancelled"
    records = [r async for r in harness.records(info.id)]
    assert kinds(records)[-2:] == ["session.status", "segment.ended"]
    assert (await harness.verify()).ok


async def test_same_seed_same_agents_give_identical_payloads(tmp_path: Path) -> None:
    def payloads(records: list[Record]) -> list[bytes]:
        return [
            msgspec.json.encode(r.payload) for r in records if r.kind not in ("action.attempted",)
        ]

    first = await run(tmp_path / "a", {"alice": SyntheticAgent}, turns=3)
    second = await run(tmp_path / "b", {"alice": SyntheticAgent}, turns=3)
    assert payloads(first[1])[1:] == payloads(second[1])[1:]


async def test_sync_agents_run_in_a_worker_thread_unless_they_run_inline(store_path: Path) -> None:
    import threading

    threads: dict[str, bool] = {}

    class Threaded:
        implementation = "threaded@1"

        def act(self, observation: Any) -> dict[str, int]:
            threads["threaded"] = threading.current_thread() is threading.main_thread()
            return {"value": 1}

    class Inline(Threaded):
        implementation = "inline@1"
        runs_inline = True

        def act(self, observation: Any) -> dict[str, int]:
            threads["inline"] = threading.current_thread() is threading.main_thread()
            return {"value": 1}

    session, _ = await run(store_path, {"a": Threaded, "b": Inline}, turns=1)
    assert session.status == "completed"
    assert threads == {"threaded": False, "inline": True}
