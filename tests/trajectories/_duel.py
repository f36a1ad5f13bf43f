"""A tiny zero-sum game for per-participant rewards and truncation, played through the harness.

alice and bob move in turn (only the player to move is asked). After ``moves`` moves the game
is decided: the winner's chips are +1 and the loser's -1 (``per_participant``), and the last
step rewards both — the loser is the player who did not make the last move, so its reward
arrives as its ``outcome.participant``. Every move before that earns the mover 0.25. With
``limit`` the environment cuts the game short (a time limit: truncated, chips 0 each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from random import Random
from typing import Any, Literal

import msgspec

from envharness import EnvironmentSpec, Resolution, Scenario
from envharness.contracts.environment import ScoreReport

PLAYERS = ("alice", "bob")
STEP = 0.25


class Table(msgspec.Struct, frozen=True):
    to_move: str = "alice"
    moves: int = 0
    over: bool = False


class Move(msgspec.Struct, frozen=True):
    move: int


class DuelInput(msgspec.Struct, frozen=True):
    moves: int = 3
    winner: Literal["alice", "bob"] = "alice"
    limit: int | None = None
    """Moves after which the environment cuts the game short (a time limit)."""
    shared_only: bool = False
    """Score only shared metrics (no ``per_participant``)."""
    missing: str | None = None
    """A participant left out of ``per_participant``'s ``chips`` (a broken scorer)."""
    null: str | None = None
    """A participant whose chips and final step reward are NaN (recorded as null)."""


class Duel:
    spec = EnvironmentSpec(
        name="duel",
        version="1",
        input_type=DuelInput,
        action_type=Move,
        roles=("player",),
        turn_order="environment",
        state_type=Table,
        scoring_version="duel-score@1",
    )

    def __init__(self) -> None:
        self.input = DuelInput()

    def initialize(self, input: DuelInput, rng: Random, roster: Mapping[str, str]) -> Table:
        self.input = input
        return Table()

    def acting(self, state: Table) -> Sequence[str]:
        return [state.to_move]

    def observe(self, state: Table, participant: str) -> dict[str, Any]:
        return {"moves": state.moves, "you": participant}

    def resolve(self, state: Table, actions: Mapping[str, Move]) -> Resolution:
        ((mover, _),) = actions.items()
        other = "bob" if mover == "alice" else "alice"
        after = Table(to_move=other, moves=state.moves + 1)
        game = self.input
        if after.moves >= game.moves:
            loser = "bob" if game.winner == "alice" else "alice"
            rewards = {game.winner: 1.0, loser: -1.0}
            if game.null is not None:
                rewards[game.null] = float("nan")
            return Resolution(
                state=msgspec.structs.replace(after, over=True),
                outcomes={game.winner: "won", loser: "lost"},
                rewards=rewards,
                done=True,
            )
        cut = game.limit is not None and after.moves >= game.limit
        return Resolution(state=after, rewards={mover: STEP}, truncated=cut)

    def intervene(self, state: Table, intervention: Mapping[str, Any]) -> Table:
        return state

    def score(self, state: Table, scenario: Any) -> ScoreReport:
        game = self.input
        metrics = {"moves": float(state.moves)}
        if game.shared_only:
            return ScoreReport(metrics=metrics, passed=state.over)
        chips = {p: (1.0 if p == game.winner else -1.0) if state.over else 0.0 for p in PLAYERS}
        if game.null is not None:
            chips[game.null] = float("nan")
        own = {p: {"chips": value} for p, value in chips.items() if p != game.missing}
        for player in PLAYERS:
            own.setdefault(player, {"moves_made": float(state.moves)})
        return ScoreReport(metrics=metrics, per_participant=own)


class Player:
    implementation = "player@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, int]:
        return {"move": 1}


AGENTS = {"alice": Player, "bob": Player}


def duel(id: str, **input: Any) -> Scenario[DuelInput]:
    return Scenario(id=id, input=DuelInput(**input))
