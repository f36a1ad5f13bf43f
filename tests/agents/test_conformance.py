"""The conformance suite itself: it catches broken agents, stays bounded, and leaves nothing.

The broken agents are in ``broken_agent.py``; the CLI's view of the same agents is tested in
``tests/cli/test_protocol_check.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from envharness.errors import ConfigurationError
from envharness.protocol.conformance import (
    CASES,
    CaseResult,
    ConformanceReport,
    ConformanceSettings,
    check_agent,
)
from tests.agents._support import PYTHON_AGENT, broken_agent, is_running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

QUICK = ConformanceSettings(reply_timeout=0.5, shutdown_grace=0.3, terminate_grace=0.3)


def statuses(report: ConformanceReport) -> dict[str, str]:
    return {result.name: result.status for result in report.results}


def result(report: ConformanceReport, name: str) -> CaseResult:
    [found] = [r for r in report.results if r.name == name]
    return found


async def test_text_on_stdout_fails_the_case_and_names_the_line() -> None:
    report = await check_agent(
        broken_agent("prints-text"), settings=QUICK, cases=["handshake", "act", "shutdown"]
    )

    assert statuses(report) == {"handshake": "passed", "act": "failed", "shutdown": "failed"}
    detail = result(report, "act").detail
    assert detail.startswith("at act (turn 1): invalid_json:")
    assert "the line: thinking about turn 1" in detail
    assert not report.ok
    assert (report.passed, report.failed, report.skipped) == (1, 2, 0)


async def test_a_wrong_id_fails_and_an_undeclared_capability_is_skipped() -> None:
    report = await check_agent(
        broken_agent("wrong-id"), settings=QUICK, cases=["act", "snapshot-restore"]
    )

    assert statuses(report) == {"act": "failed", "snapshot-restore": "skipped"}
    assert "wrong_id" in result(report, "act").detail
    assert "'not-1'" in result(report, "act").detail
    assert "did not declare the 'snapshot' capability" in result(report, "snapshot-restore").detail


async def test_an_agent_that_never_answers_times_out_once_and_the_rest_is_skipped() -> None:
    started = anyio.current_time()
    seen: list[str] = []
    report = await check_agent(
        broken_agent("silent"), settings=QUICK, on_result=lambda r: seen.append(r.name)
    )

    assert anyio.current_time() - started < 5
    assert seen == [case.name for case in CASES]
    handshake, *rest = report.results
    assert handshake.status == "failed"
    assert handshake.detail.startswith("at hello: timeout: no answer within 0.5 s")
    assert {r.status for r in rest} == {"skipped"}
    assert report.implementation is None


async def test_an_agent_ignoring_shutdown_and_sigterm_is_killed_with_its_children(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pids"
    started = anyio.current_time()
    report = await check_agent(
        broken_agent("stubborn", str(pidfile)), settings=QUICK, cases=["handshake", "shutdown"]
    )

    assert anyio.current_time() - started < 8
    assert statuses(report) == {"handshake": "passed", "shutdown": "failed"}
    assert "still running 0.3 s after shutdown" in result(report, "shutdown").detail
    pids = [int(pid) for line in pidfile.read_text().splitlines() for pid in line.split()]
    assert len(pids) == 4  # two cases, each an agent and its child
    for _ in range(100):  # SIGKILL is delivered, not awaited: the child may take a moment
        if not any(is_running(pid) for pid in pids):
            break
        await anyio.sleep(0.02)
    assert [pid for pid in pids if is_running(pid)] == []


async def test_the_agent_gets_a_minimal_environment_plus_what_is_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENVHARNESS_TEST_SECRET", "do-not-leak")
    report = await check_agent(
        [sys.executable, "-c", _ENV_AGENT],
        env={"GIVEN": "yes"},
        settings=QUICK,
        cases=["handshake"],
    )

    assert report.implementation is not None
    names = report.implementation.split(",")
    assert "GIVEN" in names
    assert "PATH" in names
    assert "ENVHARNESS_TEST_SECRET" not in names


_ENV_AGENT = """
import json, os, sys
sys.stdin.readline()
ready = {"type": "ready", "protocol": 1, "implementation": ",".join(sorted(os.environ))}
print(json.dumps(ready), flush=True)
sys.stdin.read()
"""


async def test_a_relative_program_is_found_from_cwd(tmp_path: Path) -> None:
    script = tmp_path / "agent"
    agent = Path(PYTHON_AGENT[-1])
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S {agent}\n")
    script.chmod(0o755)

    report = await check_agent(["./agent"], cwd=tmp_path, settings=QUICK, cases=["act"])

    assert report.ok


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such-agent-program"], "was not found on the PATH the agent gets"),
        (["./missing.py"], "does not exist"),
        (
            [str(Path(__file__).with_name("_support.py"))],
            r"is not executable: chmod \+x it, or run it through python3",
        ),
        ([], "give the agent's command as a program and its arguments"),
    ],
)
async def test_a_program_that_cannot_run_is_an_error_before_any_case(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await check_agent(argv, settings=QUICK)


async def test_an_unknown_case_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown conformance case 'handshak'"):
        await check_agent(PYTHON_AGENT, cases=["handshak"])


@pytest.mark.parametrize("field", ["reply_timeout", "shutdown_grace", "terminate_grace"])
async def test_timeouts_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ConformanceSettings(**{field: 0})


def test_the_broken_agents_are_not_executable_themselves() -> None:
    """They run through the test's interpreter; the not-executable case above relies on it."""
    assert not os.access(Path(__file__).with_name("_support.py"), os.X_OK)
