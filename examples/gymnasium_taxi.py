"""Gymnasium's Taxi-v4, unchanged, driven by a small scripted agent (docs/environments.md).

The agent decodes Taxi's observation (one integer: taxi row and column, where the passenger is,
where it goes), finds the shortest way round the walls, picks the passenger up and drops it
off. Each session's seed comes from its scenario; the episode's return is the score; the text
view is Taxi's own ``ansi`` render. Then a branch from turn 3 replays the first three steps
and drives the rest again, landing exactly where the original did.

python examples/gymnasium_taxi.py [STORE]
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from envharness import EnvironmentHarness, Scenario
from envharness.adapters.gymnasium import GymnasiumEnvironment
from envharness.records import Score

SOUTH, NORTH, EAST, WEST, PICKUP, DROPOFF = range(6)
MAP = [
    "+---------+",
    "|R: | : :G|",
    "| : | : : |",
    "| : : : : |",
    "| | : | : |",
    "|Y| : |B: |",
    "+---------+",
]
STOPS = [(0, 0), (0, 4), (4, 0), (4, 3)]
"""R, G, Y and B; passenger location 4 means "in the taxi"."""


def decode(observation: int) -> tuple[int, int, int, int]:
    """Taxi's observation: ((row * 5 + column) * 5 + passenger) * 4 + destination."""
    observation, destination = divmod(observation, 4)
    observation, passenger = divmod(observation, 5)
    row, column = divmod(observation, 5)
    return row, column, passenger, destination


def neighbours(row: int, column: int) -> list[tuple[int, tuple[int, int]]]:
    """The moves that leave (row, column), with where they lead: walls are '|' between cells."""
    found = []
    if row < 4:
        found.append((SOUTH, (row + 1, column)))
    if row > 0:
        found.append((NORTH, (row - 1, column)))
    if column < 4 and MAP[row + 1][2 * column + 2] == ":":
        found.append((EAST, (row, column + 1)))
    if column > 0 and MAP[row + 1][2 * column] == ":":
        found.append((WEST, (row, column - 1)))
    return found


def first_move(start: tuple[int, int], goal: tuple[int, int]) -> int:
    """The first move of a shortest way from ``start`` to ``goal`` (breadth-first)."""
    came: dict[tuple[int, int], int] = {start: -1}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for move, after in neighbours(*cell):
            if after not in came:
                came[after] = came[cell] if came[cell] != -1 else move
                queue.append(after)
    return came[goal]


class TaxiDriver:
    """Drive to the passenger, pick up, drive to the destination, drop off."""

    implementation = "taxi-driver@1"
    runs_inline = True  # pure computation: no worker thread needed

    def act(self, observation: Any) -> dict[str, int]:
        row, column, passenger, destination = decode(observation["observation"])
        if passenger < 4:  # still waiting somewhere
            goal, arrived = STOPS[passenger], PICKUP
        else:
            goal, arrived = STOPS[destination], DROPOFF
        if (row, column) == goal:
            return {"action": arrived}
        return {"action": first_move((row, column), goal)}


def main(store: str = ".local/gymnasium-taxi") -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=60)
    harness = EnvironmentHarness(
        store, environment=taxi, agents={"driver": TaxiDriver}, checkpoint_every=3
    )
    for seed in (7, 8, 9):
        session = harness.run(Scenario(id=f"seed-{seed}", input={"seed": seed}), turns=200)
        [score] = [r.payload for r in harness.records(session.id) if isinstance(r.payload, Score)]
        print(session.id, session.status, f"({session.reason})", f"return {score.metrics}")

    # A branch from turn 3 replays three steps on a fresh Taxi, then drives on by itself.
    checkpoint = next(c for c in harness.checkpoints(session) if c.turn == 3)
    branch = harness.branch(checkpoint, intervention={}, reason="drive it again from turn 3")
    branch = harness.continue_(branch, turns=200)
    same = not harness.compare(session.id, branch.id).differences
    print(branch.id, branch.status, "same as the original:", same)
    print(f"inspect them: envharness --store {store} show {session.id}")


if __name__ == "__main__":
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        sys.exit('gymnasium_taxi.py needs gymnasium: pip install "envharness[gymnasium]"')
    main(*sys.argv[1:2])
