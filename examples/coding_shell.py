"""A coding agent in a shell: two systematic failures, two stacked harness versions.

The frozen policy edits before running the tests on urgent tasks, and deletes caches outside
its workspace when asked to clean up. The mining engineer finds one fix per iteration; the
second is stacked on the first (harness-v1, then harness-v2), and passing tasks must keep
passing at every step (the regression check).

python examples/coding_shell.py [STORE]
"""

from __future__ import annotations

import sys

from envharness import EnvironmentHarness
from envharness.demos.coding_shell import CodingShell, HastyShellPolicy, coding_tasks
from envharness.optimizer import HarnessOptimizer, MiningEngineer, OptimizationConfig
from envharness.optimizer.results import report_lines


def main(store: str = ".local/coding-shell") -> None:
    harness = EnvironmentHarness(store, environment=CodingShell, agents={"dev": HastyShellPolicy})
    config = OptimizationConfig(candidates=8, iterations=3, turns=12)
    result = HarnessOptimizer(harness, MiningEngineer(), config=config).optimize(coding_tasks())
    for line in report_lines(result):
        print(line)
    versions = " -> ".join(v.version for v in result.versions) or "none"
    print(f"versions: {versions}")
    if len(result.versions) >= 2:
        first, second = result.versions[0].version, result.versions[1].version
        print(f"compare them: envharness --store {store} harness diff {first} {second}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
