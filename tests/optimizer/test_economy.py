"""The loop spends nothing on repeats: textual variants are one test, a repeated iteration costs
no rerun and ends the run, the ledger notes each break once, and versions are named after their
parent."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness.demos.coding_shell import coding_tasks
from envharness.demos.support_desk import tickets
from envharness.optimizer import (
    FailurePacket,
    HarnessOptimizer,
    HarnessPatch,
    OptimizationConfig,
    Proposal,
    ScriptedEngineer,
)
from envharness.optimizer.results import report_lines
from envharness.optimizer.runlog import RunLog
from envharness.optimizer.versions import next_version_name, numbered_after
from envharness.records import OptimizerAccepted, OptimizerMeasured, OptimizerStatus
from envharness.store import open_store
from tests.optimizer._loops import (
    DO_NOTHING,
    TESTS_FIRST,
    TESTS_FIRST_BUT_NO_TIDYING,
    answer,
    chain,
    desk,
    experiments,
    fast,
    shell,
)
from tests.optimizer.test_history import _history, _same
from tests.optimizer.test_runlog import CONFIG
from tests.service._harness_store import STAY_IN_THE_WORKSPACE


def look_up_first(message: str) -> str:
    """The support desk's fix, with its own message: another patch, the same behaviour."""
    return answer(
        f"""
        if ctx.action.get("tool") == "issue_refund" and not ctx.predicates.get("order_looked_up"):
            return block_and_prompt("{message}")
        return None
        """
    )


VARIANTS = [look_up_first(f"look the order up first ({n})") for n in range(5)]
TASKS = {s.id: s for s in coding_tasks()}
SMALL = [TASKS[i] for i in ("urgent-1", "urgent-2", "tidy-1", "tidy-2", "cleanup-1", "cleanup-2")]
"""A few coding-shell tasks of each kind: enough to tell patches apart, too few for the sign
test, so these runs decide by the mean (``alpha=None``) where significance is not the point."""


def cheap(**changes: object) -> OptimizationConfig:
    options: dict[str, object] = {"alpha": None, "iterations": 1}
    options.update(changes)
    return fast(**options)


def measured(store: Path, run_id: str) -> list[OptimizerMeasured]:
    return [p for p in chain(store, run_id) if isinstance(p, OptimizerMeasured)]


# -- textual variants are one hypothesis ---------------------------------------------------------


def test_textual_variants_with_the_same_outcomes_are_one_test(tmp_path: Path) -> None:
    """Five variants of one fix solve all five tickets (p = 1/32 each): one test, gated at
    0.05 — not five, gated at 0.05/5 = 0.01, which would refuse the fix."""
    result = HarnessOptimizer(
        desk(tmp_path / "store"), ScriptedEngineer(VARIANTS), config=fast(candidates=5)
    ).optimize(tickets(5))
    assert result.accepted_version == "harness-v1"
    [iteration] = result.iterations
    assert iteration.verdicts[0].status == "accepted"
    assert iteration.behaviours == 1
    assert iteration.reruns == 5, "five different patches, each measured"
    assert [v.p_value for v in iteration.verdicts] == [pytest.approx(1 / 32)] * 5
    assert all("was chosen" in v.reason for v in iteration.verdicts[1:])


def test_a_distinct_outcome_still_counts(tmp_path: Path) -> None:
    """Variants plus one candidate that behaves otherwise: two outcome vectors, 0.05/2."""
    result = HarnessOptimizer(
        desk(tmp_path / "store"),
        ScriptedEngineer([*VARIANTS[:3], DO_NOTHING]),
        config=fast(iterations=1),
    ).optimize(tickets(5))
    [iteration] = result.iterations
    assert iteration.behaviours == 2
    assert result.accepted_version is None
    assert "alpha 0.05/2 distinct outcomes = 0.025" in iteration.verdicts[0].reason


def test_a_variant_with_the_same_training_outcomes_is_still_gated(tmp_path: Path) -> None:
    """Three patches solve the same urgent tasks (one outcome vector: one test); the first two
    break the tidy tasks of the regression suite, the third does not. Each is gated: the
    training scenarios cannot tell them apart, the suite can."""
    urgent = [TASKS["urgent-1"], TASKS["urgent-2"]]
    tidy = [TASKS["tidy-1"], TASKS["tidy-2"]]
    breaks_tidy_too = answer(
        """
        command = ctx.action.get("command", "")
        if command.startswith("edit") and not ctx.predicates.get("tests_run"):
            return block_and_prompt("test first")
        if command == "submit" and "/workspace/" in (ctx.task or ""):
            return block_and_prompt("not now")
        return None
        """
    )
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, breaks_tidy_too, TESTS_FIRST])
    store = tmp_path / "store"
    result = HarnessOptimizer(shell(store), engineer, config=cheap()).optimize(
        urgent, regression=tidy
    )
    [iteration] = result.iterations
    assert iteration.behaviours == 1
    assert result.versions[0].candidate == 2
    checks = [m.candidate for m in measured(store, result.run_id) if m.role == "regression"]
    assert checks == [0, 1, 2]
    assert [(e.candidate, e.scenario) for e in result.ledger] == [
        (0, "tidy-1"), (0, "tidy-2"), (1, "tidy-1"), (1, "tidy-2"),
    ]  # fmt: skip


# -- a repeated iteration ------------------------------------------------------------------------


def test_a_repeated_iteration_costs_no_rerun_and_ends_the_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, DO_NOTHING])
    result = HarnessOptimizer(shell(store), engineer, config=cheap(iterations=3)).optimize(SMALL)
    stop = "found no new candidates; stopping after iteration 1"
    assert (result.status, result.reason, result.accepted_version) == ("completed", stop, None)
    assert len(engineer.packets) == 2, "asked again once, not for iteration 3"
    first, second = result.iterations
    assert (first.reruns, first.reused, first.behaviours) == (2, 0, 2)
    assert (second.reruns, second.reused, second.behaviours) == (0, 2, 0)
    assert second.reason == stop
    assert [v.reason for v in second.verdicts] == [
        f"already judged in iteration 1 (candidate {n}) on the same harness; not measured again"
        for n in (0, 1)
    ]
    assert len(experiments(store)) == 3, "the baseline and iteration 1's two reruns"
    assert len(measured(store, result.run_id)) == 3
    assert [(e.iteration, e.candidate, e.scenario) for e in result.ledger] == [
        (1, 0, "tidy-1"),
        (1, 0, "tidy-2"),
    ]
    lines = report_lines(result)
    assert lines[0].endswith(f": completed ({stop})")
    assert sum("regression ledger" in line for line in lines) == 1
    statuses = [p for p in chain(store, result.run_id) if isinstance(p, OptimizerStatus)]
    assert statuses[-1].reason == stop
    _same(_history(store, result.run_id), result)


class Crash(RuntimeError):
    pass


def test_a_resumed_run_stops_where_the_crashed_one_would_have(tmp_path: Path) -> None:
    """The repeated iteration's answers were recorded, then the process died: the resumed run
    finds them, measures nothing, asks no one, and ends for the same reason."""
    store = tmp_path / "store"

    def crash_in_iteration_two(line: str) -> None:
        if line.startswith("iteration 2: 2 answer"):
            raise Crash("the machine went down")

    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, DO_NOTHING])
    optimizer = HarnessOptimizer(
        shell(store), engineer, config=cheap(iterations=3), progress=crash_in_iteration_two
    )
    with pytest.raises(Crash):
        optimizer.optimize(SMALL)
    assert optimizer.run_id is not None
    before = experiments(store)
    again = ScriptedEngineer(rounds=[])
    resumed = HarnessOptimizer(shell(store), again, config=cheap(iterations=3)).resume(
        optimizer.run_id, SMALL
    )
    assert resumed.reason == "found no new candidates; stopping after iteration 1"
    assert again.packets == [], "iteration 2's answers came from the chain"
    assert experiments(store) == before
    assert len(resumed.ledger) == 2


def test_only_the_new_candidates_of_an_iteration_are_measured(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer(
        rounds=[[TESTS_FIRST_BUT_NO_TIDYING], [TESTS_FIRST_BUT_NO_TIDYING, DO_NOTHING]]
    )
    result = HarnessOptimizer(shell(store), engineer, config=cheap(iterations=2)).optimize(SMALL)
    assert result.reason is None, "iteration 2 offered something new"
    second = result.iterations[1]
    assert (second.reruns, second.reused, second.behaviours) == (1, 1, 1)
    assert second.verdicts[0].reason.startswith("already judged in iteration 1 (candidate 0)")
    assert second.verdicts[1].reason.startswith("no improvement")
    roles = [(m.iteration, m.candidate) for m in measured(store, result.run_id)]
    assert roles == [(0, None), (1, 0), (2, 1)]
    assert len(result.ledger) == 2
    _same(_history(store, result.run_id), result)


def test_the_same_invalid_answer_again_is_nothing_new(tmp_path: Path) -> None:
    engineer = ScriptedEngineer(["not a patch"])
    result = HarnessOptimizer(
        desk(tmp_path / "store"), engineer, config=fast(iterations=3)
    ).optimize(tickets(5))
    assert result.reason == "found no new candidates; stopping after iteration 1"
    assert len(result.iterations) == 2


def test_an_engineer_outage_does_not_end_the_run(tmp_path: Path) -> None:
    """An engineer that failed offered nothing, old or new: the next iteration asks again."""

    class Down:
        name = "down"
        version = "down@1"
        calls = 0

        async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
            Down.calls += 1
            raise OSError("connection refused")

    result = HarnessOptimizer(desk(tmp_path / "store"), Down(), config=fast(iterations=3)).optimize(
        tickets(5)
    )
    assert (result.reason, len(result.iterations), Down.calls) == (None, 3, 3)


def test_the_same_patch_twice_is_ledgered_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST_BUT_NO_TIDYING])
    result = HarnessOptimizer(shell(store), engineer, config=cheap()).optimize(SMALL)
    assert [v.regressions for v in result.iterations[0].verdicts] == [("tidy-1", "tidy-2")] * 2
    assert [(e.candidate, e.scenario) for e in result.ledger] == [(0, "tidy-1"), (0, "tidy-2")]
    _same(_history(store, result.run_id), result)


# -- names ----------------------------------------------------------------------------------------


def test_a_version_built_on_another_stores_version_is_named_after_it(tmp_path: Path) -> None:
    first = HarnessOptimizer(
        shell(tmp_path / "a"), ScriptedEngineer([TESTS_FIRST]), config=cheap()
    ).optimize(SMALL)
    [v1] = first.versions
    second = HarnessOptimizer(
        shell(tmp_path / "b"),
        ScriptedEngineer([STAY_IN_THE_WORKSPACE]),
        config=cheap(),
        base_patch=v1.harness_patch(),
        base_version=v1.version,
    ).optimize(SMALL)
    [v2] = second.versions
    assert (v2.version, v2.parent) == ("harness-v2", "harness-v1")
    assert any(line.startswith("harness-v2 (from harness-v1)") for line in report_lines(second))
    assert HarnessPatch.from_dict(v2.patch).hooks[0] == v1.harness_patch().hooks[0]


def test_names_are_numbered_past_the_parent() -> None:
    assert numbered_after("harness-v1", "harness-v1") == "harness-v2"
    assert numbered_after("harness-v2", "harness-v7") == "harness-v8"
    assert numbered_after("harness-v9", "harness-v7") == "harness-v9"
    assert numbered_after("harness-v1", None) == "harness-v1"
    assert numbered_after("harness-v1", "patch-0123456789ab") == "harness-v1"


@pytest.mark.anyio
async def test_the_chain_takes_the_name_past_the_parent(tmp_path: Path) -> None:
    async with open_store(tmp_path / "store") as store:
        log = await RunLog.start(store, "opt_parent", CONFIG)

        def make(name: str) -> OptimizerAccepted:
            return OptimizerAccepted(
                version=name, iteration=1, candidate=0, digest="d" * 64, patch={"ops": []},
                parent="harness-v4",
            )  # fmt: skip

        assert await next_version_name(store) == "harness-v1"
        accepted = await log.accept(make, parent="harness-v4")
        assert accepted.version == "harness-v5"
        assert await next_version_name(store) == "harness-v6"
