"""PettingZoo environments run unchanged, on the real package: in texas hold'em only the player
to act is asked and each sees its own hand only, a masked move is blocked naming the legal ones,
rewards are per player and the one who did not act last learns its result; the Parallel API,
branches and resumes, and bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pettingzoo
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    ConfigurationError,
    EnvironmentHarness,
    Hooks,
    Scenario,
)
from envharness.adapters.pettingzoo import PettingZooEnvironment
from envharness.hooks import HookContext
from envharness.records import (
    ActionBlocked,
    ActionExecuted,
    Observation,
    Outcome,
    ParticipantOutcome,
    Record,
    Score,
    SessionCreated,
)
from envharness.store import RecordFilter

CALL, RAISE, FOLD, CHECK = range(4)
SEED_3 = Scenario(id="hand-3", input={"seed": 3})
"""With two callers, seed 3 deals a hand player_0 loses at the showdown, on player_1's move."""


class Caller:
    """Calls (or raises when it cannot), never folds; chooses by its observation alone."""

    implementation = "caller@1"
    runs_inline = True

    def __init__(self) -> None:
        self.asked = 0
        self.heard: list[tuple[int, Any, str | None]] = []

    def act(self, observation: Any) -> dict[str, Any]:
        self.asked += 1
        legal = observation["legal_actions"]
        return {"action": RAISE if RAISE in legal else legal[0]}

    def feedback(self, turn: int, outcome: Any, blocked: str | None) -> None:
        self.heard.append((turn, outcome, blocked))


def poker() -> PettingZooEnvironment:
    return PettingZooEnvironment("pettingzoo.classic.texas_holdem_v4")


def records(harness: EnvironmentHarness, session_id: str, **where: Any) -> list[Record]:
    return list(harness.records(session_id, RecordFilter(**where)))


def payloads(found: list[Record], kind: type[Any]) -> list[Any]:
    return [record.payload for record in found if isinstance(record.payload, kind)]


@pytest.fixture(scope="module")
def hand(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[EnvironmentHarness, str, dict[str, Caller]]:
    """One hand of hold'em between two callers, shared by the tests that read its evidence."""
    agents: dict[str, Caller] = {}

    def seat(name: str) -> Any:
        def make() -> Caller:
            agents[name] = Caller()
            return agents[name]

        return make

    harness = EnvironmentHarness(
        tmp_path_factory.mktemp("poker") / "store",
        environment=poker(),
        agents={"player_0": seat("player_0"), "player_1": seat("player_1")},
    )
    session = harness.run(SEED_3, turns=100)
    assert (session.status, session.turns_completed) == ("completed", 20)
    return harness, session.id, agents


def test_only_the_player_to_act_is_observed_and_asked(
    hand: tuple[EnvironmentHarness, str, dict[str, Caller]],
) -> None:
    harness, session_id, agents = hand
    found = records(harness, session_id)
    observed = [(r.turn, r.participant) for r in found if isinstance(r.payload, Observation)]
    assert observed == [(turn, f"player_{(turn - 1) % 2}") for turn in range(1, 21)]
    executed = [(r.turn, r.participant) for r in found if isinstance(r.payload, ActionExecuted)]
    assert executed == observed
    assert (agents["player_0"].asked, agents["player_1"].asked) == (10, 10)
    [created] = payloads(found, SessionCreated)
    environment = created.config.environment
    assert (environment.name, environment.turn_order, environment.roles) == (
        "pettingzoo:classic.texas_holdem_v4",
        "environment",
        ("player",),
    )


def test_each_player_sees_its_own_hand_and_never_the_other(
    hand: tuple[EnvironmentHarness, str, dict[str, Caller]],
) -> None:
    harness, session_id, _ = hand
    live = pettingzoo.make("aec", "classic/texas_holdem-v4")
    live.reset(seed=3)
    index = live.unwrapped.env.card2index
    hands = {
        f"player_{seat}": [index[card.get_index()] for card in player.hand]
        for seat, player in enumerate(live.unwrapped.env.game.players)
    }
    assert set(hands["player_0"]).isdisjoint(hands["player_1"])
    for me, other in (("player_0", "player_1"), ("player_1", "player_0")):
        mine = records(harness, session_id, participant=me)
        assert {r.participant for r in mine} == {me}
        seen = payloads(mine, Observation)
        assert len(seen) == 10
        for observation in seen:
            cards = observation.observation["observation"][:52]
            assert all(cards[card] == 1.0 for card in hands[me])
            assert all(cards[card] == 0.0 for card in hands[other])


def test_rewards_are_per_player_and_the_one_who_did_not_act_last_learns_its_result(
    hand: tuple[EnvironmentHarness, str, dict[str, Caller]],
) -> None:
    harness, session_id, agents = hand
    found = records(harness, session_id)
    last = [r for r in found if r.turn == 20]
    [executed] = [r for r in last if isinstance(r.payload, ActionExecuted)]
    [told] = [r for r in last if isinstance(r.payload, ParticipantOutcome)]
    assert (executed.participant, executed.payload.reward) == ("player_1", 25.0)
    assert (told.participant, told.payload.reward) == ("player_0", -25.0)
    assert told.payload.outcome == {
        "reward": -25.0,
        "return": -25.0,
        "terminated": True,
        "truncated": False,
    }
    # Before the end nobody is told anything on a turn it did not act.
    assert [r.turn for r in found if isinstance(r.payload, ParticipantOutcome)] == [20]
    assert agents["player_0"].heard[-1] == (20, told.payload.outcome, None)
    [score] = payloads(found, Score)
    assert score.per_participant == {
        "player_0": {"return": -25.0},
        "player_1": {"return": 25.0},
    }
    assert score.metrics == {"steps": 20.0}
    outcome = payloads(found, Outcome)[-1]
    assert (outcome.done, outcome.truncated is True, outcome.signals) == (True, False, {})


class Checker(Caller):
    """Checks whatever the mask says: the first move of a hand cannot be a check."""

    def act(self, observation: Any) -> dict[str, Any]:
        self.asked += 1
        return {"action": CHECK if self.asked == 1 else observation["legal_actions"][0]}


def test_a_masked_move_is_blocked_naming_the_legal_ones(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=poker(), agents={"player_0": Checker, "player_1": Caller}
    )
    session = harness.run(SEED_3, turns=2)
    found = records(harness, session.id)
    [blocked] = payloads(found, ActionBlocked)
    assert (blocked.action, blocked.by) == ({"action": CHECK}, "environment")
    assert blocked.reason == (
        "action 3 is not legal for player_0 now (its action_mask forbids it): legal actions "
        "are 0, 1, 2"
    )
    # The blocked turn moved nothing: the same player is asked again.
    observed = [(r.turn, r.participant) for r in found if isinstance(r.payload, Observation)]
    assert observed == [(1, "player_0"), (2, "player_0")]
    first = payloads(found, Observation)[0].observation
    assert (first["action_mask"], first["legal_actions"]) == ([1, 1, 1, 0], [0, 1, 2])


def test_an_action_outside_the_space_is_blocked_naming_the_space(store_path: Path) -> None:
    class Wild(Caller):
        def act(self, observation: Any) -> dict[str, Any]:
            return {"action": 9}

    harness = EnvironmentHarness(
        store_path, environment=poker(), agents={"player_0": Wild, "player_1": Caller}
    )
    session = harness.run(SEED_3, turns=1)
    [blocked] = payloads(records(harness, session.id), ActionBlocked)
    assert blocked.reason == "action 9 is outside Discrete(4): choose an integer 0..3"


def test_a_branch_mid_hand_replays_and_plays_the_same_hand(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path,
        environment=PettingZooEnvironment("classic.leduc_holdem_v4"),
        agents={"player_0": Caller, "player_1": Caller},
        checkpoint_every=2,
    )
    parent = harness.run(Scenario(id="leduc", input={"seed": 5}), turns=50)
    assert parent.status == "completed"
    assert parent.turns_completed > 2
    checkpoint = next(c for c in harness.checkpoints(parent) if c.turn == 2)
    child = harness.branch(checkpoint, intervention={})
    child = harness.continue_(child, turns=48)
    assert (child.status, child.turns_completed) == ("completed", parent.turns_completed)
    diff = harness.compare(parent.id, child.id)
    assert diff.turns_compared == tuple(range(3, parent.turns_completed + 1))
    assert diff.differences == ()
    assert diff.scores == harness.compare(parent.id, parent.id).scores


@pytest.mark.anyio
async def test_the_async_harness_runs_leduc(store_path: Path, anyio_backend: str) -> None:
    async with AsyncEnvironmentHarness(
        store_path,
        environment=PettingZooEnvironment("classic.leduc_holdem_v4"),
        agents={"player_0": Caller, "player_1": Caller},
    ) as harness:
        session = await harness.run(Scenario(id="leduc", input={"seed": 5}), turns=50)
        assert session.status == "completed"
        rewards = {
            r.participant: r.payload.reward
            async for r in harness.records(session.id)
            if isinstance(r.payload, ActionExecuted | ParticipantOutcome)
            and r.turn == session.turns_completed
        }
        assert set(rewards) == {"player_0", "player_1"}
        assert sum(rewards.values()) == 0.0


def test_hooks_see_whose_turn_it_is_and_the_legal_actions(store_path: Path) -> None:
    seen: list[HookContext] = []

    def look(ctx: HookContext, nb: Any) -> None:
        seen.append(ctx)

    harness = EnvironmentHarness(
        store_path, environment=poker(), agents={"player_0": Caller, "player_1": Caller}
    )
    hooks = Hooks("watch@1", on_init=look, make_pre_hint=look)
    session = harness.run(SEED_3, turns=2, hooks=hooks)
    assert session.status == "completed"
    at_start = {ctx.participant: ctx for ctx in seen if ctx.hook == "on_init"}
    assert at_start["player_0"].predicates == {
        "my_turn": True,
        "ended": False,
        "action_0_allowed": True,
        "action_1_allowed": True,
        "action_2_allowed": True,
        "action_3_allowed": False,
    }
    assert at_start["player_0"].admissible == [{"action": 0}, {"action": 1}, {"action": 2}]
    assert at_start["player_1"].predicates["my_turn"] is False
    assert at_start["player_1"].state["acting"] == ["player_0"]
    asked = [(ctx.step, ctx.participant) for ctx in seen if ctx.hook == "make_pre_hint"]
    assert asked == [(1, "player_0"), (2, "player_1")]
    assert all(ctx.predicates["my_turn"] for ctx in seen if ctx.hook == "make_pre_hint")


# -- the Parallel API ----------------------------------------------------------------------------


class Thrower:
    """Rock, paper, scissors: the move after the one the opponent showed last."""

    implementation = "thrower@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, Any]:
        return {"action": (observation["observation"] + 1) % 3}


def test_parallel_agents_act_together_and_a_time_limit_truncates(store_path: Path) -> None:
    rps = PettingZooEnvironment("classic.rps_v2", api="parallel", max_cycles=3)
    harness = EnvironmentHarness(
        store_path, environment=rps, agents={"player_0": Thrower, "player_1": Thrower}
    )
    session = harness.run(Scenario(id="rps", input={"seed": 1}), turns=10)
    assert (session.status, session.turns_completed) == ("completed", 3)
    assert session.reason == "the environment truncated the episode at turn 3"
    found = records(harness, session.id)
    observed = [(r.turn, r.participant) for r in found if isinstance(r.payload, Observation)]
    assert observed == [(t, p) for t in (1, 2, 3) for p in ("player_0", "player_1")]
    rewards = [
        (r.participant, r.payload.reward) for r in found if isinstance(r.payload, ActionExecuted)
    ]
    assert len(rewards) == 6
    assert all(a[1] + b[1] == 0.0 for a, b in zip(rewards[::2], rewards[1::2], strict=True))
    assert payloads(found, Outcome)[-1].truncated is True
    assert harness.trajectory(session).termination.cause == "truncated"


def test_a_blocked_parallel_action_leaves_the_step_unplayed(store_path: Path) -> None:
    class Wild(Thrower):
        def act(self, observation: Any) -> dict[str, Any]:
            return {"action": 7}

    rps = PettingZooEnvironment("classic.rps_v2", api="parallel", max_cycles=3)
    harness = EnvironmentHarness(
        store_path, environment=rps, agents={"player_0": Thrower, "player_1": Wild}
    )
    session = harness.run(Scenario(id="rps", input={"seed": 1}), turns=2)
    found = records(harness, session.id)
    assert len(payloads(found, ActionBlocked)) == 2
    executed = payloads(found, ActionExecuted)
    assert [e.outcome for e in executed] == [
        {"moved": False, "reason": "player_1 had no legal action; every agent acts again"}
    ] * 2
    assert payloads(found, Score)[0].metrics == {"steps": 0.0}


# -- what it takes, and bad input ----------------------------------------------------------------


def test_an_instance_or_a_factory_runs_like_a_module(store_path: Path) -> None:
    for environment in (
        PettingZooEnvironment(pettingzoo.make("aec", "classic/rps-v2", max_cycles=2)),
        PettingZooEnvironment(lambda: pettingzoo.make("parallel", "classic/rps-v2", max_cycles=2)),
    ):
        harness = EnvironmentHarness(
            store_path, environment=environment, agents={"player_0": Thrower, "player_1": Thrower}
        )
        session = harness.run(Scenario(id="made", input={}), turns=10)
        assert session.status == "completed", session.reason
        assert harness.trajectory(session).termination.cause == "truncated"
    assert (
        PettingZooEnvironment(pettingzoo.make("aec", "classic/rps-v2")).spec.name
        == "pettingzoo:rps_v2"
    )


def test_participants_must_be_the_pettingzoo_agents(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=poker(), agents={"alice": Caller, "player_1": Caller}
    )
    session = harness.run(SEED_3, turns=1)
    assert session.status == "failed"
    assert (
        "pettingzoo:classic.texas_holdem_v4 has the agents player_0, player_1: name the "
        "participants after them, one each (missing player_0; not agents of it: alice)"
    ) in str(session.reason)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("classic.texas_holdm_v4", "did you mean classic.texas_holdem_v4"),
        ("pettingzoo.classic.leduc_holdem_v3", "did you mean classic.leduc_holdem_v4"),
        ("no.such.module", r"unknown PettingZoo environment 'no.such.module' \(give a module"),
    ],
)
def test_an_unknown_module_names_the_closest_environments(path: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PettingZooEnvironment(path)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("pettingzoo.utils",), {}, r"pettingzoo.utils has no env\(\) to make its AEC environment"),
        (("classic.rps_v2",), {"api": "both"}, "api must be 'aec' or 'parallel'"),
        (("classic.rps_v2",), {"invalid_actions": "skip"}, "invalid_actions must be"),
        (
            ("classic.rps_v2",),
            {"no_such_kwarg": 1},
            r"pettingzoo.make\('aec', 'classic/rps-v2'\) failed",
        ),
        (("classic.texas_holdem_v4",), {"api": "parallel"}, "has no Parallel API; use api='aec'"),
        ((42,), {}, "takes a module path, an AECEnv or ParallelEnv, or a factory, not int"),
        ((lambda: 42,), {}, "made an object of type int, which is neither a PettingZoo AECEnv"),
        (
            (pettingzoo.make("aec", "classic/rps-v2"),),
            {"api": "aec"},
            "an instance or a factory is already one",
        ),
        (
            (pettingzoo.make("aec", "classic/rps-v2"),),
            {"max_cycles": 3},
            "apply to a module path only",
        ),
    ],
)
def test_bad_arguments_say_what_to_fix(args: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PettingZooEnvironment(*args, **kwargs)


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    with pytest.raises(ConfigurationError, match=r'pip install "envharness\[pettingzoo\]"'):
        PettingZooEnvironment("classic.rps_v2")
