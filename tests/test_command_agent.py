"""CommandAgent end to end: real processes, every way they can misbehave, nothing left behind."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import envharness.contracts.command_agent as command_agent_module
from envharness import (
    AsyncEnvironmentHarness,
    CommandAgent,
    ConfigurationError,
    Record,
    Scenario,
)
from envharness.contracts.agent import AgentContext
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.protocol import Limits, ProtocolError
from envharness.records import ActionAttempted, Cost, Log, ProtocolViolation, SessionStatus

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).parent / "command_agent" / "scripted_agent.py"
START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


def scripted(mode: str, **options: Any) -> CommandAgent:
    options.setdefault("limits", Limits(ready_timeout=5.0, act_timeout=2.0, shutdown_grace=0.5))
    return CommandAgent(
        [sys.executable, str(SCRIPT), mode], implementation=f"scripted-{mode}@1", **options
    )


async def run(store: Path, agent: CommandAgent, turns: int = 3) -> tuple[Any, list[Record]]:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": agent}
    )
    session = await harness.run(START, turns=turns)
    records = [record async for record in harness.records(session.id)]
    assert (await harness.verify()).ok
    return session, records


def logs(records: list[Record], stream: str) -> list[str]:
    return [
        r.payload.message
        for r in records
        if isinstance(r.payload, Log) and r.payload.stream == stream
    ]


def pids(records: list[Record]) -> list[int]:
    found = []
    for message in logs(records, "stderr"):
        if match := re.fullmatch(r"(?:pid|child) (\d+)", message):
            found.append(int(match.group(1)))
    assert found, "the agent did not report its pid"
    return found


def assert_gone(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    # It may still be a zombie of someone else's; ours are always reaped.
    with open(f"/proc/{pid}/stat") as stat:
        assert stat.read().split()[2] == "Z", f"process {pid} is still running"


async def test_a_program_plays_a_session_and_is_recorded(store_path: Path) -> None:
    session, records = await run(store_path, scripted("good"))
    assert session.status == "completed"
    assert session.turns_completed == 3
    attempts = [r.payload for r in records if isinstance(r.payload, ActionAttempted)]
    assert [a.action for a in attempts] == [{"value": 1}] * 3
    costs = [r.payload for r in records if isinstance(r.payload, Cost)]
    assert costs[0] == Cost(input_tokens=12, output_tokens=3, usd=0.0001)
    assert logs(records, "protocol")[:2] == [
        "ready: protocol 1, implementation 'scripted-good', capabilities []",
        "thinking about turn 1",
    ]
    [pid] = pids(records)
    assert_gone(pid)


async def test_the_hosts_credentials_are_not_inherited(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVHARNESS_TEST_SECRET", "hunter2")
    _, records = await run(store_path, scripted("good", env={"MODEL": "tiny"}), turns=1)
    assert "secret absent model tiny" in logs(records, "stderr")


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("invalid-json", "invalid_json"),
        ("invalid-utf8", "invalid_utf8"),
        ("invalid-utf8-unknown-field", "invalid_utf8"),
        ("huge-line", "line_too_long"),
        ("flood", "line_too_long"),
        ("unknown-type", "unknown_type"),
        ("wrong-id", "wrong_id"),
        ("silent", "timeout"),
        ("exit-mid-session", "closed"),
        ("never-ready", "timeout"),
    ],
)
async def test_a_protocol_violation_fails_only_that_session_with_its_bytes_kept(
    store_path: Path, mode: str, code: str
) -> None:
    limits = Limits(ready_timeout=1.0, act_timeout=1.0, shutdown_grace=0.5)
    session, records = await run(store_path, scripted(mode, limits=limits))
    assert session.status == "failed"
    assert "broke the protocol" in (session.reason or "")
    [violation] = [r.payload for r in records if isinstance(r.payload, ProtocolViolation)]
    assert violation.problem.startswith(f"{code}: ")
    if mode in ("invalid-json", "invalid-utf8", "invalid-utf8-unknown-field", "huge-line"):
        assert violation.artifact is not None
        kept = (store_path / "artifacts" / violation.artifact[:2] / violation.artifact).read_bytes()
        assert 0 < len(kept) <= 4096
    status = [r.payload for r in records if isinstance(r.payload, SessionStatus)][-1]
    assert status.error is not None
    assert "pid " in (status.error.stderr_tail or "")
    for pid in pids(records):
        assert_gone(pid)


async def test_exit_before_ready_keeps_the_programs_last_words(store_path: Path) -> None:
    session, records = await run(store_path, scripted("exit-before-ready"))
    assert session.status == "failed"
    assert session.turns_completed == 0
    status = [r.payload for r in records if isinstance(r.payload, SessionStatus)][-1]
    assert status.error is not None
    assert "missing model weights" in (status.error.stderr_tail or "")


@pytest.mark.parametrize("mode", ["ignore-sigterm", "child"])
async def test_stubborn_programs_and_their_children_are_killed(
    store_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command_agent_module, "TERMINATE_GRACE", 0.3)
    with anyio.fail_after(20):
        session, records = await run(store_path, scripted(mode), turns=1)
    assert session.status == "completed", (session.reason, session.error)
    for pid in pids(records):
        assert_gone(pid)


async def test_other_sessions_go_on_when_one_agent_breaks(store_path: Path) -> None:
    good = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": scripted("good")}
    )
    bad = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": scripted("invalid-json")}
    )
    results = []

    async def one(harness: AsyncEnvironmentHarness) -> None:
        results.append((await harness.run(START, turns=3)).status)

    async with anyio.create_task_group() as group:
        group.start_soon(one, good)
        group.start_soon(one, bad)
    assert sorted(results) == ["completed", "failed"]


async def test_command_and_python_agents_share_a_session(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": scripted("good"), "bob": SyntheticAgent},
    )
    session = await harness.run(START, turns=2)
    assert session.status == "completed"


def test_a_missing_program_is_refused_before_any_session(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'no-such-agent-program' was not found"):
        CommandAgent(["no-such-agent-program"], implementation="x@1")
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigurationError, match="is not executable: chmod"):
        CommandAgent([str(script)], implementation="x@1")
    with pytest.raises(ConfigurationError, match="empty command"):
        CommandAgent([], implementation="x@1")
    with pytest.raises(ConfigurationError, match="needs implementation"):
        CommandAgent([sys.executable], implementation="")


def test_a_command_string_is_split_like_a_shell_would() -> None:
    agent = CommandAgent(f"{sys.executable} -m 'my agent'", implementation="x@1")
    assert agent.argv == (sys.executable, "-m", "my agent")


async def test_a_program_that_declares_snapshot_can_be_checkpointed_and_restored() -> None:
    reference = Path(__file__).parents[1] / "agents" / "python" / "echo_agent.py"
    agent = CommandAgent([sys.executable, str(reference)], implementation="echo@1")
    context = AgentContext(
        session_id="s",
        participant="alice",
        role="agent",
        seed=0,
        turns=3,
        environment=SyntheticEnvironment.spec.reference(),
        log=lambda message, level, stream: None,
    )
    first = agent()
    async with first.lifespan(context):
        assert first.can_snapshot
        await first.act({"total": 0, "target": 2})
        await first.feedback(1, {"total": 1}, None)
        state = await first.snapshot()
    assert state == {"acts": 1, "feedback": 1}
    second = agent()
    async with second.lifespan(context):
        await second.restore(state)
        assert await second.snapshot() == state


async def test_a_program_without_snapshot_is_not_asked_for_one(store_path: Path) -> None:
    agent = scripted("good")()
    context = AgentContext(
        session_id="s",
        participant="alice",
        role="agent",
        seed=0,
        turns=1,
        environment=SyntheticEnvironment.spec.reference(),
        log=lambda message, level, stream: None,
    )
    async with agent.lifespan(context):
        assert not agent.can_snapshot
        with pytest.raises(ProtocolError, match="snapshot"):
            await agent.snapshot()


async def test_a_continued_program_is_told_the_real_turn_numbers(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": scripted("good")}
    )
    session = await harness.run(START, turns=2)
    await harness.continue_(session.id, turns=2)
    thoughts = [
        r.payload.message
        async for r in harness.records(session.id)
        if isinstance(r.payload, Log) and r.payload.message.startswith("thinking")
    ]
    assert thoughts == [f"thinking about turn {n}" for n in (1, 2, 3, 4)]
