"""Baseline and ablated engineers, and the ablation table's arithmetic and file handling."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.optimizer import (
    FailurePacket,
    LocalSandbox,
    MiningEngineer,
    ScriptedEngineer,
    parse_answer,
    validate_patch,
)
from research.ablations import CONDITIONS, END, START, run_ablations, setups, wilson, write_table
from research.baselines import RandomPatchEngineer, TaskOnly, WithoutHooks
from tests.research.test_rerun import PRECONDITION, answer


@pytest.fixture(scope="module")
def packet(tmp_path_factory: pytest.TempPathFactory) -> FailurePacket:
    """The support desk's real failure packet (as the optimizer showed it to its engineer)."""
    from envharness.optimizer import HarnessOptimizer, OptimizationConfig

    store = tmp_path_factory.mktemp("packet") / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    engineer = ScriptedEngineer(["nothing"])
    config = OptimizationConfig(candidates=1, iterations=1, turns=8, sandbox="local", alpha=None)
    HarnessOptimizer(harness, engineer, config=config).optimize(tickets(3))
    return engineer.packets[0]


def test_random_patches_are_valid_distinct_draws(packet: FailurePacket) -> None:
    first = RandomPatchEngineer(1).answers(packet, 8, seed=0)
    assert len(first) == 8
    assert [p.text for p in RandomPatchEngineer(1).answers(packet, 8, seed=0)] == [
        p.text for p in first
    ]  # reproducible
    assert [p.text for p in RandomPatchEngineer(2).answers(packet, 8, seed=0)] != [
        p.text for p in first
    ]

    async def check_all() -> None:
        async with LocalSandbox() as sandbox:
            for proposal in first:
                await validate_patch(parse_answer(proposal.text).patch, sandbox=sandbox,
                                     forbidden_terms=packet.forbidden_terms)  # fmt: skip

    anyio.run(check_all)


def test_without_hooks_removes_the_ablated_operations() -> None:
    class Fixed:
        name, version = "fixed", "fixed@1"

        async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[object]:
            return await ScriptedEngineer([answer(PRECONDITION)]).propose(packet, count, seed=seed)

    bare = FailurePacket(environment="x", hooks=())
    [kept] = anyio.run(lambda: WithoutHooks(Fixed(), {"on_post_step"}).propose(bare, 1, seed=0))
    assert parse_answer(kept.text).patch == parse_answer(answer(PRECONDITION)).patch
    [gone] = anyio.run(lambda: WithoutHooks(Fixed(), {"on_before_action"}).propose(bare, 1, seed=0))
    assert "<patch>" not in gone.text


def test_task_only_hides_the_failures(packet: FailurePacket) -> None:
    shown: list[FailurePacket] = []

    class Spy(MiningEngineer):
        async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[object]:
            shown.append(packet)
            return list(await super().propose(packet, count, seed=seed))

    assert packet.clusters
    proposals = anyio.run(lambda: TaskOnly(Spy()).propose(packet, 4, seed=0))
    [seen] = shown
    assert seen.clusters == ()
    assert seen.state_keys == ()
    assert seen.passing == ()
    assert seen.task
    assert proposals == []  # the mining engineer has nothing to mine from


def test_wilson_intervals() -> None:
    low, high = wilson(0, 8)
    assert low == 0.0
    assert high == pytest.approx(0.3244, abs=1e-3)
    low, high = wilson(8, 8)
    assert high == 1.0
    assert low == pytest.approx(0.6756, abs=1e-3)


def test_one_condition_runs_and_the_table_replaces_only_its_block(tmp_path: Path) -> None:
    [desk] = [s for s in setups() if s.name == "support-desk"]
    full = next(c for c in CONDITIONS if c.name == "full")
    rows = run_ablations(tmp_path / "store", 1, conditions=[full], chosen=[desk])
    [row] = rows
    assert (row["train_final"], row["held_final"]) == (8, 8)
    assert (row["train_baseline"], row["held_baseline"]) == (0, 0)
    out = tmp_path / "research.md"
    out.write_text(f"# Research\n\nprose\n{START}\nold\n{END}\nmore prose\n")
    from research.ablations import table

    write_table(out, table(rows, "python research/ablations.py --repeats 1", 1))
    text = out.read_text()
    assert text.startswith("# Research\n\nprose\n")
    assert text.endswith("more prose\n")
    assert "old" not in text
    assert "| support-desk | full | 1.00 [0.68, 1.00] | 1.00 [0.68, 1.00] | 1.0 | 0 |" in text
    assert json.dumps(row)  # the raw row is plain JSON
