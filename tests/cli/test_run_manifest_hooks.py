"""``run`` and ``resume`` with a manifest that names hooks or a stored harness version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envharness.manifest import load_manifest
from tests.cli._support import Invoke
from tests.test_manifest_hooks import DESK, DOOR, ME


def write(folder: Path, text: str, name: str = "experiment.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def only_experiment(invoke: Invoke, store: Path) -> str:
    listed = invoke("--store", store, "experiments", "--json")
    [line] = listed.stdout.splitlines()
    return str(json.loads(line)["id"])


def test_run_records_the_manifests_hooks(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    result = invoke("--store", store_path, "run", write(tmp_path, DOOR))

    assert result.exit_code == 0, result.stderr
    assert "1 completed, 0 failed of 1" in result.stdout
    shown = invoke(
        "--store", store_path, "experiments", "show", only_experiment(invoke, store_path)
    )
    assert "harness door-hooks@1" in shown.stdout


def test_resume_needs_the_same_hooks(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    path = write(tmp_path, DOOR)
    experiment = load_manifest(path).experiment(store_path)
    experiment.start()
    experiment.pause()
    experiment.wait()
    unhooked = write(tmp_path, DOOR.replace(f'hooks = "{ME}:DOOR_HOOKS"', ""), "bare.toml")

    refused = invoke("--store", store_path, "resume", experiment.id, unhooked)
    resumed = invoke("--store", store_path, "resume", experiment.id, path)

    assert refused.exit_code == 2
    assert "harness version was 'door-hooks@1', is now None" in refused.stderr
    assert resumed.exit_code == 0, resumed.stderr
    assert f"resumed {experiment.id}: 1 of 1 sessions completed" in resumed.stdout


def test_a_stored_version_runs_from_the_command_line(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    assert invoke("--store", store_path, "selftest", "--sandbox", "local").exit_code == 0

    result = invoke("--store", store_path, "run", write(tmp_path, DESK))

    assert result.exit_code == 0, result.stderr
    assert "2 completed, 0 failed of 2" in result.stdout
    shown = invoke("--store", store_path, "experiments", "show", result.stdout.split()[1])
    assert "harness harness-v1" in shown.stdout


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('harness = "harness-v1"', 'harness = "harness-v1"', "no evidence store at"),
        ('harness = "harness-v1"', 'hooks = "tests.cli.agents:SlowAgent"',
         "'tests.cli.agents:SlowAgent' gave SlowAgent, not hooks"),
        ('harness = "harness-v1"', 'hooks = "tests/cli/agents.py"',
         "'tests/cli/agents.py' is not module:attribute"),
    ],
    ids=["no-store", "not-hooks", "not-a-reference"],
)  # fmt: skip
def test_bad_hooks_exit_2_naming_line_and_key(
    invoke: Invoke, store_path: Path, tmp_path: Path, old: str, new: str, problem: str
) -> None:
    path = write(tmp_path, DESK.replace(old, new))

    result = invoke("--store", store_path, "run", path)

    assert result.exit_code == 2
    key = new.split(" ")[0]
    assert result.stderr.startswith(f"error: {path}:4: experiment.{key}: ")
    assert problem in result.stderr
    assert "Traceback" not in result.stderr
    assert not store_path.exists()
