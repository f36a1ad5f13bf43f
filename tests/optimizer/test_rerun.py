"""Measuring a patch with the optimizer's own reruns: with and without it, same seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.errors import ConfigurationError
from envharness.optimizer import (
    CodeHook,
    HarnessOptimizer,
    HarnessPatch,
    LocalSandbox,
    OptimizationConfig,
    PatchPolicyError,
    ScriptedEngineer,
    parse_answer,
)
from envharness.optimizer.rerun import measure_patch, rerun_patch
from envharness.records import SessionCreated
from envharness.runtime.experiment import derive_seed
from envharness.store import Store
from tests.optimizer._loops import LOOK_UP_FIRST
from tests.optimizer._sandboxes import hook_code

CONFIG = OptimizationConfig(turns=8, sandbox="local", seed=7)
LOOK_UP = parse_answer(LOOK_UP_FIRST).patch


def desk(store: Path) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )


async def seeds(store: Store, experiment_id: str | None) -> dict[str, int]:
    """Each session's scenario → the seed it ran with, from its ``session.created`` record."""
    assert experiment_id is not None
    found = {}
    for info in await store.sessions(experiment_id=experiment_id):
        async for record in store.records(info.id):
            if isinstance(record.payload, SessionCreated):
                found[info.scenario_id] = record.payload.config.seed
    return found


async def test_a_patch_is_measured_against_no_patch_with_the_same_seeds(
    anyio_backend: str, tmp_path: Path
) -> None:
    harness = desk(tmp_path / "store")
    scenarios = tickets(6)
    async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
        measured = await measure_patch(
            harness, store, scenarios, LOOK_UP, sandbox=sandbox, config=CONFIG, name="check"
        )
        before = await seeds(store, measured.reference.experiment_id)
        after = await seeds(store, measured.patched.experiment_id)

    assert measured.reference.experiment_id != measured.patched.experiment_id
    assert measured.reference.measurement.values == {s.id: 0.0 for s in scenarios}
    assert measured.patched.measurement.values == {s.id: 1.0 for s in scenarios}
    assert measured.patched.measurement.hooks == {"on_before_action:block_and_prompt": 6}
    comparison = measured.comparison
    assert comparison is not None
    assert (comparison.mean, comparison.improved) == (1.0, tuple(s.id for s in scenarios))
    assert comparison.p_value == pytest.approx(1 / 64)
    # Paired: every scenario ran with the same seed both times, derived from the config's.
    assert before == after == {s.id: derive_seed(CONFIG.seed, s.id, 0) for s in scenarios}


async def test_it_measures_what_the_optimizer_measured(anyio_backend: str, tmp_path: Path) -> None:
    """The optimizer's accepted version and measure_patch agree: one code path, one reward."""
    harness = desk(tmp_path / "store")
    scenarios = tickets(8)
    async with harness:
        result = await HarnessOptimizer(
            harness, ScriptedEngineer([LOOK_UP_FIRST]), config=CONFIG
        ).optimize_async(scenarios)
        [version] = result.versions
        async with harness.writable_store() as store, LocalSandbox() as sandbox:
            measured = await measure_patch(
                harness, store, scenarios, HarnessPatch.from_dict(version.patch),
                sandbox=sandbox, config=CONFIG,
            )  # fmt: skip

    assert measured.reference.measurement.values == result.baseline.values
    assert measured.patched.measurement.values == result.final.values
    assert measured.comparison is not None
    assert measured.comparison.mean == version.mean_reward
    assert measured.comparison.p_value == version.p_value


async def test_a_reference_patch_is_what_the_patch_is_compared_with(
    anyio_backend: str, tmp_path: Path
) -> None:
    harness = desk(tmp_path / "store")
    async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
        measured = await measure_patch(
            harness, store, tickets(4), LOOK_UP, sandbox=sandbox, config=CONFIG, reference=LOOK_UP
        )
    assert measured.comparison is not None
    assert (measured.comparison.mean, measured.comparison.ties) == (0.0, 4)


class _Broken:
    """A harness whose experiments cannot even be created (the store is gone, say)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def new_environment(self) -> SupportDesk:
        return SupportDesk()

    def experiment(self, *args: Any, **options: Any) -> Any:
        raise self.error


async def test_a_rerun_that_fails_says_so_and_compares_nothing(anyio_backend: str) -> None:
    broken: Any = _Broken(RuntimeError("the disk is on fire"))
    store: Any = None
    async with LocalSandbox() as sandbox:
        measured = await measure_patch(broken, store, tickets(2), LOOK_UP, sandbox=sandbox)
    for rerun in (measured.reference, measured.patched):
        assert rerun.measurement.infrastructure
        assert rerun.measurement.error is not None
        assert rerun.measurement.error.type == "RuntimeError"
        assert rerun.measurement.error.message == "the disk is on fire"
        assert rerun.experiment_id is None
    assert measured.comparison is None


async def test_a_setup_that_can_never_be_measured_is_raised(anyio_backend: str) -> None:
    broken: Any = _Broken(ConfigurationError("turns must be positive"))
    store: Any = None
    async with LocalSandbox() as sandbox:
        with pytest.raises(ConfigurationError, match="turns must be positive"):
            await rerun_patch(broken, store, tickets(2), HarnessPatch(), sandbox=sandbox)


async def test_a_patch_the_policy_refuses_is_raised_not_measured(
    anyio_backend: str, tmp_path: Path
) -> None:
    bad = HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=hook_code("import os")),))
    harness = desk(tmp_path / "store")
    async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
        with pytest.raises(PatchPolicyError):
            await rerun_patch(harness, store, tickets(2), bad, sandbox=sandbox, config=CONFIG)
