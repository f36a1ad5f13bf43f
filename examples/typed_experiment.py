"""The README's synthetic sweep: two typed scenarios x two trials, seed 42.

It prints the experiment id, every session with its scenario and trial labels and the seed
derived from (42, scenario id, trial) — the same seeds on every run and machine — and where the
evidence is.

python examples/typed_experiment.py [STORE]
"""

from __future__ import annotations

import shlex
import sys

from envharness import EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput

SCENARIOS = [
    Scenario(id="negative-start", input=SyntheticScenarioInput(starting_total=-3)),
    Scenario(id="positive-start", input=SyntheticScenarioInput(starting_total=3)),
]


def main(store: str = ".local/experiment") -> None:
    harness = EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"agent": SyntheticAgent},
        max_concurrency=4,
    )
    result = harness.experiment("synthetic sweep", SCENARIOS, trials=2, seed=42, turns=5).run()

    print(
        f"experiment {result.id}  {result.name!r}: {result.completed} of {result.total} completed"
    )
    for session in result.sessions:
        print(
            f"  {session.result.id}  scenario={session.scenario_id}  trial={session.trial}  "
            f"seed={session.seed}  {session.result.status}"
        )
    print(f"store: {store}")
    print(f"view it: envharness --store {shlex.quote(store)} serve --open")


if __name__ == "__main__":
    main(*sys.argv[1:2])
