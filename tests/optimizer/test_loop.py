"""The optimizer loop: baseline, packet, candidates, reruns, selection, acceptance; refusals."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec
import pytest

import envharness.optimizer
from envharness import AsyncEnvironmentHarness, EnvironmentHarness, EnvironmentSpec, Resolution
from envharness.contracts.scenario import Scenario
from envharness.demos.coding_shell import coding_tasks
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.errors import ConfigurationError
from envharness.optimizer import (
    ExecutableHarness,
    FailurePacket,
    HarnessOptimizer,
    HarnessPatch,
    HarnessVersion,
    LocalSandbox,
    MiningEngineer,
    OptimizationConfig,
    PairedComparison,
    Proposal,
    ScriptedEngineer,
    paired_comparison,
    sign_test,
)
from envharness.optimizer.results import report_lines
from envharness.optimizer.runlog import RunLog
from envharness.optimizer.versions import harness_version
from envharness.records import (
    HookCalled,
    OptimizerAccepted,
    OptimizerDecision,
    OptimizerMeasured,
    OptimizerProposal,
    OptimizerStarted,
    OptimizerStatus,
    RunnerRef,
)
from envharness.store import open_store, read_store
from tests.optimizer._loops import (
    DO_NOTHING,
    LOOK_UP_FIRST,
    TESTS_FIRST,
    TESTS_FIRST_BUT_NO_TIDYING,
    answer,
    chain,
    desk,
    experiments,
    fast,
    shell,
)


def by_candidate(result: Any, iteration: int = 1) -> dict[int, Any]:
    return {v.candidate: v for v in result.iterations[iteration - 1].verdicts}


# -- the user story --------------------------------------------------------------------------------


async def test_the_selftest_path_learns_the_precondition_in_a_subprocess_sandbox(
    anyio_backend: str, tmp_path: Path
) -> None:
    """Mining engineer, subprocess sandbox, support desk: 0/8 → 8/8 as harness-v1, all evidence."""
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    lines: list[str] = []
    optimizer = HarnessOptimizer(
        harness,
        MiningEngineer(),
        config=OptimizationConfig(candidates=8, iterations=3, turns=8),
        progress=lines.append,
    )
    result = await optimizer.optimize_async(tickets(8))

    assert (result.baseline.passed, result.final.passed, result.final.total) == (0, 8, 8)
    assert result.baseline.mean_reward == 0.0
    assert result.final.mean_reward == 1.0
    assert result.accepted_version == "harness-v1"
    assert result.status == "completed"
    assert len(result.iterations) == 1, "everything solved: no second iteration"
    version = result.versions[0]
    assert version.p_value == pytest.approx(1 / 256)
    assert version.interval == (1.0, 1.0)
    # The mining engineer found the precondition itself: block issue_refund until looked up.
    code = HarnessPatch.from_dict(result.patch).hooks[0].code
    assert "'issue_refund'" in code
    assert "order_looked_up" in code
    assert "block_and_prompt" in code
    # The files a production deployment loads.
    document = json.loads((Path(result.directory) / "accepted_patch.json").read_text())
    assert document["version"] == "harness-v1"
    assert HarnessPatch.from_dict(document["patch"]).digest() == document["digest"]
    assert (Path(result.directory) / "versions" / "harness-v1.json").exists()
    report = json.loads((Path(result.directory) / "report.json").read_text())
    assert report["accepted_version"] == "harness-v1"
    assert "harness-v1" in (Path(result.directory) / "report.txt").read_text()
    # Everything is evidence too, and the store still verifies.
    reader = await read_store(store)
    assert [v.version for v in await reader.harness_versions()] == ["harness-v1"]
    # One shape: the version returned is the one written and the one the store shows.
    assert version == await harness_version(reader, "harness-v1")
    written = (Path(result.directory) / "versions" / "harness-v1.json").read_bytes()
    assert msgspec.json.decode(written, type=HarnessVersion) == version
    assert (version.run_id, version.environment) == (result.run_id, "support-desk@1")
    assert len(version.improved) == 8
    assert (await reader.verify()).ok
    kinds = [record.kind async for record in reader.records(result.run_id)]
    assert kinds[0] == "optimizer.started"
    assert kinds.count("optimizer.proposal") == 8
    assert kinds.count("optimizer.measured") == 1 + len(
        {v.digest for v in result.iterations[0].verdicts if v.digest}
    )
    assert "optimizer.accepted" in kinds
    assert kinds[-1] == "optimizer.status"
    runs = await reader.optimizer_runs()
    assert [(r.id, r.status) for r in runs] == [(result.run_id, "completed")]
    # Which hooks fired in the accepted rerun is recorded.
    measured = [
        r.payload
        async for r in reader.records(result.run_id)
        if isinstance(r.payload, OptimizerMeasured) and r.payload.digest == version.digest
    ]
    accepted_rerun = measured[0]
    assert accepted_rerun.hooks == {"on_before_action:block_and_prompt": 8}
    assert any(line.startswith("accepted harness-v1") for line in lines)
    # The run says its id as soon as it exists: what an interrupted caller resumes.
    assert optimizer.run_id == result.run_id
    assert lines[0] == f"optimizer run {result.run_id} started (run directory {result.directory})"


def test_the_accepted_patch_loads_in_production(tmp_path: Path) -> None:
    harness = desk(tmp_path / "store")
    result = HarnessOptimizer(harness, ScriptedEngineer([LOOK_UP_FIRST]), config=fast()).optimize(
        tickets(6)
    )
    document = json.loads((Path(result.directory) / "accepted_patch.json").read_text())
    hooks = ExecutableHarness.from_patch(
        HarnessPatch.from_dict(document["patch"]), sandbox=LocalSandbox(), version="prod"
    )
    run = harness.experiment("production", tickets(3, prefix="prod"), turns=8, hooks=hooks).run()
    assert run.completed == 3
    assert all(
        any(isinstance(p, HookCalled) for p in chain(tmp_path / "store", s.result.id))
        for s in run.sessions
    )


def test_accepted_versions_stack_across_iterations(tmp_path: Path) -> None:
    engineer = ScriptedEngineer(rounds=[[TESTS_FIRST], [DO_NOTHING, TESTS_FIRST]])
    result = HarnessOptimizer(shell(tmp_path / "store"), engineer, config=fast()).optimize(
        coding_tasks()
    )
    assert [v.version for v in result.versions] == ["harness-v1"]
    # Iteration 2 was built on harness-v1: its packet carried the accepted patch.
    assert engineer.packets[1].current_patch is not None
    assert HarnessPatch.from_dict(engineer.packets[1].current_patch).hooks
    # Stacking TESTS_FIRST again changes nothing: no improvement, not accepted.
    assert by_candidate(result, 2)[1].status == "rejected"
    assert "no improvement" in by_candidate(result, 2)[1].reason


def test_mining_stacks_two_versions_on_the_coding_shell(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = HarnessOptimizer(shell(store), MiningEngineer(), config=fast(candidates=8)).optimize(
        coding_tasks()
    )
    assert [v.version for v in result.versions] == ["harness-v1", "harness-v2"]
    assert result.versions[1].parent == "harness-v1"
    assert (result.baseline.passed, result.final.passed) == (2, 18)
    assert len(HarnessPatch.from_dict(result.patch).hooks) == 2


# -- judging candidates ----------------------------------------------------------------------------


def test_a_patch_that_breaks_a_solved_scenario_is_rejected_and_ledgered(tmp_path: Path) -> None:
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST])
    result = HarnessOptimizer(
        shell(tmp_path / "store"), engineer, config=fast(iterations=1)
    ).optimize(coding_tasks())
    verdicts = by_candidate(result)
    assert verdicts[0].status == "rejected"
    assert verdicts[0].regressions == ("tidy-1", "tidy-2")
    assert "breaks previously solved scenario(s): tidy-1, tidy-2" in verdicts[0].reason
    assert verdicts[0].mean_reward == pytest.approx(6 / 18), "it did improve on average"
    assert verdicts[1].status == "accepted"
    assert result.accepted_version == "harness-v1"
    assert {(e.candidate, e.scenario) for e in result.ledger} == {(0, "tidy-1"), (0, "tidy-2")}


def test_a_regression_suite_and_a_held_out_split_gate_promotion(tmp_path: Path) -> None:
    tasks = {s.id: s for s in coding_tasks()}
    urgent = [tasks[f"urgent-{i}"] for i in range(1, 9)]
    tidy = [tasks["tidy-1"], tasks["tidy-2"]]
    engineer = ScriptedEngineer([TESTS_FIRST_BUT_NO_TIDYING, TESTS_FIRST])
    optimizer = HarnessOptimizer(shell(tmp_path / "a"), engineer, config=fast(iterations=1))
    result = optimizer.optimize(urgent, regression=tidy)
    verdicts = by_candidate(result)
    assert verdicts[0].status == "rejected"
    assert verdicts[0].reason == "breaks the regression suite: tidy-1, tidy-2"
    assert {(e.suite, e.scenario) for e in result.ledger} == {
        ("regression", "tidy-1"),
        ("regression", "tidy-2"),
    }
    assert result.accepted_version == "harness-v1"
    assert result.versions[0].candidate == 1

    optimizer = HarnessOptimizer(shell(tmp_path / "b"), engineer, config=fast(iterations=1))
    result = optimizer.optimize(urgent, held_out=tidy)
    verdicts = by_candidate(result)
    assert verdicts[0].status == "rejected"
    assert verdicts[0].reason.startswith("worse on the held-out split (mean -1.000")
    assert result.versions[0].candidate == 1
    assert result.held_out is not None
    assert result.held_out.passed == 2


def test_the_report_says_which_hooks_fired_in_each_rerun(tmp_path: Path) -> None:
    """A rerun without improvement reads differently when its hooks never intervened."""
    result = HarnessOptimizer(
        desk(tmp_path / "store"),
        ScriptedEngineer(["not a patch", DO_NOTHING, LOOK_UP_FIRST]),
        config=fast(),
    ).optimize(tickets(8))
    assert result.iterations[0].hooks == {1: {}, 2: {"on_before_action:block_and_prompt": 8}}
    lines = report_lines(result)
    assert any(
        line.startswith("  candidate 1: rejected")
        and line.endswith("no improvement (mean reward +0.000); its hooks never intervened")
        for line in lines
    ), lines
    assert any(
        line.startswith("  candidate 2: accepted")
        and line.endswith(
            "improves 8 scenario(s); hooks fired: on_before_action:block_and_prompt x8"
        )
        for line in lines
    ), lines
    assert any(line.startswith("  candidate 0: invalid") and "hooks" not in line for line in lines)
    report = json.loads((Path(result.directory) / "report.json").read_text())
    assert report["iterations"][0]["hooks"]["2"] == {"on_before_action:block_and_prompt": 8}


def test_identical_patches_are_measured_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer(rounds=[[DO_NOTHING, DO_NOTHING], [DO_NOTHING]])
    result = HarnessOptimizer(desk(store), engineer, config=fast(iterations=2)).optimize(tickets(5))
    assert result.accepted_version is None
    # One baseline and one rerun, though the patch was proposed three times in two iterations.
    assert len(experiments(store)) == 2
    assert "measured once" in by_candidate(result)[1].reason
    measured = [p for p in chain(store, result.run_id) if isinstance(p, OptimizerMeasured)]
    assert [m.role for m in measured] == ["baseline", "candidate"]


LOOK_UP_FIRST_ON_FOUR_ORDERS = answer(
    """
    orders = ["A-1000", "A-1007", "A-1014", "A-1021"]
    if ctx.action.get("tool") == "issue_refund" and ctx.state.get("order_id") in orders:
        if not ctx.predicates.get("order_looked_up"):
            return block_and_prompt("look the order up first")
    return None
    """
)
"""Fixes the first four tickets only."""


def test_a_significance_gate_refuses_a_gain_too_small_to_tell_from_noise(tmp_path: Path) -> None:
    engineer = ScriptedEngineer([LOOK_UP_FIRST_ON_FOUR_ORDERS])
    result = HarnessOptimizer(
        desk(tmp_path / "store"), engineer, config=fast(iterations=1)
    ).optimize(tickets(6))
    verdict = by_candidate(result)[0]
    assert verdict.status == "rejected"
    assert verdict.mean_reward == pytest.approx(4 / 6)
    assert verdict.p_value == pytest.approx(1 / 16)
    assert verdict.reason == (
        "not significant: sign test p=0.0625 > alpha 0.05/1 distinct outcome = 0.05 "
        "(4 improved, 0 worsened)"
    )
    ungated = HarnessOptimizer(
        desk(tmp_path / "other"),
        ScriptedEngineer([LOOK_UP_FIRST_ON_FOUR_ORDERS]),
        config=fast(iterations=1, alpha=None),
    ).optimize(tickets(6))
    assert ungated.accepted_version == "harness-v1"


def test_the_gate_is_corrected_for_the_distinct_candidates_tried(tmp_path: Path) -> None:
    """Keeping the best of K tries at ``alpha`` each accepts noise more often than ``alpha``:
    the gate is ``alpha / m`` for m distinct outcome vectors measured (Bonferroni). Five tickets
    that all improve give p = 1/32: enough alone, not against a second, different outcome."""
    result = HarnessOptimizer(
        desk(tmp_path / "two"),
        ScriptedEngineer([LOOK_UP_FIRST, DO_NOTHING]),
        config=fast(iterations=1),
    ).optimize(tickets(5))
    verdict = by_candidate(result)[0]
    assert verdict.status == "rejected"
    assert verdict.p_value == pytest.approx(1 / 32)
    assert verdict.reason == (
        "not significant: sign test p=0.0312 > alpha 0.05/2 distinct outcomes = 0.025 "
        "(5 improved, 0 worsened)"
    )
    assert result.accepted_version is None
    # The same patch twice is one candidate, measured once: the gate stays at alpha.
    same = HarnessOptimizer(
        desk(tmp_path / "same"),
        ScriptedEngineer([LOOK_UP_FIRST, LOOK_UP_FIRST]),
        config=fast(iterations=1),
    ).optimize(tickets(5))
    assert same.accepted_version == "harness-v1"
    # Eight tickets give p = 1/256, which passes against both.
    enough = HarnessOptimizer(
        desk(tmp_path / "eight"),
        ScriptedEngineer([LOOK_UP_FIRST, DO_NOTHING]),
        config=fast(iterations=1),
    ).optimize(tickets(8))
    assert enough.accepted_version == "harness-v1"


def test_a_gate_no_candidate_could_pass_is_refused_before_spending(tmp_path: Path) -> None:
    """Four scenarios that all improve give p = 1/16 > 0.05, whatever the trials: the run could
    only spend the engineer for nothing."""
    store = tmp_path / "store"
    engineer = ScriptedEngineer([LOOK_UP_FIRST])
    optimizer = HarnessOptimizer(desk(store), engineer, config=fast(trials=3))
    with pytest.raises(
        ConfigurationError, match=r"with 4 scenario\(s\) no candidate could ever"
    ) as refused:
        optimizer.optimize(tickets(4))
    assert (
        "give at least 5 scenarios (7 for a gain to pass when all 4 candidates behave "
        "differently" in str(refused.value)
    )
    assert engineer.packets == []
    assert not (store / "evidence.sqlite3").exists(), "refused before anything was recorded"
    ungated = HarnessOptimizer(
        desk(store), ScriptedEngineer([LOOK_UP_FIRST]), config=fast(iterations=1, alpha=None)
    ).optimize(tickets(1))
    assert ungated.accepted_version == "harness-v1"


# -- bad input: clear errors, nothing lost ---------------------------------------------------------


def test_an_unparseable_answer_is_invalid_with_zero_reward(tmp_path: Path) -> None:
    engineer = ScriptedEngineer(["I would block refunds.", "<patch>[{]</patch>", LOOK_UP_FIRST])
    result = HarnessOptimizer(desk(tmp_path / "store"), engineer, config=fast()).optimize(
        tickets(5)
    )
    verdicts = by_candidate(result)
    assert verdicts[0].status == "invalid"
    assert verdicts[0].mean_reward == 0.0
    assert "no <patch>" in verdicts[0].reason
    assert verdicts[1].status == "invalid"
    assert "not valid JSON" in verdicts[1].reason
    assert verdicts[2].status == "accepted"
    proposals = [
        p for p in chain(tmp_path / "store", result.run_id) if isinstance(p, OptimizerProposal)
    ]
    assert proposals[0].text == "I would block refunds."
    assert proposals[0].problem is not None


def test_forbidden_constructs_and_terms_are_refused_naming_them(tmp_path: Path) -> None:
    importing = answer("import os\nreturn None")
    leaking = answer(
        """
        if "refund_before_lookup" in str(ctx.state):
            return block_and_prompt("no")
        return None
        """
    )
    result = HarnessOptimizer(
        desk(tmp_path / "store"), ScriptedEngineer([importing, leaking]), config=fast()
    ).optimize(tickets(5))
    verdicts = by_candidate(result)
    assert verdicts[0].status == "invalid"
    assert "import" in verdicts[0].reason
    assert "line 2" in verdicts[0].reason
    assert verdicts[1].status == "invalid"
    assert "line 2: forbidden term #1" in verdicts[1].reason
    assert "refund_before_lookup" not in verdicts[1].reason, "the reason does not leak it either"
    assert result.accepted_version is None


def test_a_hook_that_loops_forever_is_killed_recorded_and_rejected(tmp_path: Path) -> None:
    store = tmp_path / "store"
    spinning = answer(
        """
        total = 0
        for i in range(1000000):
            for j in range(1000000):
                total += 1
        return None
        """
    )
    # Only once it has blocked something — which no smoke-test context shows: caught in reruns.
    spinning_later = answer(
        """
        if any([step.blocked for step in ctx.history]):
            for i in range(1000000):
                for j in range(1000000):
                    pass
        if ctx.action.get("tool") == "issue_refund" and not ctx.predicates.get("order_looked_up"):
            return block_and_prompt("look the order up first")
        return None
        """
    )
    result = HarnessOptimizer(
        desk(store), ScriptedEngineer([spinning, spinning_later]), config=fast()
    ).optimize(tickets(5))
    verdicts = by_candidate(result)
    assert verdicts[0].status == "invalid"
    assert "smoke test" in verdicts[0].reason
    assert verdicts[1].status == "rejected"
    assert "the patch's hooks failed in" in verdicts[1].reason
    assert result.accepted_version is None
    measured = next(
        p
        for p in chain(store, result.run_id)
        if isinstance(p, OptimizerMeasured) and p.role == "candidate"
    )
    assert set(measured.failures.values()) == {"patch"}, "a crash is the patch's failure"
    assert set(measured.values.values()) == {0.0}, "never neutral: the sessions count as failed"
    assert measured.hook_errors > 0
    assert measured.experiment_id is not None
    hooks = [
        p
        for member in _sessions(store, measured.experiment_id)
        for p in chain(store, member)
        if isinstance(p, HookCalled) and p.error is not None
    ]
    assert hooks
    assert hooks[0].error is not None
    assert "lines" in hooks[0].error.message or "budget" in hooks[0].error.message


def test_a_hook_that_allocates_gigabytes_is_killed_and_refused(tmp_path: Path) -> None:
    bomb = answer(
        """
        hoard = []
        for i in range(100000):
            hoard.append([0] * 999999)
        return None
        """
    )
    result = HarnessOptimizer(
        desk(tmp_path / "store"),
        ScriptedEngineer([bomb, LOOK_UP_FIRST]),
        config=fast(sandbox="subprocess"),
    ).optimize(tickets(5))
    verdicts = by_candidate(result)
    assert verdicts[0].status == "invalid"
    assert "FAILED (memory)" in verdicts[0].reason
    assert verdicts[1].status == "accepted", "the run went on; the sandbox still works"


def _sessions(store: Path, experiment_id: str) -> list[str]:
    async def read() -> list[str]:
        reader = await read_store(store)
        return [m.session.id for m in await reader.experiment_sessions(experiment_id)]

    return anyio.run(read)


def test_an_engineer_that_is_down_costs_its_candidates_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    engineer = ScriptedEngineer([ConnectionError("endpoint down"), LOOK_UP_FIRST])
    result = HarnessOptimizer(desk(tmp_path / "a"), engineer, config=fast()).optimize(tickets(5))
    verdicts = by_candidate(result)
    assert verdicts[0].status == "failed"
    assert "endpoint down" in verdicts[0].reason
    assert result.accepted_version == "harness-v1"

    class Down:
        name = "down"
        version = "down@1"

        async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
            raise OSError("connection refused")

    result = HarnessOptimizer(desk(tmp_path / "b"), Down(), config=fast(iterations=2)).optimize(
        tickets(5)
    )
    assert result.status == "completed"
    assert result.accepted_version is None
    for iteration in result.iterations:
        assert [v.status for v in iteration.verdicts] == ["failed"] * 4
        assert "connection refused" in iteration.verdicts[0].reason


class NoScore:
    """Rules without a score(): nothing says whether a session succeeded."""

    spec = EnvironmentSpec(name="no-score", version="1", input_type=dict)

    def initialize(self, input: Any, rng: Random, roster: Mapping[str, str]) -> dict[str, int]:
        return {"n": 0}

    def observe(self, state: Any, participant: str) -> Any:
        return state

    def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        return Resolution(state={"n": state["n"] + 1}, done=True)

    def intervene(self, state: Any, intervention: Any) -> Any:
        return state


class ScoreWithoutPass(NoScore):
    def score(self, state: Any, scenario: Any) -> dict[str, float]:
        return {"n": float(state["n"])}


class ScoreRaises(NoScore):
    def score(self, state: Any, scenario: Any) -> dict[str, float]:
        raise RuntimeError("the scorer is down")


class Noop:
    implementation = "noop@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {}


def test_an_environment_without_a_success_signal_is_refused_before_spending(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer([LOOK_UP_FIRST])
    harness = EnvironmentHarness(store, environment=NoScore, agents={"a": Noop})
    with pytest.raises(ConfigurationError, match=r"no score\(\).*success signal"):
        HarnessOptimizer(harness, engineer, config=fast()).optimize([Scenario(id="s", input={})])
    assert not (store / "evidence.sqlite3").exists(), "refused before anything was recorded"

    harness = EnvironmentHarness(store, environment=ScoreWithoutPass, agents={"a": Noop})
    optimizer = HarnessOptimizer(harness, engineer, config=fast(alpha=None))
    with pytest.raises(ConfigurationError, match="never reported `passed`"):
        optimizer.optimize([Scenario(id="s", input={})])
    assert engineer.packets == [], "the engineer was never asked"
    run = anyio.run(_only_run, store)
    assert run.status == "failed"


def test_a_baseline_where_every_session_failed_is_refused_naming_why(tmp_path: Path) -> None:
    engineer = ScriptedEngineer([LOOK_UP_FIRST])
    harness = EnvironmentHarness(tmp_path / "store", environment=ScoreRaises, agents={"a": Noop})
    optimizer = HarnessOptimizer(harness, engineer, config=fast(alpha=None))
    with pytest.raises(ConfigurationError, match="every baseline session ended failed") as caught:
        optimizer.optimize([Scenario(id="s", input={})])
    assert "RuntimeError: the scorer is down" in str(caught.value)
    assert engineer.packets == [], "the engineer was never asked"


async def _version(store: Path, name: str) -> HarnessVersion:
    return await harness_version(await read_store(store), name)


async def _only_run(store: Path) -> Any:
    runs = await (await read_store(store)).optimizer_runs()
    assert len(runs) == 1
    return runs[0]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"candidates": 0}, "candidates must be a positive integer"),
        ({"capacity": True}, "capacity must be a positive integer"),
        ({"alpha": 1.5}, "alpha must be between 0 and 1"),
        ({"sandbox": "docker"}, "sandbox must be 'subprocess' or 'local'"),
        ({"confidence": 0.0}, "confidence must be between 0 and 1"),
    ],
)
def test_bad_configuration_is_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OptimizationConfig(**changes)


def test_bad_scenarios_and_engineers_are_refused(tmp_path: Path) -> None:
    harness = desk(tmp_path / "store")
    with pytest.raises(ConfigurationError, match="engineer must implement Engineer"):
        HarnessOptimizer(harness, object())  # type: ignore[arg-type]
    optimizer = HarnessOptimizer(harness, ScriptedEngineer([LOOK_UP_FIRST]), config=fast())
    with pytest.raises(ConfigurationError, match="scenarios is empty"):
        optimizer.optimize([])
    with pytest.raises(ConfigurationError, match="in both scenarios and held_out"):
        optimizer.optimize(tickets(2), held_out=tickets(1))
    with pytest.raises(ConfigurationError, match="appears twice"):
        optimizer.optimize(tickets(2) + tickets(1))


# -- crashes and resumes ---------------------------------------------------------------------------


class Crash(RuntimeError):
    pass


def test_a_crashed_run_resumes_without_measuring_anything_again(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer(rounds=[[TESTS_FIRST], [DO_NOTHING]])

    def crash_in_iteration_two(line: str) -> None:
        if line.startswith("iteration 2: 1 answer"):  # its answers are recorded: now crash
            raise Crash("the machine went down")

    optimizer = HarnessOptimizer(
        shell(store), engineer, config=fast(), progress=crash_in_iteration_two
    )
    with pytest.raises(Crash):
        optimizer.optimize(coding_tasks())
    before = experiments(store)
    assert len(before) == 2, "the baseline and iteration 1's rerun"
    run_id = anyio.run(_only_run, store).id
    assert anyio.run(_only_run, store).status == "failed"

    again = ScriptedEngineer(rounds=[])  # answers nothing: iteration 2's came from evidence
    resumed = HarnessOptimizer(shell(store), again, config=fast()).resume(run_id, coding_tasks())
    assert len(again.packets) == 1, "asked only for iteration 3, not again for iteration 2"
    assert by_candidate(resumed, 2)[0].reason.startswith("no improvement")
    after = experiments(store)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1, "only iteration 2's candidate was measured"
    assert resumed.run_id == run_id
    assert resumed.accepted_version == "harness-v1"
    assert [i.iteration for i in resumed.iterations] == [1, 2, 3]
    statuses = [p.status for p in chain(store, run_id) if isinstance(p, OptimizerStatus)]
    assert statuses == ["running", "failed", "running", "completed"]
    accepted = [p for p in chain(store, run_id) if isinstance(p, OptimizerAccepted)]
    assert len(accepted) == 1, "harness-v1 was not accepted twice"
    assert resumed.versions == (anyio.run(_version, store, "harness-v1"),), "read back again"
    decisions = [p.iteration for p in chain(store, run_id) if isinstance(p, OptimizerDecision)]
    assert decisions == [1, 2, 3]


def test_a_resume_is_refused_when_it_cannot_be_faithful(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = HarnessOptimizer(
        desk(store), ScriptedEngineer([LOOK_UP_FIRST]), config=fast()
    ).optimize(tickets(5))
    optimizer = HarnessOptimizer(desk(store), ScriptedEngineer([LOOK_UP_FIRST]), config=fast())
    with pytest.raises(ConfigurationError, match="already completed"):
        optimizer.resume(result.run_id, tickets(5))

    started = next(p for p in chain(store, result.run_id) if isinstance(p, OptimizerStarted))

    async def runs() -> tuple[str, str]:
        async with open_store(store) as writer:
            live = await RunLog.start(writer, "opt_live", started.config)  # this process runs it
            failed = await RunLog.start(writer, "opt_failed", started.config)
            await failed.append(OptimizerStatus(status="failed", reason="crashed"))
            return live.run_id, failed.run_id

    live, failed = anyio.run(runs)
    with pytest.raises(ConfigurationError, match="is being run by pid"):
        optimizer.resume(live, tickets(5))
    with pytest.raises(ConfigurationError, match="resume with the scenarios the run recorded"):
        optimizer.resume(failed, tickets(4))
    other = HarnessOptimizer(desk(store), MiningEngineer(), config=fast())
    with pytest.raises(ConfigurationError, match="recorded with engineer 'scripted'"):
        other.resume(failed, tickets(5))
    other_agent = EnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": PoliteRefundFirstPolicy}
    )
    changed = HarnessOptimizer(other_agent, ScriptedEngineer([LOOK_UP_FIRST]), config=fast())
    with pytest.raises(ConfigurationError, match="recorded with other code") as caught:
        changed.resume(failed, tickets(5))
    assert "agent 'alice' was 'refund-first-policy@1' (agent), is now 'polite@1'" in str(
        caught.value
    )
    other_name = EnvironmentHarness(
        store, environment=SupportDesk, agents={"bob": RefundFirstPolicy}
    )
    renamed = HarnessOptimizer(other_name, ScriptedEngineer([LOOK_UP_FIRST]), config=fast())
    with pytest.raises(ConfigurationError, match="participant 'alice' is no longer"):
        renamed.resume(failed, tickets(5))
    statuses = [p.status for p in chain(store, failed) if isinstance(p, OptimizerStatus)]
    assert statuses == ["running", "failed"], "a refused resume writes nothing"


class PoliteRefundFirstPolicy(RefundFirstPolicy):
    """Other code under the same participant name."""

    implementation = "polite@1"


def test_the_former_name_of_a_harness_version_still_imports_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="import HarnessVersion instead"):
        from envharness.optimizer import AcceptedVersion
    assert AcceptedVersion is HarnessVersion
    with pytest.raises(AttributeError, match="no attribute 'Accepted'"):
        _ = envharness.optimizer.Accepted


# -- statistics ------------------------------------------------------------------------------------


def test_the_sign_test_is_exact() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(8, 0) == pytest.approx(1 / 256)
    assert sign_test(3, 0) == pytest.approx(1 / 8)
    assert sign_test(4, 1) == pytest.approx(6 / 32)
    assert sign_test(0, 3) == 1.0


def test_paired_comparisons_count_missing_values_as_failures() -> None:
    def compare() -> PairedComparison:
        return paired_comparison(
            {"a": 1.0, "b": 1.0, "c": None},
            {"a": 0.0, "b": 1.0, "c": 1.0},
            seed=1,
            key="k",
            confidence=0.95,
            resamples=200,
        )

    comparison = compare()
    assert comparison.differences == {"a": 1.0, "b": 0.0, "c": -1.0}
    assert comparison.improved == ("a",)
    assert comparison.worsened == ("c",)
    assert comparison.ties == 1
    assert comparison.mean == 0.0
    assert comparison.p_value == pytest.approx(0.75)
    assert comparison.interval is not None
    assert compare() == comparison, "seeded: the same inputs give the same interval"
    assert msgspec.json.decode(msgspec.json.encode(comparison))["n"] == 3


def test_a_run_whose_process_died_is_marked_interrupted_when_the_store_opens(
    tmp_path: Path,
) -> None:
    """Like sessions and experiments: no waiting for a lease, and the run resumes after it."""
    store = tmp_path / "store"
    result = HarnessOptimizer(
        desk(store), ScriptedEngineer([LOOK_UP_FIRST]), config=fast()
    ).optimize(tickets(5))
    started = next(p for p in chain(store, result.run_id) if isinstance(p, OptimizerStarted))
    dead = RunnerRef(host=socket.gethostname(), pid=os.getpid(), started="an earlier life")

    async def crashed_run() -> str:
        async with open_store(store) as writer:
            log = await RunLog.start(writer, "opt_crashed", started.config)
            await log.append(OptimizerStatus(status="running", runner=dead))
            return log.run_id

    async def reopen() -> str:
        async with open_store(store) as writer:
            return (await writer.optimizer_run(run_id)).status

    run_id = anyio.run(crashed_run)
    assert anyio.run(reopen) == "interrupted"
    statuses = [p.status for p in chain(store, run_id) if isinstance(p, OptimizerStatus)]
    assert statuses == ["running", "running", "interrupted"]
    resumed = HarnessOptimizer(desk(store), ScriptedEngineer([LOOK_UP_FIRST]), config=fast())
    assert resumed.resume(run_id, tickets(5)).run_id == run_id


# -- the chain does not depend on which rerun ends first ------------------------------------------


class _FirstWaitsForSecond:
    """A harness whose candidate 0 rerun starts only once candidate 1's has ended (what a
    scheduler may do on its own): everything else is the harness's."""

    def __init__(self, harness: AsyncEnvironmentHarness) -> None:
        self._harness = harness
        self._second_ended = anyio.Event()
        self.ended: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._harness, name)

    @property
    def store(self) -> Path | str:
        return self._harness.store

    @property
    def is_open(self) -> bool:
        return self._harness.is_open

    @property
    def hooks(self) -> Any:
        return self._harness.hooks

    async def __aenter__(self) -> _FirstWaitsForSecond:
        await self._harness.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._harness.__aexit__(*exc_info)

    def experiment(self, name: str, *args: Any, **kwargs: Any) -> Any:
        inner = self._harness.experiment(name, *args, **kwargs)
        outer = self

        class Held:
            id = inner.id
            config = inner.config

            async def run(self) -> Any:
                if name.endswith("candidate 0"):
                    await outer._second_ended.wait()
                result = await inner.run()
                outer.ended.append(name.rsplit(" ", 1)[-1])
                if name.endswith("candidate 1"):
                    outer._second_ended.set()
                return result

        return Held()


def test_candidates_are_recorded_in_their_order_whichever_rerun_ends_first(
    tmp_path: Path,
) -> None:
    harness = _FirstWaitsForSecond(
        AsyncEnvironmentHarness(
            tmp_path / "store", environment=SupportDesk, agents={"alice": RefundFirstPolicy}
        )
    )
    optimizer = HarnessOptimizer(
        harness,  # type: ignore[arg-type]
        ScriptedEngineer([DO_NOTHING, LOOK_UP_FIRST]),
        config=fast(candidates=2, iterations=1, capacity=2),
    )
    result = anyio.run(lambda: optimizer.optimize_async(tickets(6)))
    assert harness.ended == ["baseline", "1", "0"], "candidate 1's rerun ended first"
    measured = [p for p in chain(tmp_path / "store", result.run_id)
                if isinstance(p, OptimizerMeasured)]  # fmt: skip
    assert [(m.role, m.candidate) for m in measured] == [
        ("baseline", None),
        ("candidate", 0),
        ("candidate", 1),
    ]
