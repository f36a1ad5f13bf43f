"""``envharness selftest``, ``optimize`` and ``harness list/show/diff``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness.demos.support_desk import RefundFirstPolicy
from tests.cli._support import Invoke
from tests.optimizer._loops import LOOK_UP_FIRST

ROOT = Path(__file__).resolve().parents[2]

DESK = "envharness.demos.support_desk"
SHELL = "envharness.demos.coding_shell"


def test_selftest_runs_offline_in_a_temporary_store(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("selftest")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "(temporary)" in out
    assert "baseline: 0/8 passed" in out
    assert "final:    8/8 passed" in out
    assert "selftest passed: baseline 0/8 -> patched 8/8, accepted as harness-v1" in out
    assert "ctx.predicates.get('order_looked_up') is False" in out, "the learned hook is shown"
    assert not Path("environment-sessions").exists(), "the default store was not touched"
    assert "run directory: removed with the temporary store (--store keeps it)" in out


def test_selftest_keeps_its_evidence_when_given_a_store(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = invoke("--store", store, "selftest", "--sandbox", "local", "--tickets", "8")
    assert result.exit_code == 0, result.output
    assert "baseline 0/8 -> patched 8/8" in result.stdout
    listed = invoke("--store", store, "harness", "list")
    assert listed.exit_code == 0, listed.output
    assert "harness-v1" in listed.stdout
    shown = invoke("--store", store, "harness", "show", "harness-v1")
    assert shown.exit_code == 0, shown.output
    assert "environment: support-desk@1" in shown.stdout
    assert "def on_before_action(ctx, nb):" in shown.stdout
    assert "sign test p=0.00391" in shown.stdout
    as_json = invoke("--store", store, "harness", "show", "harness-v1", "--json")
    assert json.loads(as_json.stdout)["version"] == "harness-v1"
    same = invoke("--store", store, "harness", "diff", "harness-v1", "harness-v1")
    assert same.stdout.strip() == "harness-v1 and harness-v1 have the same hooks"
    missing = invoke("--store", store, "harness", "show", "harness-v9")
    assert missing.exit_code == 2
    assert "no harness version 'harness-v9'" in missing.stderr
    assert "(versions: harness-v1)" in missing.stderr


def test_optimize_stacks_versions_and_diffs_them(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = invoke(
        "--store", store, "optimize",
        "--environment", f"{SHELL}:CodingShell",
        "--agent", f"dev={SHELL}:HastyShellPolicy",
        "--engineer", "mining",
        "--candidates", "8", "--iterations", "3", "--turns", "12",
        "--scenarios", f"{SHELL}:coding_tasks",
        "--sandbox", "local",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "baseline: 2/18 passed" in result.stdout
    assert "final:    18/18 passed" in result.stdout
    assert "iteration 1: 8 answer(s) from mining" in result.stderr, "progress goes to stderr"
    diff = invoke("--store", store, "harness", "diff", "harness-v1", "harness-v2")
    assert diff.exit_code == 0, diff.output
    lines = diff.stdout.splitlines()
    assert lines[:2] == ["--- harness-v1", "+++ harness-v2"]
    assert any(line.startswith("+# hook 2: on_before_action") for line in lines)
    listed = invoke("--store", store, "harness", "list", "--json")
    versions = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(v["version"], v["parent"]) for v in versions] == [
        ("harness-v1", None),
        ("harness-v2", "harness-v1"),
    ]


def test_optimize_with_a_scripted_engineer_and_a_scenarios_file(
    invoke: Invoke, tmp_path: Path
) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps(["not a patch", LOOK_UP_FIRST]))
    scenarios = tmp_path / "tickets.jsonl"
    scenarios.write_text(
        "\n".join(
            json.dumps(
                {
                    "id": f"t{i}",
                    "input": {"order_id": f"B-{i}", "customer": "Kay", "amount": 10.0 + i},
                }
            )
            for i in range(5)
        )
    )
    result = invoke(
        "--store", tmp_path / "store", "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", answers, "--scenarios", scenarios,
        "--turns", "8", "--sandbox", "local", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accepted_version"] == "harness-v1"
    statuses = [v["status"] for v in report["iterations"][0]["verdicts"]]
    assert statuses == ["invalid", "accepted"]


def test_optimize_exits_1_when_nothing_is_accepted(invoke: Invoke, tmp_path: Path) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps(["not a patch"]))
    result = invoke(
        "--store", tmp_path / "store", "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", answers, "--input",
        '{"order_id": "A-1", "customer": "Kay", "amount": 3.0}',
        "--turns", "8", "--sandbox", "local", "--iterations", "1", "--alpha", "1",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "candidate 0: invalid" in result.stdout


def test_optimize_refuses_a_single_scenario_its_gate_could_never_accept(
    invoke: Invoke, tmp_path: Path
) -> None:
    """One scenario (the --input default): the sign test's p is at best 0.5, so nothing could
    ever be accepted at the default alpha; refused before the engineer is asked."""
    store = tmp_path / "store"
    result = invoke(
        "--store", store, "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--input", '{"order_id": "A-1", "customer": "Kay", "amount": 3.0}', "--turns", "8",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "with 1 scenario(s) no candidate could ever be accepted" in result.stderr
    assert "--alpha 1" in result.stderr
    assert not (store / "evidence.sqlite3").exists()


def test_optimize_a_score_metric(invoke: Invoke, tmp_path: Path) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([LOOK_UP_FIRST]))
    result = invoke(
        "--store", tmp_path / "store", "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", answers, "--scenarios", f"{DESK}:tickets",
        "--metric", "resolved", "--turns", "8", "--sandbox", "local", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accepted_version"] == "harness-v1"
    assert report["final"]["mean_reward"] == 1.0
    assert report["iterations"][0]["hooks"] == {"0": {"on_before_action:block_and_prompt": 8}}


def test_bad_optimize_arguments_are_named(invoke: Invoke, tmp_path: Path) -> None:
    base = ("--store", tmp_path / "store", "optimize", "--environment", f"{DESK}:SupportDesk",
            "--agent", f"alice={DESK}:RefundFirstPolicy")  # fmt: skip
    cases = [
        (("--engineer", "oracle"), "--engineer must be one of mining, scripted, openai"),
        (("--engineer", "scripted"), "--engineer scripted needs --answers FILE"),
        (("--engineer", "openai"), "--engineer openai needs --model NAME"),
        (
            ("--engineer", "openai", "--model", "m", "--api-key-env", "ENVHARNESS_NO_SUCH_KEY"),
            "reads its API key from $ENVHARNESS_NO_SUCH_KEY, which is not set",
        ),
        (("--sandbox", "vm"), "--sandbox must be one of subprocess, local"),
        (("--scenarios", str(tmp_path / "missing.jsonl")), "cannot read"),
        (("--scenarios", f"{DESK}:nothing"), "has no attribute 'nothing'"),
    ]
    for extra, message in cases:
        result = invoke(*base, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.stderr, (extra, result.stderr)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "input": {}}\n{"id": "b", "inputs": {}}\n')
    result = invoke(*base, "--scenarios", bad)
    assert result.exit_code == 2
    assert "bad.jsonl:2: unknown key(s) inputs" in result.stderr
    answers = tmp_path / "answers.json"
    answers.write_text('{"not": "a list"}')
    result = invoke(*base, "--engineer", "scripted", "--answers", answers)
    assert result.exit_code == 2
    assert "must be a JSON list of answer strings" in result.stderr


def test_harness_runs_lists_the_runs_and_what_they_accepted(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    invoke("--store", store, "selftest", "--sandbox", "local", "--tickets", "8")
    result = invoke("--store", store, "harness", "runs")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["run", "status", "created", "versions"]
    assert row.startswith("opt_")
    assert row.split()[1:2] == ["completed"]
    assert row.endswith("harness-v1")
    [entry] = [json.loads(line) for line in invoke("--store", store, "harness", "runs",
                                                   "--json").stdout.splitlines()]  # fmt: skip
    assert entry["status"] == "completed"
    assert entry["versions"] == ["harness-v1"]
    empty = tmp_path / "empty"
    invoke("--store", empty, "quickstart", "--turns", "2")
    none = invoke("--store", empty, "harness", "runs")
    assert none.exit_code == 0
    assert "no optimizer runs" in none.stderr


def test_harness_list_on_a_store_without_versions(invoke: Invoke, tmp_path: Path) -> None:
    invoke("--store", tmp_path / "store", "selftest", "--sandbox", "local", "--tickets", "8")
    empty = tmp_path / "empty"
    invoke("--store", empty, "quickstart", "--turns", "2")
    result = invoke("--store", empty, "harness", "list")
    assert result.exit_code == 0
    assert "no harness versions" in result.stderr


def test_the_openai_engineer_is_wired_to_the_model_engineer() -> None:
    from envharness.cli.optimize import _engineer
    from envharness.llm import ModelEngineer

    engineer = _engineer("openai", None, "tiny-model", "http://127.0.0.1:9/v1", "")
    assert isinstance(engineer, ModelEngineer)
    assert engineer.name == "openai"
    assert engineer.version.endswith("/tiny-model")


class SlowDeskPolicy(RefundFirstPolicy):
    """The support desk's frozen policy, slow enough to be interrupted mid-run."""

    implementation = "slow-refund-first-policy@1"

    async def act(self, observation: Any) -> dict[str, Any]:  # type: ignore[override]
        await anyio.sleep(0.05)
        return super().act(observation)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_names_the_run_and_resume_finishes_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    command = [
        sys.executable, "-m", "envharness.cli", "--store", str(store), "optimize",
        "--environment", f"{DESK}:SupportDesk",
        "--agent", "alice=tests.cli.test_optimize:SlowDeskPolicy",
        "--scenarios", f"{DESK}:tickets", "--turns", "8", "--sandbox", "local",
    ]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "ENVHARNESS_STORE"}
    with subprocess.Popen(
        command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as process:  # fmt: skip
        assert process.stderr is not None
        started = process.stderr.readline()
        assert started.startswith("optimizer run opt_"), started
        run_id = started.split()[2]
        assert process.stderr.readline().startswith("baseline: 0/8 passed")
        process.send_signal(signal.SIGINT)  # while iteration 1's candidates are asked or rerun
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, rest
    assert f"optimizer run {run_id} was recorded as stopped" in rest
    assert f"--resume {run_id}" in rest
    listed = subprocess.run(
        [*command[:5], "harness", "runs"], cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert f"{run_id}   stopped" in listed.stdout, listed
    resumed = subprocess.run(
        [*command, "--resume", run_id], cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"optimizer run {run_id} resumed" in resumed.stderr
    assert f"optimizer run {run_id}: completed" in resumed.stdout
    assert "final:    8/8 passed" in resumed.stdout
