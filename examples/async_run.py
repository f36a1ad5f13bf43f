"""The async harness with an async agent, under asyncio and then trio.

python examples/async_run.py [STORE]
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import anyio.lowlevel

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput


class PoliteAgent:
    """An async agent: a real one would await its model client here."""

    implementation = "polite-agent@1"

    async def act(self, observation: Any) -> dict[str, int]:
        await anyio.lowlevel.checkpoint()
        return {"value": 1 if observation.total < 3 else 0}


async def main(store: str) -> None:
    harness = AsyncEnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"alice": PoliteAgent, "bob": SyntheticAgent},
    )
    scenario = Scenario(id="two-agents", input=SyntheticScenarioInput(starting_total=0))
    session = await harness.run(scenario, turns=4)
    print(session.id, session.status)
    report = await harness.verify()
    print(f"verified {report.sessions} sessions, {report.records} records: ok={report.ok}")


if __name__ == "__main__":
    try:
        import trio  # noqa: F401  (the second backend; envharness itself does not need it)
    except ImportError:
        sys.exit("async_run.py runs on asyncio and on trio, which is missing: pip install trio")
    store = sys.argv[1] if len(sys.argv) > 1 else ".local/async-example"
    anyio.run(main, store)
    anyio.run(main, store, backend="trio")
