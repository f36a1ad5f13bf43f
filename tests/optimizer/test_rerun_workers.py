"""The optimizer's reruns through an executor: the same measurement and the same evidence as in
process, with the candidate's hooks run in a sandbox each worker opens of the same kind; reruns
at once split the executor's workers (N in all, not N each)."""

from __future__ import annotations

import dataclasses
from contextlib import AsyncExitStack
from pathlib import Path

import msgspec
import pytest

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.errors import ConfigurationError
from envharness.optimizer import (
    HarnessOptimizer,
    LocalSandbox,
    OptimizationConfig,
    OptimizationResult,
    ScriptedEngineer,
    parse_answer,
)
from envharness.optimizer.rerun import measure_patch
from envharness.records import HookCalled
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.store import read_store
from tests.optimizer._loops import DO_NOTHING, LOOK_UP_FIRST
from tests.optimizer.test_optimize_postgres import held_still
from tests.runtime.executors._evidence import experiments_evidence
from tests.runtime.executors._runners import worker_pids

pytestmark = pytest.mark.anyio

CONFIG = OptimizationConfig(turns=8, sandbox="local", seed=7)
LOOK_UP = parse_answer(LOOK_UP_FIRST).patch


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawns processes: one backend
async def test_a_patch_measured_in_workers_measures_as_in_process(tmp_path: Path) -> None:
    scenarios = tickets(4)
    measured = {}
    recorded = {}
    pools = {"pool": ProcessPoolExecutor(workers=1), "split": ProcessPoolExecutor(workers=2)}
    for name, executor in (("here", None), *pools.items()):
        harness = AsyncEnvironmentHarness(
            tmp_path / name, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
        )
        config = dataclasses.replace(CONFIG, executor=executor)
        async with AsyncExitStack() as opened:
            if executor is not None:  # open: both reruns run in its workers
                await opened.enter_async_context(executor)
            async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
                measured[name] = await measure_patch(
                    harness, store, scenarios, LOOK_UP, sandbox=sandbox, config=config,
                    name="check",
                )  # fmt: skip
            if executor is not None:
                assert executor.kept == executor.workers  # none started beyond those given
        runs = (measured[name].reference.experiment_id, measured[name].patched.experiment_id)
        assert None not in runs
        recorded[name] = await experiments_evidence(tmp_path / name, [r for r in runs if r])
        assert (await (await read_store(tmp_path / name)).verify()).ok
    here = measured["here"]
    assert here.patched.measurement.values == {s.id: 1.0 for s in scenarios}
    for name in pools:
        for rerun in ("reference", "patched"):
            assert getattr(measured[name], rerun).measurement == getattr(here, rerun).measurement
        assert measured[name].comparison == here.comparison
        assert recorded[name] == recorded["here"]
    # capacity 2 with one worker: one rerun after the other in it; with two: one worker each
    assert [len(pids) for pids in (await worker_pids(tmp_path / "pool")).values()] == [1, 1]
    reference, patched = (await worker_pids(tmp_path / "split")).values()
    assert len(reference) == len(patched) == 1
    assert reference != patched
    hooks = [
        step for chains in recorded["split"] for chain in chains for step in chain
        if step[0][1] == HookCalled.__struct_config__.tag
    ]  # fmt: skip
    assert hooks  # the hooks ran, in the workers' sandboxes


def test_something_that_is_no_executor_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigurationError, match=r"OptimizationConfig\.executor must be"):
        OptimizationConfig(executor="pool")  # type: ignore[arg-type]


LOOP = OptimizationConfig(candidates=2, iterations=1, turns=8, seed=3, capacity=2, sandbox="local")
"""Two candidates rerun at once; six tickets let the gate pass for two at alpha 0.05."""


async def _optimized(store: Path, config: OptimizationConfig) -> OptimizationResult:
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    engineer = ScriptedEngineer([DO_NOTHING, LOOK_UP_FIRST])
    optimizer = HarnessOptimizer(harness, engineer, config=config)
    return await optimizer.optimize_async(tickets(6))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawns processes: one backend
async def test_two_reruns_at_once_share_the_executors_two_workers(tmp_path: Path) -> None:
    """``capacity=2`` through ``ProcessPoolExecutor(workers=2)``: two processes in all, one for
    each candidate's rerun (each taking two would start four), and the same decisions."""
    here = await _optimized(tmp_path / "here", dataclasses.replace(LOOP, directory=tmp_path / "a"))
    pool = ProcessPoolExecutor(workers=2)
    async with pool:
        config = dataclasses.replace(LOOP, executor=pool, directory=tmp_path / "b")
        there = await _optimized(tmp_path / "there", config)
        assert pool.kept == 2
    assert there.accepted_version == here.accepted_version == "harness-v1"
    assert held_still(msgspec.to_builtins(there), {}) == held_still(msgspec.to_builtins(here), {})
    ran_in = await worker_pids(tmp_path / "there")
    baseline, first, second = ran_in.values()  # the baseline alone takes both
    assert len(first) == len(second) == 1
    assert first != second
    assert first | second <= baseline
    assert len(baseline) <= 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawns processes: one backend
async def test_a_lone_candidate_takes_every_worker(tmp_path: Path) -> None:
    """One distinct candidate at capacity 2 runs alone: in both workers, not in a slot of one
    beside an idle one."""
    harness = AsyncEnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    pool = ProcessPoolExecutor(workers=2)
    config = dataclasses.replace(LOOP, candidates=1, executor=pool, directory=tmp_path / "run")
    async with pool:
        optimizer = HarnessOptimizer(harness, ScriptedEngineer([LOOK_UP_FIRST]), config=config)
        result = await optimizer.optimize_async(tickets(6))
        assert pool.kept == 2
    assert result.accepted_version == "harness-v1"
    baseline, candidate = (await worker_pids(tmp_path / "store")).values()
    assert len(candidate) == 2
    assert candidate == baseline
