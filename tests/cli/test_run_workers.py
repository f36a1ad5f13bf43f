"""``run MANIFEST.toml --workers N``: an experiment's sessions in worker processes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli._support import ROOT, Invoke
from tests.optimizer._loops import LOOK_UP_FIRST

EXAMPLE = ROOT / "examples" / "manifest" / "experiment.toml"
DESK = "envharness.demos.support_desk"


def test_the_example_manifest_runs_in_two_workers(invoke: Invoke, store_path: Path) -> None:
    """Python and command agents alike: the command agents' processes start in the workers."""
    result = invoke("--store", store_path, "run", EXAMPLE, "--workers", "2")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[5] == "4 completed, 0 failed of 4"
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_workers_must_be_at_least_one(invoke: Invoke, store_path: Path) -> None:
    result = invoke("--store", store_path, "run", EXAMPLE, "--workers", "0")
    assert result.exit_code == 2
    assert "--workers" in result.stderr
    assert not store_path.exists()


def test_workers_need_an_experiment(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "run", "envharness.fixtures:SyntheticEnvironment",
        "--agent", "a=envharness.fixtures:SyntheticAgent", "--turns", "1", "--workers", "2",
    )  # fmt: skip
    assert result.exit_code != 0
    assert "give an experiment manifest" in result.stderr
    assert not store_path.exists()


def test_a_malformed_ray_address_is_refused_before_anything_runs(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "run", EXAMPLE, "--ray", "ray://head:10001")
    assert result.exit_code != 0
    assert "Ray Client (ray://) is not supported" in result.stderr
    assert not store_path.exists()


def test_optimize_reruns_in_workers(invoke: Invoke, tmp_path: Path) -> None:
    """The reruns' sessions run in a worker process, the hooks in a sandbox opened there."""
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([LOOK_UP_FIRST]))
    result = invoke(
        "--store", tmp_path / "store", "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", answers, "--scenarios", f"{DESK}:tickets",
        "--turns", "8", "--sandbox", "local", "--iterations", "1", "--candidates", "1",
        "--workers", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["accepted_version"] == "harness-v1"
    assert invoke("--store", tmp_path / "store", "verify").exit_code == 0
