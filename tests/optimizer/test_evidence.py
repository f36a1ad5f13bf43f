"""An experiment's traces read in one pass over its records fold exactly as each session read
on its own: the same steps, blocks, hooks, scores and statuses, in the same order, and nothing
of another experiment whose records were committed in between."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.optimizer import LocalSandbox, OptimizationConfig, parse_answer
from envharness.optimizer.engineers import evidence
from envharness.optimizer.engineers.evidence import experiment_traces, read_trace
from envharness.optimizer.rerun import measure_patch
from tests.optimizer._loops import LOOK_UP_FIRST

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("page", [3, 2000])  # many pages, and one
async def test_an_experiments_traces_equal_its_sessions_read_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(evidence, "_PAGE", page)
    harness = AsyncEnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    # Capacity 2: the reference and the patched rerun commit their records interleaved.
    config = OptimizationConfig(turns=8, sandbox="local", trials=2, capacity=2)
    read = {}
    async with harness, harness.writable_store() as store, LocalSandbox() as sandbox:
        measured = await measure_patch(
            harness, store, tickets(3), parse_answer(LOOK_UP_FIRST).patch,
            sandbox=sandbox, config=config,
        )  # fmt: skip
        for rerun in (measured.reference, measured.patched):
            assert rerun.experiment_id is not None
            members = await store.experiment_sessions(rerun.experiment_id)
            one_by_one = [await read_trace(store, member.session.id) for member in members]
            one_by_one.sort(key=lambda t: (t.scenario_id, t.trial or 0))
            traces = await experiment_traces(store, rerun.experiment_id)
            assert traces == one_by_one
            read[rerun is measured.patched] = traces
    for patched, traces in read.items():
        assert len(traces) == 6
        assert all(t.status == "completed" for t in traces)
        assert all(bool(t.hooks) is patched for t in traces)
        assert all(t.passed is patched for t in traces)  # the hook's blocks fix the desk
        assert all(any(step.blocked for step in t.steps) is patched for t in traces)
