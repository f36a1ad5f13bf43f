"""``check_environment``: each check passes on an environment that keeps the contract, fails
with its fix on one that breaks it, and the adapters pass it."""

from __future__ import annotations

import random
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

import msgspec
import pytest

from envharness import ConfigurationError, EnvironmentSpec, Resolution, ScoreReport
from envharness.api.conformance import CHECKS, ConformanceReport, check_environment
from envharness.api.conformance.probe import ProbeAgent, choose_action
from envharness.errors import ScenarioInputError

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
PAIR = {"alice": "player", "bob": "player"}
ONE_BACKEND = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""The checks' own logic is backend-neutral (the good environments run on both): the failing
ones and the adapters run once, to keep the module quick."""


class Deal(msgspec.Struct, frozen=True):
    rounds: int = 3


class Bet(msgspec.Struct, frozen=True):
    chips: int


class Table(msgspec.Struct, frozen=True):
    hands: dict[str, list[int]]
    pot: int
    turn: int
    rounds: int


class Cards:
    """Two players, private hands dealt from the session's rng, a public pot."""

    spec = EnvironmentSpec(
        name="cards",
        version="1",
        input_type=Deal,
        action_type=Bet,
        roles=("player",),
        state_type=Table,
    )
    private_state = ("hands",)

    def initialize(self, input: Deal, rng: Random, roster: Mapping[str, str]) -> Table:
        hands = {name: sorted(rng.sample(range(52), 3)) for name in roster}
        return Table(hands=hands, pot=0, turn=0, rounds=input.rounds)

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        return {"hand": state.hands[participant], "pot": state.pot, "turn": state.turn}

    def resolve(self, state: Table, actions: Mapping[str, Bet]) -> Resolution:
        pot = state.pot + sum(bet.chips for bet in actions.values())
        after = msgspec.structs.replace(state, pot=pot, turn=state.turn + 1)
        outcomes = {name: {"pot": pot} for name in actions}
        return Resolution(state=after, outcomes=outcomes, done=after.turn >= state.rounds)

    def intervene(self, state: Table, intervention: Mapping[str, Any]) -> Table:
        return state

    def score(self, state: Table, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={"pot": float(state.pot)})


class AsyncCards(Cards):
    """The same rules, every method ``async def`` (an environment answering over a pipe)."""

    async def initialize(self, input: Deal, rng: Random, roster: Mapping[str, str]) -> Table:  # type: ignore[override]
        return super().initialize(input, rng, roster)

    async def observe(self, state: Table, participant: str) -> dict[str, Any]:  # type: ignore[override]
        return super().observe(state, participant)

    async def resolve(self, state: Table, actions: Mapping[str, Bet]) -> Resolution:  # type: ignore[override]
        return super().resolve(state, actions)


class Shuffled(Cards):
    """Draws the pot's growth from the global random module: not reproducible."""

    def resolve(self, state: Table, actions: Mapping[str, Bet]) -> Resolution:
        resolved = super().resolve(state, actions)
        return Resolution(
            state=msgspec.structs.replace(resolved.state, pot=random.randrange(10**9)),
            done=resolved.done,
        )


class Forgetful(Cards):
    """Counts turns on the instance and shows the count: a restored session starts at 0."""

    def __init__(self) -> None:
        self.seen = 0

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        return {**super().observe(state, participant), "seen": self.seen}

    def resolve(self, state: Table, actions: Mapping[str, Bet]) -> Resolution:
        self.seen += 1
        return super().resolve(state, actions)


class Peeking(Cards):
    """Shows every player the other's hand, though the hands are declared private."""

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        others = [
            card for name, hand in state.hands.items() if name != participant for card in hand
        ]
        return {**super().observe(state, participant), "glimpse": others[:1]}


class Gossip(Cards):
    """Remembers the last hand it showed and passes it on to the next participant observed."""

    def __init__(self) -> None:
        self.last: list[int] = []

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        shown = {**super().observe(state, participant), "rumour": self.last}
        self.last = state.hands[participant]
        return shown


@dataclass(frozen=True)
class Box:
    count: int


class Untyped:
    """A dataclass state without ``state_type``: restored, it would come back as a dict."""

    spec = EnvironmentSpec(name="untyped", version="1", input_type=dict, action_type=Bet)

    def initialize(self, input: Any, rng: Random, roster: Mapping[str, str]) -> Box:
        return Box(0)

    def observe(self, state: Box, participant: str) -> dict[str, int]:
        return {"count": state.count}

    def resolve(self, state: Box, actions: Mapping[str, Any]) -> Resolution:
        return Resolution(state=Box(state.count + 1))

    def intervene(self, state: Box, intervention: Any) -> Box:
        return state


class Broken(Cards):
    def initialize(self, input: Deal, rng: Random, roster: Mapping[str, str]) -> Table:
        raise RuntimeError("no deck")


class Moody(Cards):
    """A new spec version for every instance."""

    made = 0

    def __init__(self) -> None:
        Moody.made += 1
        self.spec = EnvironmentSpec(
            name="moody", version=str(Moody.made), input_type=Deal, action_type=Bet
        )


SHARED = Cards()


def statuses(report: ConformanceReport) -> dict[str, str]:
    return {result.name: result.status for result in report.results}


def failure(report: ConformanceReport, name: str) -> tuple[str, str]:
    [found] = [r for r in report.results if r.name == name]
    assert found.status == "failed", found
    return found.detail, found.fix


async def test_an_environment_that_keeps_the_contract_passes_every_check() -> None:
    seen: list[str] = []
    report = await check_environment(
        Cards, participants=PAIR, turns=4, on_result=lambda r: seen.append(r.name)
    )

    assert statuses(report) == dict.fromkeys(CHECKS, "passed"), report.results
    assert seen == list(CHECKS)
    assert report.ok
    assert report.environment == "cards@1"
    private = next(r for r in report.results if r.name == "observe-private")
    assert "varying the others' hands" in private.detail
    timed = {timing.method: timing for timing in report.timings}
    assert {"initialize", "observe", "resolve"} <= set(timed)
    assert all(timing.calls > 0 and timing.mean_us >= 0 for timing in timed.values())


async def test_async_environment_methods_are_checked_the_same() -> None:
    report = await check_environment(AsyncCards, participants=PAIR, turns=4)

    assert statuses(report) == dict.fromkeys(CHECKS, "passed"), report.results


@ONE_BACKEND
async def test_randomness_outside_the_sessions_rng_fails_determinism() -> None:
    report = await check_environment(Shuffled, participants=PAIR, turns=4)

    detail, fix = failure(report, "determinism")
    assert (
        "two sessions with seed 0 differ: turn 1, outcome: the state after it differs: " in detail
    )
    assert "state.pot is " in detail
    assert statuses(report)["checkpoint"] == "skipped"
    assert "rng that initialize() receives" in fix


@ONE_BACKEND
async def test_state_kept_on_the_instance_fails_checkpoint() -> None:
    report = await check_environment(Forgetful, participants=PAIR, turns=4)

    assert statuses(report)["determinism"] == "passed"
    detail, fix = failure(report, "checkpoint")
    assert "restored at turn 1, the session recorded something else: turn 2, observation" in detail
    assert "observation.seen is 1 in one and 0 in the other" in detail
    assert "not on the instance" in fix
    # Memory that only resolve() builds up is beyond the observe check's reach (its limit).
    assert statuses(report)["observe-private"] == "passed"


@ONE_BACKEND
async def test_an_observation_read_from_the_instance_fails_observe() -> None:
    class Primed(Forgetful):
        def initialize(self, input: Deal, rng: Random, roster: Mapping[str, str]) -> Table:
            self.seen = 7
            return super().initialize(input, rng, roster)

    report = await check_environment(Primed, participants=PAIR, turns=4)

    detail, _fix = failure(report, "observe-private")
    assert "a fresh instance given the same (restored) state shows 'alice' something else" in detail
    assert "seen is 7 in one and 0 in the other" in detail


@ONE_BACKEND
async def test_a_declared_private_hand_that_leaks_fails() -> None:
    report = await check_environment(Peeking, participants=PAIR, turns=4)

    detail, fix = failure(report, "observe-private")
    assert "'alice''s observation changes when hands.bob (private to 'bob') changes" in detail
    assert "glimpse" in detail
    assert "nothing from another participant's private entries" in fix


@ONE_BACKEND
async def test_an_observation_that_remembers_the_last_one_fails() -> None:
    report = await check_environment(Gossip, participants=PAIR, turns=4)

    detail, _ = failure(report, "observe-private")
    assert "changed after the others were observed" in detail


@ONE_BACKEND
async def test_one_participant_skips_the_privacy_check() -> None:
    report = await check_environment(Cards, turns=4)

    assert report.participants == {"player": "player"}
    assert statuses(report)["observe-private"] == "skipped"


@ONE_BACKEND
async def test_a_typed_state_without_state_type_fails_encoding() -> None:
    report = await check_environment(Untyped, turns=2)

    detail, fix = failure(report, "encoding")
    assert "returned a Box, but spec.state_type is not set" in detail
    assert fix == "declare state_type=Box in the EnvironmentSpec"


@ONE_BACKEND
async def test_an_initialize_that_raises_fails_encoding_and_skips_what_needs_a_session() -> None:
    report = await check_environment(Broken, participants=PAIR, turns=2)

    detail, _ = failure(report, "encoding")
    assert "initialize() raised RuntimeError: no deck" in detail
    found = statuses(report)
    assert (found["determinism"], found["checkpoint"], found["resolve-failure"]) == (
        "skipped",
        "skipped",
        "skipped",
    )
    assert not report.ok


@ONE_BACKEND
async def test_a_spec_that_changes_or_one_shared_instance_fails_the_spec() -> None:
    moody = await check_environment(Moody, turns=2)
    shared = await check_environment(lambda: SHARED, turns=2)

    assert "two instances have different specs" in failure(moody, "spec")[0]
    assert "returned the same instance twice" in failure(shared, "spec")[0]
    assert statuses(shared)["determinism"] == "skipped"  # nothing runs past a failed spec


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        pytest.param(lambda: 42, "returned int 42, which has no `spec` EnvironmentSpec", id="int"),
        pytest.param(Cards(), "pass the class (or a zero-argument factory), not an instance",
                     id="instance"),
        pytest.param(lambda: 1 / 0, "raised ZeroDivisionError", id="raises"),
    ],
)  # fmt: skip
@ONE_BACKEND
async def test_something_that_is_not_an_environment_is_a_setup_error(
    environment: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        await check_environment(environment)
    assert message in str(raised.value)


@ONE_BACKEND
async def test_bad_inputs_and_participants_are_setup_errors() -> None:
    with pytest.raises(ScenarioInputError, match="rounds"):
        await check_environment(Cards, input={"rounds": "three"})
    with pytest.raises(ConfigurationError, match="role 'dealer', which environment 'cards'"):
        await check_environment(Cards, participants={"alice": "dealer"})
    with pytest.raises(ConfigurationError, match="turns must be a positive integer"):
        await check_environment(Cards, turns=0)


def test_the_probe_picks_legal_moves_and_fits_the_schema() -> None:
    rng = Random(1)
    schema = msgspec.json.schema(Bet)

    masked = choose_action(schema, {"action_mask": [0, 0, 1, 0]}, rng)
    listed = choose_action(None, {"observation": {}, "legal_actions": [4, 5]}, rng)
    typed = choose_action(
        {"type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}},
        {"admissible_commands": ["go north", "look"]},
        rng,
    )
    bounded = choose_action(
        {"type": "object", "required": ["n"],
         "properties": {"n": {"type": "integer", "minimum": 3, "exclusiveMaximum": 5}}},
        {}, rng,
    )  # fmt: skip

    assert masked == {"chips": 2}
    assert listed["action"] in (4, 5)
    assert typed["command"] in ("go north", "look")
    assert bounded["n"] in (3, 4)
    assert choose_action(None, "plain text", rng) == {}
    assert ProbeAgent().act({"anything": 1}) == {}


# -- the adapters ----------------------------------------------------------------------------------


@ONE_BACKEND
async def test_a_gymnasium_toy_text_environment_passes() -> None:
    from envharness.adapters.gymnasium import GymnasiumEnvironment

    report = await check_environment(GymnasiumEnvironment("Taxi-v4"), input={"seed": 3}, turns=4)

    assert statuses(report) == {**dict.fromkeys(CHECKS, "passed"), "observe-private": "skipped"}


@ONE_BACKEND
async def test_a_pettingzoo_game_passes() -> None:
    from envharness.adapters.pettingzoo import PettingZooEnvironment

    poker = PettingZooEnvironment("classic.leduc_holdem_v4")
    report = await check_environment(
        poker, participants={"player_0": "player", "player_1": "player"}, turns=4
    )

    assert statuses(report) == dict.fromkeys(CHECKS, "passed"), report.results


@pytest.mark.parametrize(
    ("command", "participants"),
    [
        pytest.param([sys.executable, str(ROOT / "environments" / "python" / "nim.py")],
                     {"a": "", "b": ""}, id="python"),
        pytest.param(["node", str(ROOT / "environments" / "node" / "gridworld.js")], None,
                     id="node", marks=pytest.mark.skipif(shutil.which("node") is None,
                                                         reason="node is not installed")),
    ],
)  # fmt: skip
@ONE_BACKEND
async def test_the_reference_environment_programs_pass(
    command: list[str], participants: dict[str, str] | None
) -> None:
    from envharness.adapters.process import ProcessEnvironment

    program = await ProcessEnvironment.create(command)
    report = await check_environment(program, participants=participants, turns=4)

    assert report.failed == 0, report.results
    assert statuses(report)["checkpoint"] == "passed"
