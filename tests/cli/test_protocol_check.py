"""``envharness protocol check``: one line per case, a summary, and the exit status to match.

The agents are the reference Python agent (it passes) and the broken ones in
``tests/agents/broken_agent.py``; each broken agent must be reported, not crash the command,
and be stopped within a bounded time whatever it does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envharness.protocol.conformance import CASES
from tests.agents._support import PYTHON_AGENT, ROOT, broken_agent, is_running
from tests.cli._support import Invoke

pytestmark = pytest.mark.slow

CHECK = ("protocol", "check")
QUICK = ("--timeout", "1", "--grace", "0.3")


def case_lines(output: str) -> dict[str, str]:
    """``{case name: its PASS/FAIL/SKIP line}`` from the command's output."""
    lines = {}
    for line in output.splitlines():
        label, _, rest = line.partition("  ")
        if label in {"PASS", "FAIL", "SKIP"}:
            lines[rest.split()[0]] = line
    return lines


def test_a_good_agent_passes_every_case(invoke: Invoke) -> None:
    result = invoke(*CHECK, "--", *PYTHON_AGENT)

    assert result.exit_code == 0, result.output
    lines = case_lines(result.stdout)
    assert list(lines) == [case.name for case in CASES]
    assert all(line.startswith("PASS") for line in lines.values())
    assert "implementation 'echo-agent-python@1'" in lines["handshake"]
    assert result.stdout.splitlines()[0] == f"checking {' '.join(PYTHON_AGENT)}"
    assert result.stdout.splitlines()[-1] == f"{len(CASES)} passed, 0 failed"
    assert result.stderr == ""


def test_arguments_after_the_program_are_the_program_s_own(invoke: Invoke) -> None:
    """Without ``--``, options after PROGRAM (``-I``, ``-S``) still go to the program."""
    result = invoke(*CHECK, "--case", "act", *PYTHON_AGENT)

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_text_on_stdout_is_reported_with_the_line(invoke: Invoke) -> None:
    result = invoke(*CHECK, *QUICK, "--", *broken_agent("prints-text"))

    assert result.exit_code == 1
    lines = case_lines(result.stdout)
    assert lines["handshake"].startswith("PASS")
    assert lines["act"].startswith("FAIL")
    assert "invalid_json" in lines["act"]
    assert "the line: thinking about turn 1" in lines["act"]
    assert lines["snapshot-restore"].startswith("SKIP")
    summary = result.stdout.splitlines()[-1]
    assert summary.endswith("failed, 1 skipped")
    assert not summary.startswith("0 passed")


def test_a_wrong_id_is_reported(invoke: Invoke) -> None:
    result = invoke(*CHECK, *QUICK, "--case", "act", "--case", "act-sequence", "--",
                    *broken_agent("wrong-id"))  # fmt: skip

    assert result.exit_code == 1
    lines = case_lines(result.stdout)
    assert "wrong_id" in lines["act"]
    assert "it must repeat '1'" in lines["act"]
    assert result.stdout.splitlines()[-1] == "0 passed, 2 failed"


def test_an_agent_that_never_answers_fails_the_handshake_and_skips_the_rest(
    invoke: Invoke,
) -> None:
    started = time.monotonic()
    result = invoke(*CHECK, "--timeout", "0.5", "--grace", "0.3", "--", *broken_agent("silent"))

    assert time.monotonic() - started < 5
    assert result.exit_code == 1
    lines = case_lines(result.stdout)
    assert lines["handshake"].startswith("FAIL  handshake")
    assert "timeout: no answer within 0.5 s" in lines["handshake"]
    assert sum(line.startswith("SKIP") for line in lines.values()) == len(CASES) - 1
    assert result.stdout.splitlines()[-1] == f"0 passed, 1 failed, {len(CASES) - 1} skipped"


def test_an_agent_ignoring_sigterm_is_killed_and_leaves_nothing_behind(
    invoke: Invoke, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    started = time.monotonic()
    result = invoke(*CHECK, *QUICK, "--case", "shutdown", "--",
                    *broken_agent("stubborn", str(pidfile)))  # fmt: skip

    assert time.monotonic() - started < 8
    assert result.exit_code == 1
    assert "still running 0.3 s after shutdown" in case_lines(result.stdout)["shutdown"]
    pids = [int(pid) for pid in pidfile.read_text().split()]
    assert len(pids) == 2
    for _ in range(100):  # SIGKILL is delivered, not awaited: the child may take a moment
        if not any(is_running(pid) for pid in pids):
            break
        time.sleep(0.02)
    assert [pid for pid in pids if is_running(pid)] == []


def test_a_crashing_agent_shows_the_end_of_its_stderr(invoke: Invoke) -> None:
    result = invoke(*CHECK, *QUICK, "--case", "handshake", "--",
                    *broken_agent("crashes"))  # fmt: skip

    assert result.exit_code == 1
    assert "FAIL  handshake" in result.stdout
    assert "closed: the agent's output ended" in result.stdout
    assert "the agent's stderr ended with:" in result.stdout
    assert "| RuntimeError: the model client is not configured" in result.stdout


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("no-such-agent-program", "error: agent program 'no-such-agent-program' was not found"),
        ("agents/README.md", "error: agent program 'agents/README.md' is not executable"),
    ],
)
def test_a_program_that_cannot_run_is_exit_status_2(
    invoke: Invoke, program: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = invoke(*CHECK, "--", program)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message)
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--timeout", "0"), "error: --timeout must be more than 0 seconds"),
        (("--grace", "-1"), "error: --grace must be more than 0 seconds"),
        (("--env", "NOVALUE"), "error: --env 'NOVALUE' is not NAME=VALUE"),
        (("--case", "nope"), "error: unknown conformance case 'nope'; the cases are: handshake"),
    ],
)
def test_bad_options_are_exit_status_2(
    invoke: Invoke, options: tuple[str, ...], message: str
) -> None:
    result = invoke(*CHECK, *options, "--", *PYTHON_AGENT)

    assert result.exit_code == 2
    assert result.stderr.startswith(message)


def test_env_reaches_the_agent(invoke: Invoke) -> None:
    agent = (
        "import json, os, sys; sys.stdin.readline(); "
        "print(json.dumps({'type': 'ready', 'protocol': 1, "
        "'implementation': os.environ.get('MODEL', 'unset')}), flush=True); sys.stdin.read()"
    )
    result = invoke(*CHECK, *QUICK, "--case", "handshake", "--env", "MODEL=small=2", "--",
                    PYTHON_AGENT[0], "-c", agent)  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "implementation 'small=2'" in result.stdout


@pytest.mark.parametrize("direction", ["host-to-agent", "agent-to-host"])
def test_schema_prints_the_published_schema(invoke: Invoke, direction: str) -> None:
    result = invoke("protocol", "schema", direction)

    assert result.exit_code == 0
    published = ROOT / "protocol" / "schema" / f"{direction}.json"
    assert json.loads(result.stdout) == json.loads(published.read_text())


def test_schema_refuses_an_unknown_direction(invoke: Invoke) -> None:
    result = invoke("protocol", "schema", "sideways")

    assert result.exit_code == 2
    assert result.stderr.startswith("error: DIRECTION 'sideways' is not one of")
