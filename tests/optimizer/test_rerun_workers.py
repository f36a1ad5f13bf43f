"""The optimizer's reruns through an executor: the same measurement and the same evidence as in
process, with the candidate's hooks run in a sandbox each worker opens of the same kind."""

from __future__ import annotations

import dataclasses
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.errors import ConfigurationError
from envharness.optimizer import LocalSandbox, OptimizationConfig, parse_answer
from envharness.optimizer.rerun import measure_patch
from envharness.records import HookCalled
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.store import read_store
from tests.optimizer._loops import LOOK_UP_FIRST
from tests.runtime.executors._evidence import experiments_evidence

pytestmark = pytest.mark.anyio

CONFIG = OptimizationConfig(turns=8, sandbox="local", seed=7)
LOOK_UP = parse_answer(LOOK_UP_FIRST).patch


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # spawns processes: one backend
async def test_a_patch_measured_in_workers_measures_as_in_process(tmp_path: Path) -> None:
    scenarios = tickets(4)
    measured = {}
    recorded = {}
    for name, executor in (("here", None), ("pool", ProcessPoolExecutor(workers=1))):
        harness = AsyncEnvironmentHarness(
            tmp_path / name, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
        )
        config = dataclasses.replace(CONFIG, executor=executor)
        async with AsyncExitStack() as opened:
            if executor is not None:  # open: both reruns run in the same worker
                await opened.enter_async_context(executor)
            async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
                measured[name] = await measure_patch(
                    harness, store, scenarios, LOOK_UP, sandbox=sandbox, config=config,
                    name="check",
                )  # fmt: skip
        runs = (measured[name].reference.experiment_id, measured[name].patched.experiment_id)
        assert None not in runs
        recorded[name] = await experiments_evidence(tmp_path / name, [r for r in runs if r])
        assert (await (await read_store(tmp_path / name)).verify()).ok
    here, pool = measured["here"], measured["pool"]
    assert pool.patched.measurement.values == {s.id: 1.0 for s in scenarios}
    for rerun in ("reference", "patched"):
        assert getattr(pool, rerun).measurement == getattr(here, rerun).measurement
    assert pool.comparison == here.comparison
    assert recorded["pool"] == recorded["here"]
    hooks = [
        step for chains in recorded["pool"] for chain in chains for step in chain
        if step[0][1] == HookCalled.__struct_config__.tag
    ]  # fmt: skip
    assert hooks  # the hooks ran, in the workers' sandboxes


def test_something_that_is_no_executor_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigurationError, match=r"OptimizationConfig\.executor must be"):
        OptimizationConfig(executor="pool")  # type: ignore[arg-type]
