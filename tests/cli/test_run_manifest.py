"""``run MANIFEST.toml``: an experiment from a file, its exit statuses, and what it refuses."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envharness.cli import manifest_run
from envharness.cli.edge import ProgressLine
from envharness.runtime.experiment import derive_seed
from tests.cli._support import ROOT, Invoke, environment, interrupt_after_first_turn

EXAMPLE = ROOT / "examples" / "manifest" / "experiment.toml"

MANIFEST = """\
[experiment]
name = "cli sweep"
turns = {turns}
trials = {trials}
seed = 3

[environment]
factory = "envharness.fixtures:SyntheticEnvironment"

[agents.alice]
factory = "{agent}"

[[scenarios.items]]
id = "only"
input = {{ starting_total = 0 }}
"""


def manifest(
    folder: Path, *, agent: str = "envharness.fixtures:SyntheticAgent", turns: int = 2,
    trials: int = 2,
) -> Path:  # fmt: skip
    path = folder / "experiment.toml"
    path.write_text(MANIFEST.format(agent=agent, turns=turns, trials=trials))
    return path


def sessions(invoke: Invoke, store: Path) -> list[dict[str, object]]:
    listed = invoke("--store", store, "sessions", "--json").stdout
    return [json.loads(line) for line in listed.splitlines()]


def test_the_example_manifest_runs_python_and_command_agents(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "run", EXAMPLE)

    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""  # not a terminal: no progress line
    lines = result.stdout.splitlines()
    assert lines[0].startswith("experiment exp_")
    assert lines[0].endswith("  manifest sweep")
    rows = [line.split() for line in lines[1:5]]
    assert [(row[3], row[5]) for row in rows] == [
        ("up-to-four", "0"),
        ("up-to-four", "1"),
        ("minus-two-to-two", "0"),
        ("minus-two-to-two", "1"),
    ]
    for row in rows:
        assert row[0] == "session"
        assert row[1].startswith("ses_")
        assert int(row[7]) == derive_seed(42, row[3], int(row[5]))
        assert row[8] == "completed"
    assert lines[5] == "4 completed, 0 failed of 4"
    assert lines[6] == f"view it: envharness --store {store_path} serve --open"
    listed = sessions(invoke, store_path)
    assert {str(s["id"]) for s in listed} == {row[1] for row in rows}
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_progress_is_drawn_on_a_terminal(
    invoke: Invoke, store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(manifest_run, "ProgressLine", lambda: ProgressLine(terminal))

    result = invoke("--store", store_path, "run", manifest(tmp_path, turns=3))

    assert result.exit_code == 0, result.stderr
    drawn = terminal.getvalue()
    assert "sessions done" in drawn
    assert "turn 3/3" in drawn
    assert drawn.endswith("\r\x1b[2K")  # cleared before the results print


def test_a_failed_session_exits_1_with_its_reason(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    path = manifest(tmp_path, agent="tests.cli.agents:RaisingAgent")

    result = invoke("--store", store_path, "run", path)

    assert result.exit_code == 1
    assert result.stdout.count(" failed\n") == 2
    assert "  reason  agent 'alice' raised RuntimeError: [bold]no[/bold] luck" in result.stdout
    assert "0 completed, 2 failed of 2" in result.stdout


def test_options_that_the_manifest_holds_are_refused(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    path = manifest(tmp_path)

    result = invoke(
        "--store", store_path, "run", path, "--turns", "4", "--agent", "bob=x:y", "--seed", "0"
    )

    assert result.exit_code == 2
    assert "error: --agent, --turns, --seed cannot be given with a manifest" in result.stderr
    assert "holds the whole experiment" in result.stderr
    assert not store_path.exists()


def test_an_invalid_manifest_exits_2_naming_line_and_key(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    path = manifest(tmp_path)
    path.write_text(path.read_text().replace("trials = 2", "trails = 2"))

    result = invoke("--store", store_path, "run", path)

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}:4: experiment.trails: unknown key 'trails' in [experiment]; "
        "did you mean 'trials'?\n"
    )
    assert not store_path.exists()


def test_a_missing_manifest_exits_2(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    result = invoke("--store", store_path, "run", tmp_path / "absent.toml")

    assert result.exit_code == 2
    assert "absent.toml: no such manifest file" in result.stderr


def test_without_a_manifest_run_still_needs_agent_and_turns(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "run", "envharness.fixtures:SyntheticEnvironment")

    assert result.exit_code == 2
    assert "run needs --agent" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_stops_the_experiment(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    path = manifest(tmp_path, agent="tests.cli.agents:SlowAgent", turns=1000, trials=3)

    status, out, err = interrupt_after_first_turn(store_path, "run", path)

    assert status == 130, err
    assert "Traceback" not in err
    assert "interrupted: experiment exp_" in err
    assert "go on from there: envharness --store" in err
    assert "0 completed, 0 failed of 3 (3 stopped)" in out
    assert {s["status"] for s in sessions(invoke, store_path)} == {"stopped"}
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_the_summary_tells_stopped_sessions_from_those_never_started(tmp_path: Path) -> None:
    from envharness.cli.manifest_run import experiment_lines
    from envharness.runtime.experiment import ExperimentResult, ExperimentSession
    from envharness.runtime.plan import SessionResult

    started = tuple(
        ExperimentSession("s", trial, 7, SessionResult(f"ses_{trial}", "stopped", 1))
        for trial in range(2)
    )
    result = ExperimentResult("exp_1", "sweep", "stopped", 6, 0, 0, 6, started)
    assert (
        experiment_lines(result, tmp_path)[-2]
        == "0 completed, 0 failed of 6 (2 stopped, 4 not started)"
    )
    done = tuple(
        ExperimentSession("s", trial, 7, SessionResult(f"ses_{trial}", "completed", 1))
        for trial in range(2)
    )
    paused = ExperimentResult("exp_1", "sweep", "paused", 6, 2, 0, 4, done)
    assert experiment_lines(paused, tmp_path)[-2] == "2 completed, 0 failed of 6 (4 not started)"


def test_a_directory_is_not_a_manifest(invoke: Invoke, store_path: Path, tmp_path: Path) -> None:
    result = invoke("--store", store_path, "run", tmp_path)

    assert result.exit_code == 2
    assert "is a directory, not a manifest file: give the .toml file in it" in result.stderr
    assert "Traceback" not in result.stderr


LIMITED_CLI = """
import resource, signal, sys
from envharness.cli import main

# A real write failure: past this size a write fails (EFBIG) instead of killing the process.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
sys.argv = ["envharness", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_ends_the_run_with_the_stores_error_once_and_exit_2(
    store_path: Path, tmp_path: Path
) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text(
        MANIFEST.replace("starting_total = 0", "starting_total = -1000, target = 1000")
        .format(agent="envharness.fixtures:SyntheticAgent", turns=2000, trials=4)
        .replace("seed = 3", "seed = 3\nmax_concurrency = 4")
    )
    done = subprocess.run(
        [sys.executable, "-c", LIMITED_CLI, "--store", str(store_path), "run", str(path)],
        cwd=ROOT, env=environment(), capture_output=True, text=True, check=False,
        timeout=90,  # a hang, not a measure: it exits at once when it works
    )  # fmt: skip

    assert done.returncode == 2, done.stderr
    # Every running session met the same failed write: it is said once, without a traceback.
    [line] = done.stderr.splitlines()
    assert line.startswith("error: "), done.stderr
    assert f"'{store_path}'" in line  # the store's own message, naming the store
