"""The reference agents as commands, and ways to tell that a process is gone."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "agents"
BROKEN_AGENT = Path(__file__).with_name("broken_agent.py")

# `-I -S`: no site-packages and no PYTHON* variables, so envharness cannot be imported — the
# Python agent proves it needs nothing but the standard library. Always this interpreter,
# never whatever `python3` is on PATH.
PYTHON_AGENT = [sys.executable, "-I", "-S", str(AGENTS / "python" / "echo_agent.py")]
NODE_AGENT = ["node", str(AGENTS / "node" / "echo_agent.mjs")]
SHELL_AGENT = ["sh", str(AGENTS / "shell" / "echo_agent.sh")]


def reference_agents() -> list[object]:
    """pytest params: each reference agent, skipped with a reason when its runtime is missing."""
    return [
        pytest.param(PYTHON_AGENT, id="python"),
        pytest.param(
            NODE_AGENT,
            id="node",
            marks=pytest.mark.skipif(
                shutil.which("node") is None,
                reason="node is not on PATH: the Node.js reference agent needs Node 20 or later",
            ),
        ),
        pytest.param(
            SHELL_AGENT,
            id="shell",
            marks=pytest.mark.skipif(
                shutil.which("sh") is None,
                reason="sh is not on PATH: the shell reference agent needs a POSIX sh and awk",
            ),
        ),
    ]


def broken_agent(mode: str, *args: str) -> list[str]:
    return [sys.executable, str(BROKEN_AGENT), mode, *args]


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie (dead, waiting to be reaped by whoever
    inherited it) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back to a signal 0 probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"
