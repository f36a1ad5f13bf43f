"""Gymnasium environments run unchanged, on the real package: Taxi-v4 and FrozenLake-v1 through
both harnesses, seeds, rewards and return, truncation apart from termination, illegal actions
blocked naming the space, and checkpoint, branch and resume rebuilt by an exact replay."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import gymnasium as gym
import pytest
from gymnasium import spaces
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

from envharness import (
    AsyncEnvironmentHarness,
    BlockAndPrompt,
    ConfigurationError,
    EnvironmentHarness,
    Hooks,
    Scenario,
)
from envharness.adapters._optional import require
from envharness.adapters._png import png
from envharness.adapters.gymnasium import GymnasiumEnvironment, GymnasiumInput
from envharness.hooks import HookContext
from envharness.records import (
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Observation,
    Outcome,
    Record,
    Score,
    SessionCreated,
)

LEFT, DOWN, RIGHT, UP = range(4)
TO_THE_GOAL = [RIGHT, RIGHT, DOWN, DOWN, DOWN, RIGHT]
"""FrozenLake 4x4, not slippery: from S round the holes to G."""


class Scripted:
    """Plays the moves it was given, then stands still (LEFT at the left edge)."""

    implementation = "scripted@1"
    runs_inline = True
    moves: ClassVar[list[Any]] = TO_THE_GOAL

    def __init__(self) -> None:
        self._moves = iter(self.moves)

    def act(self, observation: Any) -> dict[str, Any]:
        return {"action": next(self._moves, LEFT)}


class FromTheObservation:
    """Chooses by the observation alone, so a fresh agent after a resume or in a branch plays
    as the original one would have."""

    implementation = "from-observation@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, Any]:
        return {"action": (observation["observation"] * 3 + 1) % 4}


def frozen_lake(**kwargs: Any) -> GymnasiumEnvironment:
    return GymnasiumEnvironment("FrozenLake-v1", is_slippery=False, **kwargs)


def records(harness: EnvironmentHarness, session_id: str) -> list[Record]:
    return list(harness.records(session_id))


def payloads(found: list[Record], kind: type[Any]) -> list[Any]:
    return [record.payload for record in found if isinstance(record.payload, kind)]


def by_turn(found: list[Record], kind: type[Any]) -> dict[int, Any]:
    return {r.turn: r.payload for r in found if isinstance(r.payload, kind) and r.turn is not None}


# -- a session, its evidence -------------------------------------------------------------------


def test_frozen_lake_to_the_goal_records_rewards_return_and_termination(store_path: Path) -> None:
    harness = EnvironmentHarness(store_path, environment=frozen_lake(), agents={"walker": Scripted})
    session = harness.run(Scenario(id="goal", input={"seed": 7}), turns=20)
    assert (session.status, session.turns_completed) == ("completed", 6)
    assert session.reason == "the environment reported done at turn 6"
    found = records(harness, session.id)
    executed = payloads(found, ActionExecuted)
    assert [e.action for e in executed] == [{"action": move} for move in TO_THE_GOAL]
    assert [e.reward for e in executed] == [0.0] * 5 + [1.0]
    assert executed[-1].outcome == {
        "reward": 1.0,
        "return": 1.0,
        "terminated": True,
        "truncated": False,
    }
    outcomes = payloads(found, Outcome)
    assert [o.done for o in outcomes] == [False] * 5 + [True]
    assert outcomes[-1].signals == {"reward": 1.0, "return": 1.0}
    assert all(o.truncated is not True for o in outcomes)
    [score] = payloads(found, Score)
    assert score.metrics == {"return": 1.0, "steps": 6.0}
    first = payloads(found, Observation)[0]
    assert first.observation == {"observation": 0, "info": {"prob": 1.0}}
    assert isinstance(first.text, str)
    assert "\x1b[41m" in first.text  # FrozenLake's ansi render marks where the walker is
    assert harness.trajectory(session).termination.cause == "done"
    assert harness.verify().ok


def test_a_time_limit_is_recorded_as_truncated_not_done(store_path: Path) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=5)
    harness = EnvironmentHarness(store_path, environment=taxi, agents={"driver": Scripted})
    session = harness.run(Scenario(id="short", input={"seed": 3}), turns=50)
    assert (session.status, session.turns_completed) == ("completed", 5)
    assert session.reason == "the environment truncated the episode at turn 5"
    found = records(harness, session.id)
    last = payloads(found, Outcome)[-1]
    assert (last.done, last.truncated) == (False, True)
    assert payloads(found, ActionExecuted)[-1].outcome["truncated"] is True
    assert payloads(found, Score)[0].metrics == {"return": -5.0, "steps": 5.0}
    termination = harness.trajectory(session).termination
    assert (termination.cause, termination.truncated, termination.terminated) == (
        "truncated",
        True,
        False,
    )


def test_taxi_observations_carry_the_action_mask_and_the_spec_its_schema(store_path: Path) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=3)
    harness = EnvironmentHarness(store_path, environment=taxi, agents={"driver": Scripted})
    session = harness.run(Scenario(id="mask", input={"seed": 7}), turns=3)
    found = records(harness, session.id)
    first = payloads(found, Observation)[0].observation
    assert first == {"observation": 309, "action_mask": [1, 1, 0, 0, 0, 0], "info": {"prob": 1.0}}
    [created] = payloads(found, SessionCreated)
    environment = created.config.environment
    assert (environment.name, environment.roles, environment.turn_order) == (
        "gymnasium:Taxi-v4",
        ("agent",),
        "simultaneous",
    )
    assert environment.version.startswith(f"adapter 1; gymnasium {gym.__version__}; env ")
    schema = environment.action_schema
    assert schema is not None
    action = schema["$defs"]["GymnasiumAction"]
    assert action["properties"]["action"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 5,
        "description": "Discrete(6)",
    }
    assert (action["required"], action["additionalProperties"]) == (["action"], False)


@pytest.mark.anyio
async def test_the_async_harness_runs_taxi(store_path: Path, anyio_backend: str) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=4)
    async with AsyncEnvironmentHarness(
        store_path, environment=taxi, agents={"driver": FromTheObservation}
    ) as harness:
        session = await harness.run(Scenario(id="async", input={"seed": 11}), turns=10)
        assert (session.status, session.turns_completed) == ("completed", 4)
        rewards = [
            r.payload.reward
            async for r in harness.records(session.id)
            if isinstance(r.payload, ActionExecuted)
        ]
        assert rewards == [-1.0] * 4
        assert (await harness.trajectory(session.id)).termination.cause == "truncated"


def test_each_session_gets_its_own_live_environment() -> None:
    """The adapter is a factory: every call is a fresh copy, sharing only the spec."""
    taxi = GymnasiumEnvironment("Taxi-v4")
    first, second = taxi(), taxi()
    assert first is not second
    assert first.spec is second.spec is taxi.spec
    one = first.initialize(GymnasiumInput(seed=1), Random(0), {"a": "agent"})
    two = second.initialize(GymnasiumInput(seed=1), Random(0), {"a": "agent"})
    assert one == two
    assert first.replayer.live(one.replay) is not second.replayer.live(two.replay)
    assert repr(taxi) == "GymnasiumEnvironment('Taxi-v4')"


def test_the_seed_comes_from_the_scenario_or_else_from_the_session(store_path: Path) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=1)
    harness = EnvironmentHarness(store_path, environment=taxi, agents={"driver": Scripted})

    def first_observation(scenario: Scenario[Any], seed: int) -> Any:
        session = harness.run(scenario, turns=1, seed=seed)
        return payloads(records(harness, session.id), Observation)[0].observation["observation"]

    seeded = Scenario(id="seeded", input={"seed": 7})
    unseeded = Scenario(id="unseeded", input={})
    assert first_observation(seeded, 1) == first_observation(seeded, 2) == 309
    starts = {first_observation(unseeded, seed) for seed in range(4)}
    assert len(starts) > 1
    assert first_observation(unseeded, 3) == first_observation(unseeded, 3)


# -- illegal actions ---------------------------------------------------------------------------


class Careless(Scripted):
    moves: ClassVar[list[Any]] = [7, "north", RIGHT]


def test_an_action_outside_the_space_is_blocked_naming_the_space(store_path: Path) -> None:
    harness = EnvironmentHarness(store_path, environment=frozen_lake(), agents={"w": Careless})
    session = harness.run(Scenario(id="careless", input={"seed": 1}), turns=3)
    assert session.status == "completed"
    found = records(harness, session.id)
    blocked = payloads(found, ActionBlocked)
    assert [(b.action, b.by) for b in blocked] == [
        ({"action": 7}, "environment"),
        ({"action": "north"}, "environment"),
    ]
    assert blocked[0].reason == "action 7 is outside Discrete(4): choose an integer 0..3"
    assert "is not an integer: Discrete(4) takes an integer" in blocked[1].reason
    [executed] = payloads(found, ActionExecuted)
    assert executed.action == {"action": RIGHT}
    assert payloads(found, Score)[0].metrics["steps"] == 1.0  # the blocked turns moved nothing


class Misspelt(Scripted):
    moves: ClassVar[list[Any]] = [RIGHT]

    def act(self, observation: Any) -> dict[str, Any]:
        return {"acton": RIGHT}


def test_an_answer_without_the_action_key_is_blocked_by_validation(store_path: Path) -> None:
    harness = EnvironmentHarness(store_path, environment=frozen_lake(), agents={"w": Misspelt})
    session = harness.run(Scenario(id="misspelt", input={"seed": 1}), turns=1)
    [blocked] = payloads(records(harness, session.id), ActionBlocked)
    assert blocked.by == "validation"
    assert "acton" in blocked.reason


def test_invalid_actions_fail_the_session_when_asked(store_path: Path) -> None:
    strict = frozen_lake(invalid_actions="fail")
    harness = EnvironmentHarness(store_path, environment=strict, agents={"w": Careless})
    session = harness.run(Scenario(id="strict", input={"seed": 1}), turns=3)
    assert session.status == "failed"
    assert session.reason == (
        "agent 'w' returned an invalid action: action 7 is outside Discrete(4): choose an "
        "integer 0..3"
    )


# -- checkpoints, branches, resume: rebuilt by replay ------------------------------------------


SLIPPERY = Scenario(id="slippery", input={"seed": 1})
"""FrozenLake 8x8, slippery: the RNG decides where each move goes, and the replay must too."""


def slippery_harness(store: Path, **kwargs: Any) -> EnvironmentHarness:
    lake = GymnasiumEnvironment("FrozenLake-v1", map_name="8x8", is_slippery=True)
    return EnvironmentHarness(
        store, environment=lake, agents={"walker": FromTheObservation}, **kwargs
    )


def states(harness: EnvironmentHarness, session_id: str) -> dict[int, str]:
    return {
        turn: outcome.state
        for turn, outcome in by_turn(records(harness, session_id), Outcome).items()
    }


def test_a_branch_from_turn_n_replays_and_goes_on_exactly(store_path: Path) -> None:
    harness = slippery_harness(store_path, checkpoint_every=4)
    parent = harness.run(SLIPPERY, turns=12)
    assert (parent.status, parent.turns_completed) == ("completed", 12)
    at_four = next(c for c in harness.checkpoints(parent) if c.turn == 4)
    child = harness.branch(at_four, intervention={}, reason="replay from turn 4")
    child = harness.continue_(child, turns=8)
    assert (child.status, child.turns_completed) == ("completed", 12)
    parents, childs = states(harness, parent.id), states(harness, child.id)
    assert sorted(childs) == list(range(5, 13))
    assert {turn: parents[turn] for turn in childs} == childs
    diff = harness.compare(parent.id, child.id)
    assert diff.turns_compared == tuple(range(5, 13))
    assert diff.differences == ()


def test_a_resumed_session_replays_and_equals_an_uninterrupted_one(store_path: Path) -> None:
    harness = slippery_harness(store_path)
    straight = harness.run(SLIPPERY, turns=10)
    halves = harness.run(SLIPPERY, turns=4)
    halves = harness.continue_(halves, turns=6)
    assert halves.turns_completed == 10
    assert states(harness, halves.id) == states(harness, straight.id)


def test_a_replay_that_does_not_reproduce_is_refused_naming_the_turn(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = slippery_harness(store_path)
    session = harness.run(SLIPPERY, turns=5)
    original = FrozenLakeEnv.step

    def flaky(self: FrozenLakeEnv, action: int) -> Any:
        observation, reward, terminated, truncated, info = original(self, action)
        self.flaky_steps = getattr(self, "flaky_steps", 0) + 1  # type: ignore[attr-defined]
        return (
            observation,
            reward + (0.5 if self.flaky_steps == 3 else 0.0),
            terminated,
            truncated,
            info,
        )  # type: ignore[attr-defined]

    monkeypatch.setattr(FrozenLakeEnv, "step", flaky)
    resumed = harness.continue_(session, turns=2)
    assert resumed.status == "failed"
    assert resumed.reason is not None
    assert (
        "ReplayMismatchError: gymnasium:FrozenLake-v1: replaying seed 1 did not reproduce "
        in resumed.reason
    )
    assert "turn 3 of 5" in resumed.reason
    assert resumed.turns_completed == 5


def test_a_branch_takes_no_intervention_but_the_empty_one(store_path: Path) -> None:
    harness = slippery_harness(store_path)
    session = harness.run(SLIPPERY, turns=2)
    with pytest.raises(ConfigurationError, match="takes no interventions"):
        harness.branch(harness.checkpoint(session), intervention={"position": 3})


# -- hooks ---------------------------------------------------------------------------------------


class PickerUpper:
    """A flawed frozen policy: tries to pick the passenger up wherever it is, and only moves
    (the first move its mask allows) when it is told it cannot."""

    implementation = "picker-upper@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, Any]:
        if not observation.get("hints"):
            return {"action": 4}
        return {"action": observation["action_mask"].index(1)}


def test_hooks_see_the_action_mask_and_can_block_what_it_forbids(store_path: Path) -> None:
    seen: list[HookContext] = []

    def masked(ctx: HookContext, nb: Any) -> Any:
        seen.append(ctx)
        if ctx.predicates.get(f"action_{ctx.action['action']}_allowed") is False:
            return BlockAndPrompt(f"action {ctx.action['action']} does nothing here")
        return None

    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=2)
    harness = EnvironmentHarness(store_path, environment=taxi, agents={"driver": PickerUpper})
    hooks = Hooks("mask-guard@1", on_before_action=masked)
    session = harness.run(Scenario(id="hooked", input={"seed": 7}), turns=2, hooks=hooks)
    assert session.status == "completed"
    first = seen[0]
    assert first.state == {"steps": 0, "return": 0.0, "action_mask": [1, 1, 0, 0, 0, 0]}
    assert first.predicates == {
        "terminated": False,
        "truncated": False,
        **{f"action_{i}_allowed": i < 2 for i in range(6)},
    }
    assert first.admissible == [{"action": i} for i in range(6)]
    found = records(harness, session.id)
    blocked = [r for r in found if isinstance(r.payload, ActionBlocked)]
    assert [(b.turn, b.payload.reason) for b in blocked] == [(1, "action 4 does nothing here")]
    assert blocked[0].payload.by == "hook"
    # One step south and the taxi is at the passenger: the mask allows the pickup.
    assert seen[-1].predicates["action_4_allowed"] is True
    executed = [(r.turn, r.payload.action) for r in found if isinstance(r.payload, ActionExecuted)]
    assert executed == [(1, {"action": 0}), (2, {"action": 4})]


def test_a_rewrite_past_the_space_fails_the_step_naming_it() -> None:
    """``check_action`` does not see a hook's rewrite; ``resolve`` refuses it all the same."""
    taxi = GymnasiumEnvironment("Taxi-v4")()
    state = taxi.initialize(GymnasiumInput(seed=1), Random(0), {"d": "agent"})
    with pytest.raises(ValueError, match=r"d's action 9 is outside Discrete\(6\)"):
        taxi.resolve(state, {"d": {"action": 9}})


# -- what it takes, and bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "closest"),
    [("Taxy-v4", "Taxi-v4"), ("Taxi-v3", "Taxi-v4"), ("FrozenLake-v2", "FrozenLake-v1")],
)
def test_an_unknown_id_names_the_closest_registered_ones(env_id: str, closest: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        GymnasiumEnvironment(env_id)
    message = str(caught.value)
    assert f"unknown Gymnasium environment id {env_id!r}; did you mean {closest}" in message
    assert "pprint_registry" in message


def test_an_id_may_name_the_module_that_registers_it() -> None:
    taxi = GymnasiumEnvironment("gymnasium.envs.toy_text:Taxi-v4")
    assert taxi.spec.name == "gymnasium:gymnasium.envs.toy_text:Taxi-v4"
    with pytest.raises(ConfigurationError, match="names the module 'no_such_module' to import"):
        GymnasiumEnvironment("no_such_module:Taxi-v4")


def test_an_id_far_from_any_is_refused_without_a_guess() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown Gymnasium environment id 'zzz' \("):
        GymnasiumEnvironment("zzz")


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ConfigurationError) as caught:
        GymnasiumEnvironment("Taxi-v4")
    assert str(caught.value) == (
        "the gymnasium adapter needs the Python package 'gymnasium', which is not installed: "
        'pip install "envharness[gymnasium]"'
    )
    with pytest.raises(ConfigurationError, match=r"my game needs .*\[pettingzoo\]"):
        require("not_a_package_anywhere", "pettingzoo", needed_by="my game")


def test_an_instance_or_a_factory_runs_like_an_id(store_path: Path) -> None:
    made = gym.make("FrozenLake-v1", is_slippery=False)
    for environment, name in [
        (GymnasiumEnvironment(made), "gymnasium:FrozenLake-v1"),
        (
            GymnasiumEnvironment(lambda: FrozenLakeEnv(is_slippery=False), max_episode_steps=3),
            "gymnasium:tests.adapters.test_gymnasium:"
            "test_an_instance_or_a_factory_runs_like_an_id.<locals>.<lambda>",
        ),
    ]:
        assert environment.spec.name == name
        harness = EnvironmentHarness(store_path, environment=environment, agents={"w": Scripted})
        session = harness.run(Scenario(id="made", input={"seed": 1}), turns=20)
        assert session.status == "completed"
    assert session.reason == "the environment truncated the episode at turn 3"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"frames_every": 0}, "frames_every must be a positive number of steps or None"),
        ((), {"max_episode_steps": -1}, "max_episode_steps must be a positive integer"),
        ((), {"invalid_actions": "skip"}, "invalid_actions must be 'block' or 'fail'"),
        ((), {"frames_every": 2, "render_mode": "ansi"}, "frames_every needs gymnasium:Taxi-v4"),
        ((), {"not_an_argument": 1}, r"gymnasium.make\('Taxi-v4'\) failed: TypeError"),
    ],
)
def test_bad_arguments_say_what_to_fix(args: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        GymnasiumEnvironment("Taxi-v4", *args, **kwargs)


def test_objects_that_are_not_environments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"takes an environment id, a gymnasium\.Env"):
        GymnasiumEnvironment(42)
    with pytest.raises(ConfigurationError, match=r"returned int, not a gymnasium\.Env"):
        GymnasiumEnvironment(lambda: 42)
    with pytest.raises(ConfigurationError, match="apply to an environment id only"):
        GymnasiumEnvironment(gym.make("Taxi-v4"), render_mode="ansi")


class SequenceActions(gym.Env[int, Any]):
    observation_space = spaces.Discrete(2)
    action_space = spaces.Sequence(spaces.Discrete(2))


def test_an_action_space_without_a_json_form_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"action space Sequence\(Discrete\(2\)"):
        GymnasiumEnvironment(SequenceActions)


def test_two_participants_fail_the_session_naming_why(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=frozen_lake(), agents={"a": Scripted, "b": Scripted}
    )
    session = harness.run(Scenario(id="two", input={}), turns=1)
    assert session.status == "failed"
    assert "single-agent environment: give exactly one participant, not 2 (a, b)" in str(
        session.reason
    )


# -- frames ----------------------------------------------------------------------------------------


def decoded_png(data: bytes) -> tuple[int, int, int, bytes]:
    """Width, height, colour type and the raw rows of a PNG written by ``png``."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks: dict[bytes, bytes] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = body
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8
    return width, height, colour, zlib.decompress(chunks[b"IDAT"])


def test_a_frame_is_a_valid_png() -> None:
    np = pytest.importorskip("numpy")
    frame = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    width, height, colour, raw = decoded_png(png(frame))
    assert (width, height, colour) == (3, 2, 2)
    assert raw == b"\x00" + frame[0].tobytes() + b"\x00" + frame[1].tobytes()
    assert decoded_png(png(np.zeros((2, 2), dtype=np.uint8)))[2] == 0
    with pytest.raises(ValueError, match="uint8"):
        png(np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="height x width x 3"):
        png(np.zeros((2, 2, 5), dtype=np.uint8))


def test_frames_are_recorded_every_n_steps_and_at_the_end(store_path: Path) -> None:
    lake = frozen_lake(frames_every=4)
    harness = EnvironmentHarness(store_path, environment=lake, agents={"walker": Scripted})
    session = harness.run(Scenario(id="frames", input={"seed": 7}), turns=10)
    artifacts = by_turn(records(harness, session.id), Artifact)
    assert {turn: a.name for turn, a in artifacts.items()} == {
        4: "frame-000004.png",
        6: "frame-000006.png",
    }
    data = (store_path / "artifacts").rglob(artifacts[6].sha256)
    width, height, colour, _ = decoded_png(next(data).read_bytes())
    assert (width, height, colour) == (256, 256, 2)


def test_a_sessions_live_environment_is_closed_when_the_session_ends(store_path: Path) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=2)
    copies: list[GymnasiumEnvironment] = []

    def copy() -> GymnasiumEnvironment:
        copies.append(taxi())
        return copies[-1]

    harness = EnvironmentHarness(store_path, environment=copy, agents={"driver": Scripted})
    session = harness.run(Scenario(id="closed", input={"seed": 3}), turns=5)
    assert session.status == "completed", session.reason
    played = copies[-1]
    assert played._env is None, "the session's live environment outlived it"
    assert played.replayer.live is not None  # a fresh replayer: the copy can still rebuild
