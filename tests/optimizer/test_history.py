"""A run read back from its chain tells what the loop returned: iterations, versions, ledger."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from envharness.demos.coding_shell import coding_tasks
from envharness.errors import NotFoundError
from envharness.optimizer import HarnessOptimizer, OptimizationResult, ScriptedEngineer
from envharness.optimizer.history import RunHistory, run_history
from envharness.store import read_store
from tests.optimizer._loops import (
    DO_NOTHING,
    TESTS_FIRST,
    TESTS_FIRST_BUT_NO_TIDYING,
    fast,
    shell,
)
from tests.service._harness_store import write_run_in_progress


def _history(store: Path, run_id: str) -> RunHistory:
    async def read() -> RunHistory:
        return await run_history(await read_store(store), run_id)

    return anyio.run(read)


def _same(history: RunHistory, result: OptimizationResult) -> None:
    """Everything the result says, the history derives from records alone."""
    assert history.id == result.run_id
    assert history.status == result.status
    assert history.environment == result.environment
    assert history.engineer == result.engineer
    assert history.baseline is not None
    assert history.final is not None
    assert (history.baseline.passed, history.baseline.total) == (
        result.baseline.passed,
        result.baseline.total,
    )
    assert history.baseline.values == result.baseline.values
    assert history.final.values == result.final.values
    assert history.final.version == result.final.version
    assert [v.version for v in history.versions] == [v.version for v in result.versions]
    for derived, returned in zip(history.versions, result.versions, strict=True):
        assert (derived.parent, derived.digest, derived.experiment_id) == (
            returned.parent,
            returned.digest,
            returned.experiment_id,
        )
        assert derived.improved == returned.improved
        assert derived.after is not None
        assert derived.after.mean_reward == pytest.approx(returned.score)
    assert len(history.iterations) == len(result.iterations)
    for derived_iteration, reported in zip(history.iterations, result.iterations, strict=True):
        assert derived_iteration.decided
        assert derived_iteration.reason == reported.reason
        assert derived_iteration.accepted_version == reported.accepted_version
        assert (derived_iteration.reruns, derived_iteration.reused) == (
            reported.reruns,
            reported.reused,
        )
        assert derived_iteration.behaviours == reported.behaviours
        verdicts = tuple(c.verdict for c in derived_iteration.candidates)
        assert verdicts == reported.verdicts
    assert sorted(history.ledger, key=repr) == sorted(result.ledger, key=repr)
    if result.held_out is not None:
        assert history.held_out is not None
        assert history.held_out.values == result.held_out.values


def test_two_stacked_versions_and_a_ledger(tmp_path: Path) -> None:
    engineer = ScriptedEngineer(rounds=[[TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST], [DO_NOTHING]])
    result = HarnessOptimizer(
        shell(tmp_path / "store"), engineer, config=fast(iterations=2)
    ).optimize(coding_tasks())
    history = _history(tmp_path / "store", result.run_id)
    _same(history, result)
    first, second = history.iterations
    assert (first.base_version, second.base_version) == (None, "harness-v1")
    assert [c.verdict and c.verdict.status for c in first.candidates] == ["rejected", "accepted"]
    [version] = history.versions
    assert version.before.version is None
    assert version.before.passed == 2
    assert version.after is not None
    assert version.after.passed == 10
    assert [(e.candidate, e.scenario) for e in version.ledger] == [(0, "tidy-1"), (0, "tidy-2")]


@pytest.mark.parametrize("gate", ["regression", "held_out"])
def test_the_gates_ledger_is_derived_from_their_measurements(tmp_path: Path, gate: str) -> None:
    tasks = {s.id: s for s in coding_tasks()}
    urgent = [tasks[f"urgent-{i}"] for i in range(1, 9)]
    tidy = [tasks["tidy-1"], tasks["tidy-2"]]
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST])
    optimizer = HarnessOptimizer(shell(tmp_path / "store"), engineer, config=fast(iterations=1))
    result = optimizer.optimize(urgent, **{gate: tidy})
    assert result.ledger, "the loop ledgered the broken suite"
    history = _history(tmp_path / "store", result.run_id)
    _same(history, result)
    [iteration] = history.iterations
    assert [c.suite for c in history.ledger] == [gate, gate]
    assert iteration.candidates[0].checks, "the rejected candidate's gate measurement"
    assert iteration.candidates[0].checks[0].role == gate


def test_an_unknown_run_is_not_found(tmp_path: Path) -> None:
    HarnessOptimizer(
        shell(tmp_path / "store"), ScriptedEngineer([TESTS_FIRST]), config=fast(iterations=1)
    ).optimize(coding_tasks())
    with pytest.raises(NotFoundError):
        _history(tmp_path / "store", "opt_missing")


def test_a_run_still_going_shows_what_it_recorded_so_far(tmp_path: Path) -> None:
    run_id = write_run_in_progress(tmp_path / "store")
    history = _history(tmp_path / "store", run_id)
    assert (history.status, history.name) == ("running", "half-way")
    assert (history.baseline, history.final, history.versions, history.ledger) == (
        None, None, (), (),
    )  # fmt: skip
    [iteration] = history.iterations
    assert not iteration.decided
    assert (iteration.selected, iteration.accepted_version, iteration.reason) == (None, None, "")
    [candidate] = iteration.candidates
    assert (candidate.verdict, candidate.rerun, candidate.patch) == (None, None, None)
