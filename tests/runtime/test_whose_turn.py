"""Environments that say who acts, address outcomes to anyone, truncate and reward per player.

A small card-free "take the last stone" game stands in for poker: the player to move takes one
or two stones; the one who takes the last wins, and the other — who did not make the last
move — must still learn that it lost.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from types import MappingProxyType
from typing import Any

import anyio.lowlevel
import msgspec
import pytest

from envharness import AsyncEnvironmentHarness, EnvironmentSpec, Record, Resolution, Scenario
from envharness.contracts.environment import ScoreReport
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Observation,
    Outcome,
    ParticipantOutcome,
    Score,
    SessionStatus,
)

pytestmark = pytest.mark.anyio


class Pile(msgspec.Struct, frozen=True):
    stones: int
    to_move: str
    moves: int = 0


class Take(msgspec.Struct, frozen=True):
    take: int


class StonesInput(msgspec.Struct, frozen=True):
    stones: int = 5
    limit: int | None = None
    """Moves after which the game is cut short (a time limit), not decided."""


PLAYERS = ("alice", "bob")


class Stones:
    """Players alternate; only the player to move is asked."""

    spec = EnvironmentSpec(
        name="stones",
        version="1",
        input_type=StonesInput,
        action_type=Take,
        roles=("player",),
        turn_order="environment",
        invalid_actions="block",
        state_type=Pile,
    )

    def __init__(self) -> None:
        self.limit: int | None = None

    def initialize(self, input: StonesInput, rng: Random, roster: Mapping[str, str]) -> Pile:
        self.limit = input.limit
        return Pile(stones=input.stones, to_move="alice")

    def acting(self, state: Pile) -> Sequence[str]:
        return [state.to_move]

    def observe(self, state: Pile, participant: str) -> dict[str, Any]:
        return {"stones": state.stones, "you": participant}

    def render_text(self, state: Pile, participant: str) -> str:
        return f"\x1b[1m{'o' * state.stones}\x1b[0m"

    def check_action(self, state: Pile, participant: str, action: Take) -> str | None:
        if action.take not in (1, 2) or action.take > state.stones:
            return f"take must be 1 or 2 and at most {state.stones}, not {action.take}"
        return None

    def resolve(self, state: Pile, actions: Mapping[str, Take]) -> Resolution:
        if not actions:  # the move was blocked: the same player is to move again
            return Resolution(state=state)
        ((mover, action),) = actions.items()
        other = "bob" if mover == "alice" else "alice"
        left = state.stones - action.take
        after = Pile(stones=left, to_move=other, moves=state.moves + 1)
        if left == 0:
            return Resolution(
                state=after,
                outcomes={mover: {"result": "won"}, other: {"result": "lost"}},
                rewards={mover: 1.0, other: -1.0},
                done=True,
            )
        cut = self.limit is not None and after.moves >= self.limit
        return Resolution(state=after, outcomes={mover: {"left": left}}, truncated=cut)

    def intervene(self, state: Pile, intervention: Mapping[str, Any]) -> Pile:
        return state

    def score(self, state: Pile, scenario: Any) -> ScoreReport:
        winner = state.to_move if state.stones else ("bob" if state.to_move == "alice" else "alice")
        if state.stones:
            return ScoreReport(metrics={"moves": float(state.moves)})
        return ScoreReport(
            metrics={"moves": float(state.moves)},
            per_participant={p: {"won": 1.0 if p == winner else 0.0} for p in PLAYERS},
        )


class TakeOne:
    implementation = "take-one@1"

    def __init__(self) -> None:
        self.told: list[tuple[int, Any, str | None, Any]] = []

    def act(self, observation: Any) -> dict[str, int]:
        return {"take": 1}

    def feedback(self, turn: int, outcome: Any, blocked: str | None, *, action: Any) -> None:
        self.told.append((turn, outcome, blocked, action))


async def play(
    store: Path, agents: Mapping[str, Any], input: StonesInput, turns: int = 20
) -> tuple[Any, list[Record]]:
    harness = AsyncEnvironmentHarness(store, environment=Stones, agents=agents)
    session = await harness.run(Scenario(id="pile", input=input), turns=turns)
    return session, [record async for record in harness.records(session.id)]


def of(records: list[Record], kind: type[Any]) -> list[Record]:
    return [record for record in records if isinstance(record.payload, kind)]


async def test_only_the_player_to_move_is_observed_and_asked(store_path: Path) -> None:
    session, records = await play(store_path, {"alice": TakeOne, "bob": TakeOne}, StonesInput())
    assert session.status == "completed"
    assert session.turns_completed == 5
    assert session.ended_by == "done"
    assert not session.truncated
    asked = [(r.turn, r.participant) for r in records if r.kind == "action.attempted"]
    assert asked == [(1, "alice"), (2, "bob"), (3, "alice"), (4, "bob"), (5, "alice")]
    seen = [(r.turn, r.participant) for r in of(records, Observation)]
    assert seen == asked, "a participant not to act was shown the state"
    outcomes = of(records, Outcome)
    assert [r.participant for r in outcomes] == [None] * 5


async def test_the_player_who_did_not_make_the_last_move_learns_it_lost(
    store_path: Path,
) -> None:
    told: dict[str, TakeOne] = {}

    def keep(name: str) -> Any:
        def make() -> TakeOne:
            told[name] = TakeOne()
            return told[name]

        return make

    _, records = await play(
        store_path, {"alice": keep("alice"), "bob": keep("bob")}, StonesInput(stones=1)
    )
    executed = of(records, ActionExecuted)
    assert [(r.participant, r.payload.outcome, r.payload.reward) for r in executed] == [
        ("alice", {"result": "won"}, 1.0)
    ]
    (bystander,) = of(records, ParticipantOutcome)
    assert bystander.participant == "bob"
    assert bystander.turn == 1
    assert bystander.payload == ParticipantOutcome(outcome={"result": "lost"}, reward=-1.0)
    assert told["bob"].told == [(1, {"result": "lost"}, None, None)]
    assert told["alice"].told == [(1, {"result": "won"}, None, {"take": 1})]


async def test_per_participant_scores_are_recorded(store_path: Path) -> None:
    _, records = await play(store_path, {"alice": TakeOne, "bob": TakeOne}, StonesInput())
    (score,) = of(records, Score)
    assert score.payload.per_participant == {"alice": {"won": 1.0}, "bob": {"won": 0.0}}


async def test_a_truncated_episode_is_not_a_finished_one(store_path: Path) -> None:
    session, records = await play(
        store_path, {"alice": TakeOne, "bob": TakeOne}, StonesInput(stones=9, limit=3)
    )
    assert session.status == "completed"
    assert session.turns_completed == 3
    assert session.ended_by == "truncated"
    assert session.truncated
    last = of(records, Outcome)[-1].payload
    assert last.truncated is True
    assert last.done is False
    status = of(records, SessionStatus)[-1].payload
    assert status.reason == "the environment truncated the episode at turn 3"
    harness = AsyncEnvironmentHarness(store_path, environment=Stones, agents={"alice": TakeOne})
    trajectory = await harness.trajectory(session.id)
    assert trajectory.termination.cause == "truncated"
    assert trajectory.termination.truncated


async def test_running_out_of_turns_is_a_truncation_too(store_path: Path) -> None:
    session, _ = await play(
        store_path, {"alice": TakeOne, "bob": TakeOne}, StonesInput(stones=9), turns=2
    )
    assert session.ended_by == "turn_limit"
    assert session.truncated
    harness = AsyncEnvironmentHarness(store_path, environment=Stones, agents={"alice": TakeOne})
    trajectory = await harness.trajectory(session.id)
    assert trajectory.termination.cause == "turn_limit"
    assert trajectory.termination.truncated


async def test_an_illegal_move_is_blocked_by_the_environment_naming_the_rule(
    store_path: Path,
) -> None:
    class Greedy(TakeOne):
        def act(self, observation: Any) -> dict[str, int]:
            return {"take": 3}

    _, records = await play(store_path, {"alice": Greedy, "bob": TakeOne}, StonesInput(), 2)
    blocked = of(records, ActionBlocked)
    assert [r.participant for r in blocked] == ["alice", "alice"]
    assert blocked[0].payload.by == "environment"
    assert "take must be 1 or 2 and at most 5, not 3" in blocked[0].payload.reason


async def test_the_text_view_is_recorded_beside_the_observation(store_path: Path) -> None:
    _, records = await play(store_path, {"alice": TakeOne, "bob": TakeOne}, StonesInput(2))
    texts = [r.payload.text for r in of(records, Observation)]
    assert texts == ["\x1b[1moo\x1b[0m", "\x1b[1mo\x1b[0m"]


class AsyncStones(Stones):
    """The same rules answering asynchronously, as an environment in another process does."""

    async def acting(self, state: Pile) -> Sequence[str]:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        return super().acting(state)

    async def resolve(self, state: Pile, actions: Mapping[str, Take]) -> Resolution:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        return super().resolve(state, actions)

    async def observe(self, state: Pile, participant: str) -> dict[str, Any]:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        return super().observe(state, participant)


async def test_async_environment_methods_are_awaited(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=AsyncStones, agents={"alice": TakeOne, "bob": TakeOne}
    )
    session = await harness.run(Scenario(id="pile", input=StonesInput()), turns=20)
    assert session.status == "completed"
    assert session.turns_completed == 5


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("acting", "environment acting() named 'carol', who is not a participant"),
        ("outcome", "outcomes names 'carol', who is not a participant"),
        ("reward", "rewards names 'carol', who is not a participant"),
        ("reward_type", "rewards['bob'] must be a number a float can hold, not str"),
        ("acting_type", "environment acting() returned str 'alice'; return a list"),
        ("score", "environment score() scored 'carol', who is not a participant"),
        ("score_proxy", "environment score() scored 'carol', who is not a participant"),
    ],
)
async def test_naming_someone_who_is_not_playing_fails_the_session_clearly(
    store_path: Path, broken: str, expected: str
) -> None:
    class Broken(Stones):
        def acting(self, state: Pile) -> Sequence[str]:
            if broken == "acting":
                return ["carol"]
            if broken == "acting_type":
                return "alice"  # type: ignore[return-value]
            return super().acting(state)

        def resolve(self, state: Pile, actions: Mapping[str, Take]) -> Resolution:
            resolution = super().resolve(state, actions)
            if broken == "outcome":
                return Resolution(state=resolution.state, outcomes={"carol": 1})
            if broken == "reward":
                return Resolution(state=resolution.state, rewards={"carol": 1.0})
            if broken == "reward_type":
                return Resolution(state=resolution.state, rewards={"bob": "1"})  # type: ignore[dict-item]
            return resolution

        def score(self, state: Pile, scenario: Any) -> ScoreReport:
            scored = {"carol": {"won": 1.0}}  # a mapping that is not a dict is checked too
            given = MappingProxyType(scored) if broken == "score_proxy" else scored
            return ScoreReport(metrics={}, per_participant=given)

    harness = AsyncEnvironmentHarness(
        store_path, environment=Broken, agents={"alice": TakeOne, "bob": TakeOne}
    )
    session = await harness.run(Scenario(id="pile", input=StonesInput(stones=1)), turns=3)
    assert session.status == "failed"
    assert expected in (session.reason or "")


def test_declaring_the_order_without_acting_is_refused_at_construction(
    store_path: Path,
) -> None:
    class NoActing:
        spec = Stones.spec

        initialize = Stones.initialize
        observe = Stones.observe
        resolve = Stones.resolve
        intervene = Stones.intervene

    from envharness.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"has no acting\(state\) method"):
        AsyncEnvironmentHarness(store_path, environment=NoActing, agents={"alice": TakeOne})


async def test_resume_and_branch_follow_whose_turn(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=Stones, agents={"alice": TakeOne, "bob": TakeOne}
    )
    first = await harness.run(Scenario(id="pile", input=StonesInput(stones=5)), turns=2)
    resumed = await harness.continue_(first.id, turns=10)
    assert resumed.status == "completed"
    records = [record async for record in harness.records(first.id)]
    asked = [(r.turn, r.participant) for r in records if r.kind == "action.attempted"]
    assert asked[-3:] == [(3, "alice"), (4, "bob"), (5, "alice")]


async def test_existing_environments_seal_the_same_payloads_as_before(store_path: Path) -> None:
    """Simultaneous and sequential environments use none of the new fields: the payloads a
    seeded session seals are the bytes they were before environments could say who acts
    (the digest was taken at b0b02d6, before any of them existed)."""
    seen = hashlib.sha256()
    for turn_order in ("simultaneous", "sequential"):

        class Ordered(SyntheticEnvironment):
            spec = dataclasses.replace(SyntheticEnvironment.spec, turn_order=turn_order)

        harness = AsyncEnvironmentHarness(
            store_path, environment=Ordered, agents={"alice": SyntheticAgent, "bob": SyntheticAgent}
        )
        scenario = Scenario(id="s", input=SyntheticScenarioInput(starting_total=1))
        session = await harness.run(scenario, turns=3, seed=11)
        async for record in harness.records(session.id):
            if record.kind in ("session.created", "segment.started"):
                continue  # ids, times and the runner's host differ from run to run
            seen.update(f"{record.kind}|{record.turn}|{record.participant}|".encode())
            payload = record.payload
            if isinstance(payload, ActionAttempted):  # how long the agent took varies
                payload = msgspec.structs.replace(payload, seconds=None)
            seen.update(msgspec.json.encode(payload))
    assert seen.hexdigest() == EXPECTED_PAYLOADS


EXPECTED_PAYLOADS = "08327346aebffe16410040f37ad6330cc591292710bff7297ac058738ee2d3b3"


LISTENER = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        print(json.dumps({"type": "ready", "protocol": 1, "implementation": "listener@1"}))
    elif message["type"] == "act":
        print(json.dumps({"type": "log", "message": json.dumps({"act": message["turn"]})}))
        print(json.dumps({"type": "action", "id": message["id"], "action": {"take": 1}}))
    elif message["type"] == "feedback":
        print(json.dumps({"type": "log", "message": json.dumps(message)}))
    elif message["type"] == "shutdown":
        break
    sys.stdout.flush()
"""


async def test_a_program_that_did_not_act_is_told_its_outcome_by_the_protocol(
    store_path: Path, tmp_path: Path
) -> None:
    from envharness import CommandAgent
    from envharness.records import Log

    program = tmp_path / "listener.py"
    program.write_text(LISTENER)
    listener = CommandAgent([sys.executable, str(program)], implementation="listener@1")
    _, records = await play(store_path, {"alice": TakeOne, "bob": listener}, StonesInput(stones=3))
    said = [r.payload.message for r in of(records, Log)]
    heard = [json.loads(message) for message in said if message.startswith("{")]
    assert heard[0] == {"act": 2}, "the program was told the wrong turn"
    assert heard[1]["status"] == "executed"
    assert heard[2] == {
        "type": "feedback",
        "turn": 3,
        "act_id": "",
        "status": "outcome",
        "action": None,
        "outcome": {"result": "lost"},
        "reason": None,
    }


async def test_a_hook_rewrite_answers_to_the_rules_like_the_agents_own_answer(
    store_path: Path,
) -> None:
    from envharness import Hooks, Rewrite

    hooks = Hooks("greedy@1", on_before_action=lambda ctx, nb: Rewrite(action={"take": 3}))
    harness = AsyncEnvironmentHarness(
        store_path, environment=Stones, agents={"alice": TakeOne, "bob": TakeOne}, hooks=hooks
    )
    session = await harness.run(Scenario(id="pile", input=StonesInput()), turns=1)
    records = [record async for record in harness.records(session.id)]
    (blocked,) = of(records, ActionBlocked)
    assert blocked.payload.action == {"take": 3}
    assert blocked.payload.by == "environment"
    assert not of(records, ActionExecuted)
