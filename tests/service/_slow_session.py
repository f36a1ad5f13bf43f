"""A session that runs slowly in a process of its own, for the browser test's live timeline.

    python -m tests.service._slow_session STORE

Two synthetic participants each take :data:`TURN_SECONDS` per action, so a turn commits about
every :data:`TURN_SECONDS`, for up to :data:`TURNS` turns. Ctrl-C (SIGINT) stops it the normal
way: the session records ``stopped`` and the process exits 0.
"""

from __future__ import annotations

import sys
import time

from envharness import EnvironmentHarness, Scenario
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticObservation,
    SyntheticScenarioInput,
)

TURN_SECONDS = 0.3
TURNS = 1000


class SlowAgent(SyntheticAgent):
    implementation = "slow-synthetic-agent@1"
    runs_inline = False  # it sleeps: the harness runs it in a worker thread

    def act(self, observation: SyntheticObservation) -> dict[str, int]:
        time.sleep(TURN_SECONDS)
        return super().act(observation)


def main(store: str) -> int:
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SlowAgent, "bob": SlowAgent}
    )
    scenario = Scenario(id="slow", input=SyntheticScenarioInput(starting_total=0, target=None))
    try:
        harness.run(scenario, turns=TURNS)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
