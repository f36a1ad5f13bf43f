"""A TextWorld game as an envharness environment, unchanged.

``TextWorldEnvironment("games/tiny.z8")`` takes a game made by ``tw-make`` (the ``.z8`` or
``.ulx`` file, with the ``.json`` that ``tw-make`` writes beside it) and is passed as the
harness's ``environment=``. The harness calls it once per session, and each call gives a copy
that starts its own game.

What a session sees and records:

- **One participant**, in the role ``"player"``; the scenario's input is ``{}``.
- **Observations** are :class:`TextWorldObservation`'s fields, as a dict: the game's latest
  text (``feedback``), the room's ``description``, the ``inventory``, the quest's
  ``objective``, the commands the game accepts now (``admissible_commands``), ``score``,
  ``max_score``, ``moves``, ``won`` and ``lost``. The text view of each observation is the
  game's text itself.
- **Actions** are ``{"command": "open box"}``. With ``check_commands=True`` (the default) a
  command that is not admissible now is blocked, naming the admissible ones (or fails the
  session, with ``invalid_actions="fail"``); with ``False``, any command goes to the game,
  whose parser answers it as a player would see ("That's not a verb I recognise.").
- **Each step** records the score gained as the player's reward and the shared signal
  ``score``; its outcome is ``{"feedback", "score", "reward"}``. The session is done when the
  game is won or lost, and truncated after ``max_moves`` commands when that is set.
- **Score**: ``{"score", "max_score", "moves", "won"}``, passed when the game was won.
- **State** is a :class:`TextWorldState`: the commands played (a
  :class:`~envharness.adapters.replay.Replay`), replayed on a fresh game to rebuild it on
  resume, branch and checkpoint restore, each step's text checked against the record (a branch
  from turn N replays N commands). A branch takes ``intervention={}`` only.

The game is started (which takes most of a second) and stepped in a worker thread, so it never
blocks the event loop, and it is closed when the session ends
(:meth:`TextWorldEnvironment.lifespan`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any, Literal, TypeVar

import anyio
import msgspec

from envharness.adapters._copies import PerSessionCopy
from envharness.adapters._optional import require
from envharness.adapters.replay import Replay
from envharness.contracts.environment import EnvironmentSpec, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.hooks import HookView

__all__ = [
    "ADAPTER_VERSION",
    "TextWorldCommand",
    "TextWorldEnvironment",
    "TextWorldInput",
    "TextWorldObservation",
    "TextWorldState",
]

ADAPTER_VERSION = "1"
"""Part of every spec's version: a change to what this adapter records changes it."""

_T = TypeVar("_T")


class TextWorldInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scenario's input: ``{}`` (a TextWorld game is the same every time it is played)."""


class TextWorldCommand(msgspec.Struct, frozen=True, kw_only=True):
    """An action: one command, as a player would type it."""

    command: str


class TextWorldObservation(msgspec.Struct, frozen=True, kw_only=True):
    """What the player sees after each command (the first, after the game starts)."""

    feedback: str
    description: str
    inventory: str
    objective: str
    admissible_commands: list[str]
    score: int
    max_score: int
    moves: int
    won: bool
    lost: bool


class TextWorldState(msgspec.Struct, frozen=True, kw_only=True):
    """The recorded state: the commands that rebuild the game, and how it stands."""

    replay: Replay
    score: int = 0
    max_score: int = 0
    moves: int = 0
    """Commands sent to the game (turns whose command was blocked sent none)."""
    won: bool = False
    lost: bool = False


@dataclass(frozen=True, slots=True)
class _Blueprint:
    """What every copy of one adapter shares."""

    path: Path
    check_commands: bool
    max_moves: int | None
    spec: EnvironmentSpec

    def make(self) -> Any:
        """Start the game (which takes most of a second: in a worker thread)."""
        textworld = require("textworld", "textworld", needed_by="TextWorldEnvironment")
        infos = textworld.EnvInfos(
            feedback=True,
            description=True,
            inventory=True,
            objective=True,
            admissible_commands=True,
            score=True,
            max_score=True,
            moves=True,
            won=True,
            lost=True,
        )
        return textworld.start(str(self.path), request_infos=infos)


class TextWorldEnvironment(PerSessionCopy[_Blueprint]):
    """A TextWorld game file as an envharness environment (see the module docstring).

    ``path_to_game_file``: a game made by ``tw-make``. ``check_commands``: block (or fail on)
    commands the game does not accept now. ``invalid_actions``: what such a command does,
    ``"block"`` (the default) or ``"fail"``. ``max_moves``: truncate the episode after that
    many commands.
    """

    def __init__(
        self,
        path_to_game_file: str | Path,
        *,
        check_commands: bool = True,
        invalid_actions: Literal["block", "fail"] = "block",
        max_moves: int | None = None,
    ) -> None:
        textworld = require("textworld", "textworld", needed_by="TextWorldEnvironment")
        path = Path(path_to_game_file).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                f"TextWorldEnvironment: no game file at {str(path)!r}; make one with tw-make "
                "(e.g. tw-make tw-simple --rewards dense --goal brief --output games/simple.z8)"
            )
        if not path.with_suffix(".json").is_file():
            raise ConfigurationError(
                f"TextWorldEnvironment: {str(path)!r} has no {path.with_suffix('.json').name} "
                "beside it; tw-make writes both files, and the adapter needs the .json for the "
                "admissible commands, the score and the objective"
            )
        if max_moves is not None and (
            isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 1
        ):
            raise ConfigurationError(
                f"max_moves must be a positive number of commands or None, not {max_moves!r}"
            )
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        spec = EnvironmentSpec(
            name=f"textworld:{path.name}",
            version=f"{ADAPTER_VERSION}+textworld.{textworld.__version__}+game.{digest[:12]}",
            input_type=TextWorldInput,
            action_type=TextWorldCommand,
            observation_type=TextWorldObservation,
            roles=("player",),
            turn_order="simultaneous",
            invalid_actions=invalid_actions,
            scoring_version=f"textworld-score@{ADAPTER_VERSION}",
            state_type=TextWorldState,
        )
        self._bind(_Blueprint(path.resolve(), bool(check_commands), max_moves, spec))

    def _bind(self, blueprint: _Blueprint) -> None:
        super()._bind(blueprint)
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"TextWorldEnvironment({str(self._blueprint.path)!r})"

    # -- the environment contract ----------------------------------------------------------------

    async def initialize(
        self, input: TextWorldInput, rng: Random, roster: Mapping[str, str]
    ) -> TextWorldState:
        if len(roster) != 1:
            raise ValueError(
                f"a TextWorld game has one player; the roster names {len(roster)}: "
                f"{', '.join(roster)}"
            )
        replay, result = await self._run(self._replayer.start, rng.randrange(2**31))
        return TextWorldState(replay=replay, max_score=result["max_score"])

    async def observe(self, state: TextWorldState, participant: str) -> dict[str, Any]:
        """A :class:`TextWorldObservation`'s fields, as a plain dict (what agents index)."""
        result: dict[str, Any] = await self._run(self._replayer.result, state.replay)
        return dict(result)

    async def check_action(
        self, state: TextWorldState, participant: str, action: TextWorldCommand
    ) -> str | None:
        if not self._blueprint.check_commands:
            return None
        result = await self._run(self._replayer.result, state.replay)
        admissible: list[str] = result["admissible_commands"]
        if _normal(action.command) in {_normal(command) for command in admissible}:
            return None
        return (
            f"{action.command!r} is not a command the game accepts now; admissible: "
            f"{', '.join(admissible) or '(none)'}"
        )

    async def resolve(
        self, state: TextWorldState, actions: Mapping[str, TextWorldCommand]
    ) -> Resolution:
        if not actions:  # the command was blocked: the game did not move
            skipped = msgspec.structs.replace(state, replay=self._replayer.skip(state.replay))
            return Resolution(state=skipped)
        [(player, action)] = actions.items()
        replay, result = await self._run(self._replayer.advance, state.replay, action.command)
        score = int(result["score"])
        reward = float(score - state.score)
        moves = state.moves + 1
        won, lost = bool(result["won"]), bool(result["lost"])
        done = won or lost
        limit = self._blueprint.max_moves
        after = TextWorldState(
            replay=replay, score=score, max_score=state.max_score, moves=moves, won=won, lost=lost
        )
        return Resolution(
            state=after,
            outcomes={player: {"feedback": result["feedback"], "score": score, "reward": reward}},
            done=done,
            truncated=not done and limit is not None and moves >= limit,
            signals={"score": float(score)},
            rewards={player: reward},
        )

    def intervene(self, state: TextWorldState, intervention: Mapping[str, Any]) -> TextWorldState:
        if intervention:
            raise ValueError(
                f"a TextWorld game takes no intervention but {{}} (got {dict(intervention)!r}): "
                "its state is the commands played, and nothing else can be changed from outside"
            )
        return state

    async def render_text(self, state: TextWorldState, participant: str) -> str:
        result = await self._run(self._replayer.result, state.replay)
        text: str = result["feedback"]
        return text

    def hook_view(self, state: TextWorldState, participant: str) -> HookView:
        """What harness hooks (and the optimizer's engineers) may read: the score so far, the
        game's end as predicates, and the commands it accepts now as the admissible actions.
        ``observe`` has just brought the game to ``state``, so this reads what it holds."""
        result = self._replayer.result(state.replay)
        return HookView(
            state={"score": state.score, "max_score": state.max_score, "moves": state.moves},
            predicates={"won": state.won, "lost": state.lost},
            admissible=[{"command": command} for command in result["admissible_commands"]],
        )

    def score(self, state: TextWorldState, scenario: Scenario[Any]) -> ScoreReport:
        return ScoreReport(
            metrics={
                "score": float(state.score),
                "max_score": float(state.max_score),
                "moves": float(state.moves),
                "won": 1.0 if state.won else 0.0,
            },
            passed=state.won,
        )

    # -- the live game -----------------------------------------------------------------------------

    async def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` in a worker thread, one at a time: starting a game takes most of a
        second, and a rebuild replays every command played."""
        async with self._lock:
            return await anyio.to_thread.run_sync(call, *args)

    def _reset(self, seed: int, setup: Any) -> tuple[Any, dict[str, Any]]:
        """Start the game (once per copy) or restart it; ``seed`` changes nothing in a game
        made by tw-make, which plays the same every time (it is recorded all the same)."""
        game = self._live_env()
        return game, _result(game.reset())

    def _step(self, game: Any, command: str) -> dict[str, Any]:
        state, _, _ = game.step(command)
        return _result(state)


def _result(state: Any) -> dict[str, Any]:
    """What one step produced, as JSON (the replay checks it; observations are made of it)."""
    return {
        "feedback": state.feedback or "",
        "description": state.description or "",
        "inventory": state.inventory or "",
        "objective": state.objective or "",
        "admissible_commands": sorted(state.admissible_commands or ()),
        "score": int(state.score or 0),
        "max_score": int(state.max_score or 0),
        "moves": int(state.moves or 0),
        "won": bool(state.won),
        "lost": bool(state.lost),
    }


def _normal(command: str) -> str:
    """A command as the game's parser reads it: case and spacing do not matter."""
    return " ".join(command.split()).lower()
