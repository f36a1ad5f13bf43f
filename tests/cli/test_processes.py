"""What only a real process shows: Ctrl-C in the middle of a run, and a reader that hangs up.

The command runs as ``sys.executable -m envharness.cli`` from the repository root, so the test
agents import as ``tests.cli.agents`` the way a user's own modules would from their directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._support import (
    ROOT,
    Invoke,
    command,
    environment,
    interrupt_after_first_turn,
    listed_sessions,
)

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes"),
]


def test_ctrl_c_stops_the_session_cleanly(invoke: Invoke, store_path: Path) -> None:
    status, out, err = interrupt_after_first_turn(
        store_path, "run", SYNTHETIC, "--agent", "alice=tests.cli.agents:SlowAgent",
        "--turns", "1000", "--input", '{"starting_total": 0}',
    )  # fmt: skip

    assert status == 130, err
    assert "Traceback" not in err
    [session] = listed_sessions(store_path)
    assert session["status"] == "stopped"
    assert f"interrupted: session {session['id']} was recorded as stopped" in err
    assert f"resume {session['id']}" in err, "the interrupted run does not say how to go on"
    assert out == ""
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_export_into_a_closed_pipe_exits_quietly(invoke: Invoke, store_path: Path) -> None:
    ran = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", "alice=tests.cli.agents:PaddedAgent",
        "--turns", "30", "--input", '{"starting_total": 0}',
    )  # fmt: skip
    session = ran.stdout.split()[1]
    with subprocess.Popen(
        command(store_path, "export", session),
        cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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
