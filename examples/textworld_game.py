"""A TextWorld game, unchanged, played by a small scripted agent (docs/environments.md).

The example makes its own small game with TextWorld's generator (what ``tw-make custom
--world-size 2 --nb-objects 3 --quest-length 2 --seed 1`` makes), or plays the game file it is
given. The agent follows the game's walkthrough, checking each step against the commands the game
accepts now (every observation lists them); off the walkthrough, it picks the first admissible
command. Each observation's text view is the game's own text; the score is the game's. Then a
branch from turn 1 replays that turn on a fresh game and plays on to the same end.

python examples/textworld_game.py [STORE] [GAME.z8]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from envharness import EnvironmentHarness, Scenario
from envharness.adapters.textworld import TextWorldEnvironment
from envharness.records import ActionExecuted, Score

try:
    import textworld
    import textworld.generator
except ImportError:
    sys.exit('textworld_game.py needs textworld: pip install "envharness[textworld]"')


def make_game(folder: Path) -> Path:
    """A two-room game with a two-step quest (the same one every time: seed 1)."""
    options = textworld.GameOptions()
    options.seeds = 1
    options.nb_rooms = 2
    options.nb_objects = 3
    options.quest_length = 2
    options.path = str(folder / "tiny.z8")
    options.force_recompile = True
    return Path(textworld.generator.compile_game(textworld.generator.make_game(options), options))


def walkthrough_of(game: Path) -> list[str]:
    """The winning commands tw-make stores with a game (in the .json beside it)."""
    commands: list[str] = textworld.Game.load(str(game.with_suffix(".json"))).metadata.get(
        "walkthrough", []
    )
    return commands


def guide(walkthrough: list[str]) -> type[Any]:
    class Guide:
        """Follow the walkthrough while the game accepts its next command."""

        implementation = "walkthrough-guide@1"
        runs_inline = True  # pure computation: no worker thread needed

        def __init__(self) -> None:
            self.plan = list(walkthrough)

        def act(self, observation: Any) -> dict[str, str]:
            admissible = observation["admissible_commands"]
            if self.plan and self.plan[0] in admissible:
                return {"command": self.plan.pop(0)}
            return {"command": admissible[0] if admissible else "look"}

    return Guide


def main(store: str = ".local/textworld-game", game_file: str | None = None) -> None:
    games = Path(store).resolve().parent / "textworld-games"
    games.mkdir(parents=True, exist_ok=True)
    game = Path(game_file) if game_file else make_game(games)
    harness = EnvironmentHarness(
        store,
        environment=TextWorldEnvironment(game, max_moves=50),
        agents={"hero": guide(walkthrough_of(game))},
        checkpoint_every=1,
    )
    session = harness.run(Scenario(id="tiny", input={}), turns=50)
    records = list(harness.records(session.id))
    [score] = [r.payload for r in records if isinstance(r.payload, Score)]
    print(session.id, session.status, f"({session.reason})", f"score {score.metrics}")
    last = [r.payload for r in records if isinstance(r.payload, ActionExecuted)][-1]
    print(
        f"the game's answer to {last.action['command']!r}:",
        " ".join(last.outcome["feedback"].split()),
    )

    # A branch from turn 1 replays that turn on a fresh game, then plays on by itself.
    checkpoint = next(c for c in harness.checkpoints(session) if c.turn == 1)
    branch = harness.branch(checkpoint, intervention={}, reason="play it again from turn 1")
    branch = harness.continue_(branch, turns=50)
    same = not harness.compare(session.id, branch.id).differences
    print(branch.id, branch.status, "same as the original:", same)
    print(f"inspect them: envharness --store {store} show {session.id}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
