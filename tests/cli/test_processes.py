"""What only a real process shows: Ctrl-C in the middle of a run, and a reader that hangs up.

The command runs as ``sys.executable -m envharness.cli`` from the repository root, so the test
agents import as ``tests.cli.agents`` the way a user's own modules would from their directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli._support import Invoke

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes"),
]


def _command(store: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "envharness.cli", "--store", str(store), *args]


def _environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "ENVHARNESS_STORE"}


def _sessions(store: Path) -> list[dict[str, object]]:
    listed = subprocess.run(
        _command(store, "sessions", "--json"),
        cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return [json.loads(line) for line in listed.stdout.splitlines()]


def test_ctrl_c_stops_the_session_cleanly(invoke: Invoke, store_path: Path) -> None:
    with subprocess.Popen(
        _command(
            store_path, "run", SYNTHETIC, "--agent", "alice=tests.cli.agents:SlowAgent",
            "--turns", "1000", "--input", '{"starting_total": 0}',
        ),
        cwd=ROOT, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not any(int(str(s["turns_completed"])) >= 1 for s in _sessions(store_path)):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "no turn was committed in 20 s"
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()

    assert process.returncode == 130, err
    assert "Traceback" not in err
    [session] = _sessions(store_path)
    assert session["status"] == "stopped"
    assert f"interrupted: session {session['id']} was recorded as stopped" in err
    assert out == ""
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_export_into_a_closed_pipe_exits_quietly(invoke: Invoke, store_path: Path) -> None:
    ran = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", "alice=tests.cli.agents:PaddedAgent",
        "--turns", "30", "--input", '{"starting_total": 0}',
    )  # fmt: skip
    session = ran.stdout.split()[1]
    with subprocess.Popen(
        _command(store_path, "export", session),
        cwd=ROOT, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # like `| head -1` exiting: at least 600 kB are still to come
        err = process.stderr.read()
        process.wait(timeout=20)

    assert json.loads(first)["seq"] == 0
    assert err == b""
    assert process.returncode == 141
