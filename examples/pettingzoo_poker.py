"""PettingZoo's texas hold'em, unchanged: a Python player against a Node.js one.

Only the player to act is asked. Each sees its own hand and the board, never the other's
hand. A move the action mask forbids is blocked, naming the legal ones. Rewards and scores
are per player. When one player's move ends the hand, the other hears its result as its own
outcome. The Node.js player (agents/node/poker_agent.mjs) is a CommandAgent speaking the
JSON-lines protocol; it logs the outcomes it hears, and they end up in the evidence.

python examples/pettingzoo_poker.py [STORE]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from envharness import CommandAgent, EnvironmentHarness, Scenario
from envharness.adapters.pettingzoo import PettingZooEnvironment
from envharness.records import Log, ParticipantOutcome, Score

NODE_AGENT = Path(__file__).resolve().parent.parent / "agents" / "node" / "poker_agent.mjs"
CALL, RAISE, FOLD, CHECK = range(4)


class CautiousPlayer:
    """Checks when it may, calls when it must, raises only on a pair it can see."""

    implementation = "cautious-player@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, int]:
        legal = observation["legal_actions"]
        ranks = [i % 13 for i, seen in enumerate(observation["observation"][:52]) if seen == 1]
        pair = len(set(ranks)) < len(ranks)
        for wanted in (RAISE, CALL) if pair else (CHECK, CALL):
            if wanted in legal:
                return {"action": wanted}
        return {"action": legal[0]}


def node_player() -> Any:
    """The Node.js player's factory: a CommandAgent starts a fresh process for each session."""
    if shutil.which("node") is None:
        print("node is not installed: player_1 plays the Python policy instead", file=sys.stderr)
        return CautiousPlayer
    return CommandAgent(["node", str(NODE_AGENT)], implementation="poker-agent-node@1")


def main(store: str = ".local/pettingzoo-poker") -> None:
    harness = EnvironmentHarness(
        store,
        environment=PettingZooEnvironment("pettingzoo.classic.texas_holdem_v4"),
        agents={"player_0": CautiousPlayer, "player_1": node_player()},
    )
    for seed in (1, 2, 3):
        session = harness.run(Scenario(id=f"hand-{seed}", input={"seed": seed}), turns=100)
        found = list(harness.records(session.id))
        [score] = [r.payload for r in found if isinstance(r.payload, Score)]
        returns = {name: metrics["return"] for name, metrics in score.per_participant.items()}
        print(session.id, session.status, f"after {session.turns_completed} moves:", returns)
        for record in found:
            if isinstance(record.payload, ParticipantOutcome):
                print(f"  {record.participant} did not make the last move; it was told", end=" ")
                print(record.payload.outcome)
            elif isinstance(record.payload, Log) and "ended it" in record.payload.message:
                print(f"  {record.participant} logged: {record.payload.message}")
    print(f"inspect them: envharness --store {store} show {session.id}")


if __name__ == "__main__":
    try:
        import pettingzoo  # noqa: F401
        import rlcard  # noqa: F401  (texas hold'em's rules)
    except ImportError as missing:
        sys.exit(f'pettingzoo_poker.py needs {missing.name}: pip install "envharness[pettingzoo]"')
    main(*sys.argv[1:2])
