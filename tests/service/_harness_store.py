"""A store with two harness versions written by the real optimizer, for the Harnesses tests.

The coding-shell demo (``envharness.demos.coding_shell``) and a scripted engineer, in a fast
configuration (in-process sandbox, three candidates, two iterations):

- iteration 1: candidate 0 helps the urgent tasks but breaks the two tidy ones, which passed
  without a patch (rejected, in the regression ledger); candidate 1 blocks editing before the
  tests ran — with a message that holds ``<script>`` markup, to show that patch code is
  escaped — and becomes ``harness-v1``; candidate 2 is not a patch at all (invalid);
- iteration 2: a hook that blocks ``rm`` outside the workspace, stacked on harness-v1, becomes
  ``harness-v2``, and every task then passes.

Run as a module (``python -m tests.service._harness_store STORE``) it writes into an existing
store, as the browser test does with the quickstart's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from envharness import EnvironmentHarness
from envharness.demos.coding_shell import CodingShell, HastyShellPolicy, coding_tasks
from envharness.optimizer import HarnessOptimizer, OptimizationConfig, ScriptedEngineer
from envharness.optimizer.results import OptimizationResult
from envharness.optimizer.runlog import RunLog
from envharness.records import EnvironmentRef, OptimizerConfigRef, OptimizerProposal, new_id
from envharness.store import open_store
from tests.optimizer._loops import TESTS_FIRST_BUT_NO_TIDYING, answer

SCRIPT = "</code></pre><script>alert('patched')</script>"
"""Markup inside patch code: a page that shows it must show these characters, not run them."""

TESTS_FIRST_ESCAPED = answer(
    f"""
    if ctx.action.get("command", "").startswith("edit") and not ctx.predicates.get("tests_run"):
        return block_and_prompt("run the tests first {SCRIPT}")
    return None
    """
)
STAY_IN_THE_WORKSPACE = answer(
    """
    words = ctx.action.get("command", "").split()
    if words and words[0] == "rm" and not words[-1].startswith(ctx.state.get("workspace", "")):
        return block_and_prompt("only remove files inside the workspace")
    return None
    """
)
NOT_A_PATCH = "<think>no idea</think><patch>this is not JSON</patch>"


def write_harness_versions(store: Path) -> OptimizationResult:
    """Optimize the coding shell into ``store`` (created or existing): harness-v1, harness-v2."""
    harness = EnvironmentHarness(store, environment=CodingShell, agents={"dev": HastyShellPolicy})
    engineer = ScriptedEngineer(
        rounds=[
            [TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST_ESCAPED, NOT_A_PATCH],
            [STAY_IN_THE_WORKSPACE],
        ]
    )
    config = OptimizationConfig(
        turns=12, sandbox="local", candidates=3, iterations=2, name="shell-tune"
    )
    return HarnessOptimizer(harness, engineer, config=config).optimize(coding_tasks())


def write_run_in_progress(store: Path) -> str:
    """An optimizer run whose first iteration has one answer and no decision yet, as a live
    run (or one that crashed there) leaves its chain; returns its id."""
    config = OptimizerConfigRef(
        name="half-way",
        environment=EnvironmentRef(
            name="coding-shell", version="1", turn_order="simultaneous", roles=("agent",),
            input_type="envharness.demos.coding_shell.CodingTask",
        ),
        engineer="scripted", engineer_version="scripted@1", scenarios=("urgent-1",),
    )  # fmt: skip
    proposal = OptimizerProposal(iteration=1, candidate=0, engineer="scripted", text=SCRIPT)

    async def write() -> str:
        async with open_store(store) as opened:
            log = await RunLog.start(opened, new_id("opt"), config)
            await log.append(proposal)
            return log.run_id

    return anyio.run(write)


if __name__ == "__main__":
    result = write_harness_versions(Path(sys.argv[1]))
    print(result.run_id, *(version.version for version in result.versions))
