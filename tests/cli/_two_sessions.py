"""Two long sessions run at once by one harness, in a process of their own.

    python -m tests.cli._two_sessions STORE

``envharness stop`` / ``pause`` from another process reach each of them; when both have ended,
this prints each one's id and status as ``ID STATUS`` lines and exits 0.
"""

from __future__ import annotations

import sys

import anyio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from tests.cli.agents import NappingAgent

TURNS = 100_000


async def main(store: str) -> None:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": NappingAgent}
    )
    ended: list[str] = []

    async def one(start: int) -> None:
        scenario = Scenario(id=f"s{start}", input=SyntheticScenarioInput(starting_total=start))
        session = await harness.run(scenario, turns=TURNS)
        ended.append(f"{session.id} {session.status}")

    async with harness, anyio.create_task_group() as group:
        for start in (0, 1):
            group.start_soon(one, start)
    print("\n".join(sorted(ended)))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
