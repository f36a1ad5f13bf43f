"""SFT and GRPO of the smoke configuration: a tiny model, a few steps, in seconds, resumable."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from research.reward import Invalid, Measured, Prepared, RerunReward
from research.runs import ResumeError
from research.training import (
    GRPO_PAPER,
    SFT_PAPER,
    GRPOSettings,
    NothingToLearn,
    SFTSettings,
    train_grpo,
    train_sft,
)
from tests.research.conftest import script


class HalfRight:
    """A fake evaluator: anything with a ``<`` is a patch; its digest decides if it helps."""

    def __init__(self) -> None:
        self.reruns = 0

    async def prepare(self, text: str, batch: str) -> Prepared | Invalid:
        if "<" not in text:
            return Invalid(problem="no <patch> block")
        return Prepared(digest=hashlib.sha256(text.encode()).hexdigest())

    async def rerun(self, prepared: Prepared, batch: str) -> Measured:
        self.reruns += 1
        helped = float(int(prepared.digest, 16) % 2)
        return Measured(baseline={"s1": 0.0, "s2": 0.0}, patched={"s1": helped, "s2": 0.0})


class EveryTextCounts(HalfRight):
    """Like HalfRight, but any answer counts as a patch (a tiny model's 8 tokens rarely have <)."""

    async def prepare(self, text: str, batch: str) -> Prepared | Invalid:
        return Prepared(digest=hashlib.sha256(text.encode()).hexdigest())


class StopAt:
    """A trainer callback that interrupts training after ``step`` (as a crash would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= self.step:
            raise KeyboardInterrupt


def test_twenty_sft_steps_of_the_tiny_model(
    tiny_model: Path, sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "sft"
    record = train_sft(str(tiny_model), sft_rows, out, SFTSettings(max_steps=20, save_steps=10))
    assert record["status"] == "finished"
    assert record["global_step"] == 20
    assert (out / "config.json").is_file()
    assert (out / "model.safetensors").is_file()
    saved = json.loads((out / "run.json").read_text())
    assert saved["paper_defaults"] == SFT_PAPER
    assert saved["settings"]["learning_rate"] == 1e-5
    assert saved["settings"]["lr_scheduler"] == "cosine"
    assert saved["overrides"] == {}
    assert saved["versions"]["trl"]
    assert saved["versions"]["torch"]


def test_sft_builds_the_tiny_model_itself(sft_rows: list[dict[str, Any]], tmp_path: Path) -> None:
    record = train_sft(
        "tiny", sft_rows, tmp_path / "sft", SFTSettings(max_steps=2, lr_scheduler="linear")
    )
    assert record["global_step"] == 2
    assert record["resolved_model"] == str(tmp_path / "sft" / "tiny-base")
    assert record["overrides"] == {"lr_scheduler": "linear"}


def test_five_grpo_steps_with_the_rerun_reward(tiny_model: Path, tmp_path: Path) -> None:
    rows = [{"prompt": row, "batch": "batch-a"} for row in _prompts(4)]
    evaluator = HalfRight()
    reward = RerunReward(evaluator, cache_file=tmp_path / "grpo" / "rewards.jsonl")
    settings = GRPOSettings(max_steps=5, max_completion_length=24, save_steps=5)
    record = train_grpo(str(tiny_model), rows, reward, tmp_path / "grpo", settings)
    assert record["global_step"] == 5
    assert reward.stats["completions"] == 5 * settings.num_generations
    saved = json.loads((tmp_path / "grpo" / "run.json").read_text())
    assert saved["paper_defaults"] == GRPO_PAPER
    for key, value in GRPO_PAPER.items():
        assert saved["settings"][key] == value
    assert saved["batches"] == ["batch-a"]
    assert saved["reward_stats"]["completions"] == 40


def test_an_interrupted_sft_run_resumes_from_its_last_checkpoint(
    tiny_model: Path, sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "sft"
    settings = SFTSettings(max_steps=8, save_steps=3)
    with pytest.raises(KeyboardInterrupt):
        train_sft(str(tiny_model), sft_rows, out, settings, callbacks=[StopAt(7)])
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    record = train_sft(str(tiny_model), sft_rows, out, settings)
    assert record["status"] == "finished"
    assert record["global_step"] == 8
    assert [resume["from"] for resume in record["resumes"]] == ["checkpoint-6"]


def test_a_finished_run_is_not_trained_again(
    tiny_model: Path, sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    settings = SFTSettings(max_steps=1)
    train_sft(str(tiny_model), sft_rows, tmp_path / "sft", settings)
    with pytest.raises(ResumeError, match="finished sft run"):
        train_sft(str(tiny_model), sft_rows, tmp_path / "sft", settings)


def test_resuming_with_other_settings_is_refused_naming_them(
    tiny_model: Path, sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "sft"
    settings = SFTSettings(max_steps=4, save_steps=1)
    with pytest.raises(KeyboardInterrupt):
        train_sft(str(tiny_model), sft_rows, out, settings, callbacks=[StopAt(2)])
    with pytest.raises(ResumeError, match=r"learning_rate: 1e-05 -> 0.001"):
        train_sft(str(tiny_model), sft_rows, out, SFTSettings(max_steps=4, learning_rate=1e-3))


def test_no_pairs_means_nothing_to_learn(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(NothingToLearn, match="nothing to learn"):
        train_sft(str(tiny_model), [], tmp_path / "sft")
    assert not (tmp_path / "sft").exists()


def test_the_cli_trains_and_says_nothing_to_learn_with_exit_0(
    tiny_model: Path,
    sft_rows: list[dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in sft_rows))
    out = tmp_path / "ckpt"
    code, stdout, stderr = _main(capsys, "sft", "--model", str(tiny_model), "--data", str(data),
                                 "--out", str(out), "--max-steps", "2")  # fmt: skip
    assert code == 0, stderr
    assert json.loads(stdout.splitlines()[-1])["global_step"] == 2
    assert json.loads((out / "run.json").read_text())["settings"]["data"]

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = _cli("sft", "--model", "tiny", "--data", str(empty), "--out", str(tmp_path / "e"))
    assert done.returncode == 0
    assert "nothing trained" in done.stderr
    assert "nothing to learn" in done.stderr


@pytest.mark.parametrize(
    ("model", "content", "message"),
    [
        ("/no/such/model", None, "model path '/no/such/model' does not exist"),
        ("tiny", "not json\n", "sft.jsonl:1: not JSON"),
        ("tiny", '{"prompt": [{"role": "user", "content": "x"}]}\n', "needs either 'messages'"),
        ("tiny", '{"messages": [{"role": "robot", "content": "x"}]}\n', "messages[0] must be"),
        ("tiny", '{"messages": [{"role": "user", "content": "x"}]}\n', "no assistant turn"),
    ],
)
def test_bad_input_is_named_with_exit_2(
    model: str, content: str | None, message: str, sft_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text(content if content is not None else json.dumps(sft_rows[0]) + "\n")
    done = _cli("sft", "--model", model, "--data", str(data), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_rows_longer_than_max_length_are_named_with_exit_2(
    sft_rows: list[dict[str, Any]],
    tiny_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The model's own tokenizer measures the rows (the one built for the session), so the
    trainers' libraries are loaded: the command runs in this process, which has them already."""
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(sft_rows[0]) + "\n")
    code, _, stderr = _main(capsys, "sft", "--model", str(tiny_model), "--data", str(data),
                            "--out", str(tmp_path / "o"), "--max-length", "8")  # fmt: skip
    assert code == 2
    assert "longer than max_length 8 tokens" in stderr
    assert "Traceback" not in stderr


def test_a_model_directory_that_is_not_a_checkpoint_is_named(tmp_path: Path) -> None:
    from research.models import ModelSpecError, resolve_model

    with pytest.raises(ModelSpecError, match=r"has no config\.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelSpecError, match=r"not a \.gguf file"):
        resolve_model(str(tmp_path / "weights.bin"))


def _prompts(count: int) -> list[list[dict[str, str]]]:
    return [
        [
            {"role": "system", "content": "You improve an agent's harness with hook patches."},
            {"role": "user", "content": f"Failure {n}: issue_refund before lookup_order."},
        ]
        for n in range(count)
    ]


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The script's ``main`` in this process: what it prints and returns, without paying a fresh
    interpreter's import of torch and the trainers (~5 s of CPU) again; the bad-input cases
    above run the script itself."""
    from research.train_engineer import main

    capsys.readouterr()
    code = main(list(args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*script("train_engineer.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_an_interrupted_grpo_run_resumes_and_reuses_its_measured_rewards(
    tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "grpo"
    rows = [{"prompt": row, "batch": "batch-a"} for row in _prompts(2)]
    settings = GRPOSettings(max_steps=4, max_completion_length=8, save_steps=2, num_generations=4)
    first = EveryTextCounts()
    with pytest.raises(KeyboardInterrupt):
        train_grpo(str(tiny_model), rows, RerunReward(first, cache_file=out / "rewards.jsonl"),
                   out, settings, callbacks=[StopAt(3)])  # fmt: skip
    measured = first.reruns
    assert measured > 0
    reward = RerunReward(EveryTextCounts(), cache_file=out / "rewards.jsonl")
    assert len(reward.cached) == measured  # what was measured before the crash is kept
    record = train_grpo(str(tiny_model), rows, reward, out, settings)
    assert record["global_step"] == 4
    assert [resume["from"] for resume in record["resumes"]] == ["checkpoint-2"]
