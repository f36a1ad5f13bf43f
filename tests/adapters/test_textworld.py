"""TextWorldEnvironment on a real game made by TextWorld's generator in this test (offline):
text observations, admissible commands, score, and the replay that rebuilds a game."""

from __future__ import annotations

import sys
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import msgspec
import pytest

from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.adapters.replay import ReplayMismatchError
from envharness.adapters.textworld import (
    TextWorldCommand,
    TextWorldEnvironment,
    TextWorldInput,
    TextWorldObservation,
    TextWorldState,
)
from envharness.records import (
    ActionBlocked,
    ActionExecuted,
    Observation,
    Outcome,
    Score,
)

textworld = pytest.importorskip("textworld")

pytestmark = [
    pytest.mark.anyio,
    # TextWorld silences this warning of its z-machine on import; the suite's "error" filter,
    # set again for every test, would undo that.
    pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning"),
]

START = Scenario(id="game", input={})


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small game, made once for the module (what ``tw-make custom --world-size 2
    --nb-objects 3 --quest-length 2 --seed 1`` makes, without starting another interpreter)."""
    options = textworld.GameOptions()
    options.seeds = 1
    options.nb_rooms = 2
    options.nb_objects = 3
    options.quest_length = 2
    options.path = str(tmp_path_factory.mktemp("textworld") / "game.z8")
    options.force_recompile = True
    made = textworld.generator.make_game(options)
    return Path(textworld.generator.compile_game(made, options))


@pytest.fixture(scope="module")
def walkthrough(game: Path) -> list[str]:
    commands: list[str] = textworld.Game.load(str(game.with_suffix(".json"))).metadata[
        "walkthrough"
    ]
    assert commands
    return commands


class Player:
    """Types one command the game does not know, then follows the walkthrough."""

    implementation = "walkthrough-player@1"
    commands: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self._next = iter(["dance wildly", *self.commands])

    def act(self, observation: Any) -> dict[str, str]:
        return {"command": next(self._next, "look")}


def player(commands: list[str]) -> type[Player]:
    return type("WalkthroughPlayer", (Player,), {"commands": commands})


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Any]:
    return [record async for record in harness.records(session_id)]


def payloads(records: list[Any], kind: type[Any]) -> list[Any]:
    return [r.payload for r in records if isinstance(r.payload, kind)]


async def test_the_walkthrough_wins_the_game_and_a_branch_replays_it(
    store_path: Path, game: Path, walkthrough: list[str]
) -> None:
    environment = TextWorldEnvironment(game)
    assert environment.spec.name == "textworld:game.z8"
    assert environment.spec.reference().action_schema is not None
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=environment,
        agents={"hero": player(walkthrough)},
        checkpoint_every=1,
    )
    session = await harness.run(START, turns=20)
    assert session.status == "completed", session.reason
    assert session.turns_completed == len(walkthrough) + 1
    records = await records_of(harness, session.id)

    # The unknown command was blocked, naming what the game accepts now.
    [blocked] = payloads(records, ActionBlocked)
    assert blocked.by == "environment"
    assert blocked.reason.startswith("'dance wildly' is not a command the game accepts now")
    first = payloads(records, Observation)[0]
    assert first.observation["admissible_commands"]
    assert walkthrough[0] in first.observation["admissible_commands"]
    assert first.text == first.observation["feedback"]  # the game's own text

    executed = payloads(records, ActionExecuted)
    assert [e.action["command"] for e in executed] == walkthrough
    [score] = payloads(records, Score)
    assert score.passed is True
    assert score.metrics["score"] == score.metrics["max_score"] > 0
    assert sum(e.reward for e in executed) == score.metrics["score"]
    assert payloads(records, Outcome)[-1].done

    # A branch from turn 2 replays the game on a fresh copy, then plays on to the same end.
    checkpoint = next(c for c in await harness.checkpoints(session.id) if c.turn == 2)
    branch = await harness.branch(checkpoint, intervention={}, reason="play it again")
    finished = await harness.continue_(branch.id, turns=20)
    assert finished.status == "completed", finished.reason
    [again] = payloads(await records_of(harness, branch.id), Score)
    assert again.metrics == score.metrics
    with pytest.raises(ConfigurationError, match="takes no intervention but"):
        await harness.branch(checkpoint, intervention={"teleport": "kitchen"})
    assert (await harness.verify()).ok


async def test_unchecked_commands_reach_the_parser_and_max_moves_truncates(
    store_path: Path, game: Path
) -> None:
    environment = TextWorldEnvironment(game, check_commands=False, max_moves=1)
    harness = AsyncEnvironmentHarness(
        store_path, environment=environment, agents={"hero": player([])}
    )
    session = await harness.run(START, turns=5)
    assert session.reason == "the environment truncated the episode at turn 1"
    records = await records_of(harness, session.id)
    [executed] = payloads(records, ActionExecuted)
    assert "not a verb I recognise" in executed.outcome["feedback"]
    assert executed.reward == 0.0
    assert payloads(records, Outcome)[-1].truncated


async def test_a_command_the_game_refuses_fails_the_session_when_asked_to(
    store_path: Path, game: Path
) -> None:
    environment = TextWorldEnvironment(game, invalid_actions="fail")
    harness = AsyncEnvironmentHarness(
        store_path, environment=environment, agents={"hero": player([])}
    )
    session = await harness.run(START, turns=5)
    assert session.status == "failed"
    assert "'dance wildly' is not a command the game accepts now" in (session.reason or "")


async def test_a_state_the_game_does_not_reproduce_is_refused(
    game: Path, walkthrough: list[str]
) -> None:
    played = TextWorldEnvironment(game)()
    roster = {"hero": "player"}
    async with played.lifespan():
        state = await played.initialize(TextWorldInput(), Random(0), roster)
        command = TextWorldCommand(command=walkthrough[0])
        assert await played.check_action(state, "hero", command) is None
        state = (await played.resolve(state, {"hero": command})).state
        assert played.replayer.rebuilt == 0
    assert played._env is None  # closed with its lifespan

    # A fresh copy rebuilds the game from the recorded commands, checking every step.
    fresh = played()
    restored = msgspec.convert(msgspec.to_builtins(state), TextWorldState)
    async with fresh.lifespan():
        seen = await fresh.observe(restored, "hero")
        assert seen["moves"] == 1
        assert msgspec.convert(seen, TextWorldObservation).moves == 1
        assert (fresh.replayer.rebuilt, fresh.replayer.replayed) == (1, 1)
        wrong = msgspec.structs.replace(
            restored.replay, checks=restored.replay.checks[:-8] + "00000000"
        )
        with pytest.raises(ReplayMismatchError, match="did not reproduce turn 1 of 1") as caught:
            await fresh.observe(msgspec.structs.replace(restored, replay=wrong), "hero")
        assert caught.value.turn == 1


async def test_a_second_player_is_refused(game: Path) -> None:
    environment = TextWorldEnvironment(game)()
    with pytest.raises(ValueError, match="a TextWorld game has one player"):
        await environment.initialize(TextWorldInput(), Random(0), {"a": "player", "b": "player"})


def test_bad_game_files_and_options_are_refused(game: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no game file at .*missing\.z8.*tw-make"):
        TextWorldEnvironment(tmp_path / "missing.z8")
    lone = tmp_path / "lone.z8"
    lone.write_bytes(game.read_bytes())
    with pytest.raises(ConfigurationError, match=r"has no lone\.json beside it"):
        TextWorldEnvironment(lone)
    with pytest.raises(ConfigurationError, match="max_moves must be a positive number"):
        TextWorldEnvironment(game, max_moves=0)


def test_a_missing_textworld_package_names_the_extra(
    game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(ConfigurationError, match=r'pip install "envharness\[textworld\]"'):
        TextWorldEnvironment(game)


async def test_hooks_see_the_admissible_commands_and_the_games_end(
    store_path: Path, game: Path, walkthrough: list[str]
) -> None:
    from envharness import HookContext, Hooks, Rewrite

    seen: list[tuple[Any, Any, Any]] = []

    def steer(ctx: HookContext, notebook: dict[str, Any]) -> Any:
        seen.append((ctx.state, ctx.predicates, ctx.admissible))
        if ctx.action not in (ctx.admissible or []):
            return Rewrite(action={"command": walkthrough[0]}, reason="not a command it accepts")
        return None

    harness = AsyncEnvironmentHarness(
        store_path,
        environment=TextWorldEnvironment(game),
        agents={"hero": player(walkthrough)},
        hooks=Hooks("steer@1", on_before_action=steer),
    )
    session = await harness.run(START, turns=1)
    assert session.status == "completed", session.reason
    state, predicates, admissible = seen[0]
    assert state == {"score": 0, "max_score": state["max_score"], "moves": 0}
    assert predicates == {"won": False, "lost": False}
    assert {"command": walkthrough[0]} in admissible
    [executed] = payloads(await records_of(harness, session.id), ActionExecuted)
    assert executed.action == {"command": walkthrough[0]}  # the unknown command was steered
