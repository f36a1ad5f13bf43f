"""The README's first example: one agent, five turns, evidence in .local/my-environment.

python examples/first_run.py [STORE]
"""

from __future__ import annotations

import sys
from typing import Any

from envharness import EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput


class IncrementAgent:
    implementation = "increment-agent@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1}


def main(store: str = ".local/my-environment") -> None:
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": IncrementAgent}
    )
    session = harness.run(
        Scenario(id="first-run", input=SyntheticScenarioInput(starting_total=0)), turns=5
    )
    print(session.id, session.status)
    print(f"inspect it: envharness --store {store} show {session.id}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
