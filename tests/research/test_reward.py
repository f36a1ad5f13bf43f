"""The reward's contract: invalid → 0, Δ = patched - baseline, crashes cost, cached, concurrent."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from research.reward import (
    INVALID_REWARD,
    Invalid,
    Measured,
    Prepared,
    RerunReward,
    RewardEntry,
    completion_text,
)

HELPS = "<patch>helps</patch>"
HURTS = "<patch>hurts</patch>"
CRASHES = "<patch>crashes</patch>"


class Recorder:
    """Scores patches by their text; counts reruns and how many ran at once."""

    def __init__(self) -> None:
        self.reruns: list[tuple[str, str]] = []
        self.running = 0
        self.most_at_once = 0
        self.gate: anyio.Event | None = None

    async def prepare(self, text: str, batch: str) -> Prepared | Invalid:
        if not text.startswith("<patch>"):
            return Invalid(problem="the answer has no <patch>…</patch> block")
        return Prepared(digest=text.removeprefix("<patch>").removesuffix("</patch>"))

    async def rerun(self, prepared: Prepared, batch: str) -> Measured:
        self.reruns.append((prepared.digest, batch))
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await anyio.lowlevel.checkpoint()
        self.running -= 1
        baseline = {"s1": 0.0, "s2": 1.0, "s3": 0.0, "s4": 1.0}
        if prepared.digest == "helps":
            patched = {"s1": 1.0, "s2": 1.0, "s3": 1.0, "s4": 1.0}
            return Measured(baseline=baseline, patched=patched)
        if prepared.digest == "hurts":
            patched = {"s1": 0.0, "s2": 0.0, "s3": 0.0, "s4": 1.0}
            return Measured(baseline=baseline, patched=patched)
        patched = {"s1": 0.0, "s2": 0.0, "s3": 0.0, "s4": 1.0}
        return Measured(baseline=baseline, patched=patched, patch_failures=("s1", "s2"))


def answers(*texts: str) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": text}] for text in texts]


def test_invalid_answers_earn_zero_and_are_never_rerun() -> None:
    evaluator = Recorder()
    reward = RerunReward(evaluator)
    got = reward(prompts=None, completions=answers("no patch here", ""), batch=["b", "b"])
    assert got == [INVALID_REWARD, INVALID_REWARD] == [0.0, 0.0]
    assert evaluator.reruns == []
    assert reward.stats["invalid"] == 2


def test_the_reward_is_the_mean_paired_improvement() -> None:
    reward = RerunReward(Recorder())
    assert reward(completions=answers(HELPS, HURTS), batch=["b", "b"]) == [0.5, -0.25]


def test_a_patch_that_crashes_sessions_pays_for_it() -> None:
    """Crashed sessions count as failures and cost ``crash_penalty`` x their share on top, so a
    crash is never worth as much as a harmless patch (which earns 0 on a failure batch)."""
    reward = RerunReward(Recorder(), crash_penalty=1.0)
    [crashed] = reward(completions=answers(CRASHES), batch=["b"])
    assert crashed == pytest.approx(-0.25 - 0.5)
    assert crashed < INVALID_REWARD
    [entry] = reward.cached.values()
    assert entry.patch_failures == 2
    assert entry.delta == pytest.approx(-0.25)


def test_one_patch_on_one_batch_is_measured_once() -> None:
    evaluator = Recorder()
    reward = RerunReward(evaluator)
    first = reward(completions=answers(HELPS, HELPS, HURTS), batch=["b", "b", "b"])
    again = reward(completions=answers(HELPS), batch=["b"])
    other_batch = reward(completions=answers(HELPS), batch=["c"])
    assert first == [0.5, 0.5, -0.25]
    assert again == [0.5]
    assert other_batch == [0.5]
    assert sorted(evaluator.reruns) == [("helps", "b"), ("helps", "c"), ("hurts", "b")]
    assert reward.stats["cache_hits"] == 2


def test_the_cache_file_survives_a_restart(tmp_path: Path) -> None:
    cache = tmp_path / "rewards.jsonl"
    RerunReward(Recorder(), cache_file=cache)(completions=answers(HELPS), batch=["b"])
    evaluator = Recorder()
    restarted = RerunReward(evaluator, cache_file=cache)
    assert restarted(completions=answers(HELPS), batch=["b"]) == [0.5]
    assert evaluator.reruns == []
    assert isinstance(restarted.cached[("helps", "b")], RewardEntry)


def test_distinct_patches_of_one_call_are_rerun_concurrently() -> None:
    evaluator = Recorder()
    RerunReward(evaluator)(completions=answers(HELPS, HURTS, CRASHES), batch=["b"] * 3)
    assert evaluator.most_at_once == 3


def test_rows_without_a_batch_are_refused() -> None:
    with pytest.raises(ValueError, match="'batch' column"):
        RerunReward(Recorder())(completions=answers(HELPS))


def test_a_rerun_that_misses_a_scenario_is_an_error_not_a_reward() -> None:
    class Partial(Recorder):
        async def rerun(self, prepared: Prepared, batch: str) -> Measured:
            return Measured(baseline={"s1": 0.0, "s2": 0.0}, patched={"s1": 1.0})

    with pytest.raises(ValueError, match=r"did not measure scenario\(s\) \['s2'\]"):
        RerunReward(Partial())(completions=answers(HELPS), batch=["b"])


def test_an_infrastructure_failure_earns_no_reward_and_is_measured_again() -> None:
    class Flaky(Recorder):
        async def rerun(self, prepared: Prepared, batch: str) -> Measured:
            self.reruns.append((prepared.digest, batch))
            return Measured(baseline={}, patched={}, infrastructure="the sandbox died")

    evaluator = Flaky()
    reward = RerunReward(evaluator)
    assert reward(completions=answers(HELPS), batch=["b"]) == [None]
    assert reward(completions=answers(HELPS), batch=["b"]) == [None]
    assert len(evaluator.reruns) == 2
    assert reward.stats["infrastructure"] == 2


def test_completion_text_reads_both_trl_shapes() -> None:
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "chat"}]) == "chat"
    assert completion_text([]) == ""
