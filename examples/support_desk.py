"""The optimizer's user story on the support desk (docs/optimizer.md).

A frozen policy refunds before it looks the order up, so every ticket fails. The mining engineer
(offline, no model) reads the recorded failures, proposes hook patches, the optimizer reruns
each over the same tickets and seeds, and accepts the one that fixes them as harness-v1. Then
the accepted patch is loaded the way production code would load it, and run.

python examples/support_desk.py [STORE]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from envharness import EnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.optimizer import (
    ExecutableHarness,
    HarnessOptimizer,
    HarnessPatch,
    LocalSandbox,
    MiningEngineer,
    OptimizationConfig,
)


def main(store: str = ".local/support-desk") -> None:
    harness = EnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    config = OptimizationConfig(candidates=8, iterations=3, turns=8)  # subprocess sandbox
    result = HarnessOptimizer(harness, MiningEngineer(), config=config).optimize(tickets(8))
    print(result.baseline.mean_reward, "->", result.final.mean_reward, result.accepted_version)

    # Load the accepted patch in production: the file is all it takes.
    document = json.loads((Path(result.directory) / "accepted_patch.json").read_text())
    patch = HarnessPatch.from_dict(document["patch"])
    hooks = ExecutableHarness.from_patch(patch, sandbox=LocalSandbox(), version=document["version"])
    session = harness.run(tickets(1, prefix="production")[0], turns=8, hooks=hooks)
    print(f"production ticket with {hooks.version}: {session.status}")
    print(f"inspect it: envharness --store {store} harness show {result.accepted_version}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
