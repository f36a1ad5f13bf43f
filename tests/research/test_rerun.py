"""The GRPO reward on the real optimizer code: support desk, real reruns, same seeds."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.llm import load_prompt, render_packet
from research.rerun import GrpoInputs, RerunSettings, grpo_inputs
from research.training import NothingToLearn
from tests.research.conftest import script

PRECONDITION = """\
def on_before_action(ctx, nb):
    action = ctx.action if isinstance(ctx.action, dict) else {}
    if action.get("tool") == "issue_refund" and not ctx.predicates.get("order_looked_up"):
        return block_and_prompt("look the order up first: call lookup_order")
    return None
"""
CRASHING = """\
def on_before_action(ctx, nb):
    return nb["missing"]
"""
CRASHES_IN_RERUNS = """\
def on_before_action(ctx, nb):
    action = ctx.action if isinstance(ctx.action, dict) else {}
    if action.get("tool") == "lookup_order" and not ctx.predicates.get("refund_issued"):
        return nb["missing"]
    if action.get("tool") == "issue_refund" and not ctx.predicates.get("order_looked_up"):
        return block_and_prompt("look the order up first: call lookup_order")
    return None
"""
"""Passes the smoke test (in the recorded failures a lookup always follows the refund) and
crashes in the reruns, where its own veto makes the lookup come first."""
SETTINGS = RerunSettings(turns=8, sandbox="local", batch_size=2, capacity=2)


class LookupFirst(RefundFirstPolicy):
    implementation = "lookup-first@1"

    def act(self, observation: object) -> dict[str, object]:
        assert isinstance(observation, dict)
        done = [step["tool"] for step in observation["done"]]
        order = observation["order_id"]
        if "lookup_order" not in done:
            return {"tool": "lookup_order", "order_id": order}
        if "issue_refund" not in done:
            amount = observation["amount_requested"]
            return {"tool": "issue_refund", "order_id": order, "amount": amount}
        return {"tool": "reply", "template": "refund_issued"}


def answer(code: str) -> str:
    ops = [{"op": "add_code_hook", "hook": "on_before_action", "code": code}]
    return f"<think>refund needs a lookup</think><patch>{json.dumps(ops)}</patch>"


@pytest.fixture
def inputs(tmp_path: Path) -> Iterator[GrpoInputs]:
    harness = AsyncEnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"agent": RefundFirstPolicy}
    )
    with grpo_inputs(
        harness, tickets(4), settings=SETTINGS, cache_file=tmp_path / "rewards.jsonl"
    ) as found:
        yield found


def test_batches_are_the_failing_chunks_with_the_engineers_own_prompt(inputs: GrpoInputs) -> None:
    assert [len(batch.scenarios) for batch in inputs.batches] == [2, 2]
    assert len({batch.identity for batch in inputs.batches}) == 2
    for batch, row in zip(inputs.batches, inputs.rows, strict=True):
        assert batch.baseline == {s.id: 0.0 for s in batch.scenarios}
        rendered = render_packet(load_prompt("engineer-v1"), batch.packet)
        assert row["prompt"] == [{"role": m.role, "content": m.content} for m in rendered]
        assert row["batch"] == batch.identity


def test_a_helpful_patch_earns_its_measured_improvement(inputs: GrpoInputs) -> None:
    batch = inputs.rows[0]["batch"]
    rewards = inputs.reward(completions=[[{"role": "assistant", "content": answer(PRECONDITION)}]],
                            batch=[batch])  # fmt: skip
    assert rewards == [1.0]  # both tickets go from failed to resolved


def test_invalid_and_crashing_patches(inputs: GrpoInputs) -> None:
    batch = inputs.rows[0]["batch"]
    importing = answer("import os\ndef on_before_action(ctx, nb):\n    return None\n")
    texts = ["no patch at all", importing, answer(CRASHING)]
    rewards = inputs.reward.score(texts, [batch] * 3)
    assert rewards[0] == 0.0  # unparseable
    assert rewards[1] == 0.0  # refused by the AST policy
    # The crash is caught by the smoke test, before any rerun: invalid, 0 — never a rerun that
    # the crash could turn neutral.
    assert rewards[2] == 0.0
    assert inputs.reward.stats["reruns"] == 0


def test_a_patch_that_crashes_its_reruns_is_worse_than_doing_nothing(inputs: GrpoInputs) -> None:
    batch = inputs.rows[0]["batch"]
    [reward] = inputs.reward.score([answer(CRASHES_IN_RERUNS)], [batch])
    [entry] = inputs.reward.cached.values()
    assert entry.patch_failures == 2  # both sessions failed because of the patch
    assert entry.delta == 0.0  # failed before, failed after ...
    assert reward == -1.0  # ... but crashing costs: below the 0 of a harmless patch


def test_a_patch_is_rerun_once_per_batch_and_the_cache_persists(
    inputs: GrpoInputs, tmp_path: Path
) -> None:
    first, second = inputs.rows[0]["batch"], inputs.rows[1]["batch"]
    text = answer(PRECONDITION)
    assert inputs.reward.score([text, text, text], [first, first, second]) == [1.0, 1.0, 1.0]
    assert inputs.reward.stats["reruns"] == 2
    assert inputs.reward.stats["cache_hits"] == 1
    lines = (tmp_path / "rewards.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["batch"] for line in lines) == sorted([first, second])


def test_a_run_without_failures_has_nothing_to_learn(tmp_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        tmp_path / "store", environment=SupportDesk, agents={"agent": LookupFirst}
    )
    with (
        pytest.raises(NothingToLearn, match="passed at baseline"),
        grpo_inputs(harness, tickets(2), settings=SETTINGS),
    ):
        pass


def grpo_arguments(store: Path, out: Path, *extra: str) -> list[str]:
    return ["grpo", "--store", str(store), "--out", str(out),
            "--environment", "envharness.demos.support_desk:SupportDesk",
            "--scenarios", "envharness.demos.support_desk:tickets", "--turns", "8",
            "--sandbox", "local", "--batch-size", "4", "-K", "4", "--max-completion-length", "16",
            *extra]  # fmt: skip


def grpo_command(store: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*script("train_engineer.py"), *grpo_arguments(store, out, *extra)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_grpo_command_learns_from_the_support_desks_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script's ``main`` in this process, which saves a fresh interpreter's import of torch
    and the trainers (~5 s of CPU); the two commands below run the script itself."""
    from research.train_engineer import main

    out = tmp_path / "grpo"
    policy = "agent=envharness.demos.support_desk:RefundFirstPolicy"
    code = main(grpo_arguments(tmp_path / "store", out, "--agent", policy, "--model", "tiny",
                               "--max-steps", "2"))  # fmt: skip
    assert code == 0, capsys.readouterr().err
    record = json.loads((out / "run.json").read_text())
    assert record["global_step"] == 2
    assert len(record["failure_batches"]) == 2  # 8 tickets, batches of 4, all failing
    assert record["reward_stats"]["completions"] == 2 * 4
    assert record["rerun"]["turns"] == 8


def test_the_grpo_command_with_nothing_to_learn_exits_0(tmp_path: Path) -> None:
    policy = "agent=tests.research.test_rerun:LookupFirst"
    done = grpo_command(tmp_path / "store", tmp_path / "grpo", "--agent", policy, "--model", "tiny")
    assert done.returncode == 0, done.stderr
    assert "no failure to learn from" in done.stderr
    assert not (tmp_path / "grpo" / "run.json").exists()


def test_the_grpo_command_refuses_a_missing_model_before_measuring(tmp_path: Path) -> None:
    policy = "agent=envharness.demos.support_desk:RefundFirstPolicy"
    done = grpo_command(tmp_path / "store", tmp_path / "grpo", "--agent", policy,
                        "--model", str(tmp_path / "nope"))  # fmt: skip
    assert done.returncode == 2
    assert "does not exist" in done.stderr
    assert not (tmp_path / "store").exists()
