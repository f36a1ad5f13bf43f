"""Types and helpers shared by the CLI tests: the in-process runner's type, and the command run
as a real process (``sys.executable -m envharness.cli`` from the repository root, so the test
agents import as ``tests.cli.agents`` the way a user's own modules would from their directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

Invoke = Callable[..., Result]
"""``invoke("--store", path, "sessions")``: run the command in-process and return its result."""

ROOT = Path(__file__).resolve().parents[2]


def command(store: Path, *args: str | Path) -> list[str]:
    """``envharness --store STORE ARGS`` as a process's argv."""
    return [sys.executable, "-m", "envharness.cli", "--store", str(store), *map(str, args)]


def environment() -> dict[str, str]:
    """This process's environment without ENVHARNESS_STORE: each command names its store."""
    return {key: value for key, value in os.environ.items() if key != "ENVHARNESS_STORE"}


def listed_sessions(store: Path) -> list[dict[str, object]]:
    """``sessions --json``, read by another process (as a user's second terminal would)."""
    listed = subprocess.run(
        command(store, "sessions", "--json"),
        cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return [json.loads(line) for line in listed.stdout.splitlines()]


def interrupt_after_first_turn(store: Path, *args: str | Path) -> tuple[int, str, str]:
    """Run ``envharness --store STORE ARGS``, press Ctrl-C once it has committed a turn, and
    return its exit status, stdout and stderr."""
    with subprocess.Popen(
        command(store, *args), cwd=ROOT, env=environment(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not any(int(str(s["turns_completed"])) >= 1 for s in listed_sessions(store)):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "no turn was committed in 20 s"
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
    return process.returncode, out, err
