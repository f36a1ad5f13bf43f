"""An environment with an operation, interleaved with turns through the SessionRunner seam.

A "weather service" operation (standing in for a simulator or an engine you call) is asked
before every turn how much the shared total drifts; the drift changes the state, and each call
is recorded as an ``operation.receipt``. Two scenarios x two trials, with metrics and findings.

    python examples/custom_environment_experiment.py [STORE]
"""

from __future__ import annotations

import random
import sys
from typing import Any, ClassVar

import msgspec

from envharness import EnvironmentHarness, Scenario
from envharness.advanced import OperationResult, SessionRunner
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput


class WeatherService:
    """The client of an outside system would live here; only name, version, config are evidence."""

    name = "weather"
    version = "2"
    config: ClassVar[dict[str, Any]] = {"region": "north", "volatility": 2}

    def __init__(self) -> None:
        self._client = random.Random(7)  # stands in for a connection to a real service

    def run(self, state: Any, request: dict[str, Any]) -> OperationResult:
        drift = self._client.randint(-self.config["volatility"], self.config["volatility"])
        changed = msgspec.structs.replace(state, total=state.total + drift)
        return OperationResult(
            result={"drift": drift, "turn": request["turn"]}, state=changed, changed_state=True
        )


class WeatherRunner(SessionRunner):
    async def before_turn(self, turn: int, state: Any) -> Any:
        _, state = await self.operate("weather", {"turn": turn}, state)
        return state


def main(store: str = ".local/custom-environment") -> None:
    harness = EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"agent": SyntheticAgent},
        operations=[WeatherService()],
        runner=WeatherRunner,
    )
    scenarios = [
        Scenario(id="calm", input=SyntheticScenarioInput(starting_total=0, target=3)),
        Scenario(id="stormy", input=SyntheticScenarioInput(starting_total=-6, target=0)),
    ]
    result = harness.experiment("weather sweep", scenarios, trials=2, seed=11, turns=6).run()
    for session in result.sessions:
        print(session.scenario_id, session.trial, session.result.id, session.result.status)
    print(f"experiment {result.id}: {result.completed} of {result.total} completed")
    print(f"view it: envharness --store {store} serve --open")


if __name__ == "__main__":
    main(*sys.argv[1:2])
