"""Running one program under test: its process, its channel, and what it wrote besides answers.

Each case starts a fresh process and stops it the way a session does — protocol ``shutdown``,
then SIGTERM to its process group after a grace period, then SIGKILL — under a shielded scope,
so nothing is left running and nothing is left unreaped.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from envharness.protocol.channel import AgentChannel
from envharness.protocol.conformance.report import ConformanceSettings
from envharness.protocol.errors import ProtocolViolationError
from envharness.protocol.messages import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_LOG_MESSAGES,
    SUPPORTED_VERSIONS,
    EnvironmentInfo,
    Feedback,
    Hello,
    Limits,
    LogMessage,
)
from envharness.protocol.process import (
    AgentCommand,
    spawn,
    stop,
)

_STDERR_TAIL_BYTES = 2048
_EXCERPT_CHARS = 200

_T = TypeVar("_T")


class CaseFailure(Exception):
    """A case found the agent breaking a rule the channel cannot see (exit status, equality)."""


class CaseSkipped(Exception):
    """The case does not apply to this agent (an optional capability it did not declare)."""


@dataclass(slots=True)
class AgentUnderTest:
    """One running program, its channel, and what it wrote besides answers."""

    process: Process
    channel: AgentChannel
    settings: ConformanceSettings
    logs: list[LogMessage] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    step: str = "starting"

    async def reply(self, step: str, call: Awaitable[_T]) -> _T:
        """Await one answer within the reply timeout; a timeout is the violation ``timeout``."""
        self.step = step
        timeout = self.settings.reply_timeout
        try:
            with anyio.fail_after(timeout):
                return await call
        except TimeoutError:
            raise ProtocolViolationError(
                "timeout",
                f"no answer within {timeout:g} s; answer every request promptly (a slow agent, "
                "one that calls a model, may need a longer timeout: --timeout)",
            ) from None

    async def handshake(self, **fields: Any) -> None:
        await self.reply("hello", self.channel.handshake(hello_for(self.settings, **fields)))

    async def act(self, turn: int, observation: Any, actions: Sequence[Any] | None = None) -> Any:
        action = await self.reply(
            f"act (turn {turn})", self.channel.act(turn, observation, actions)
        )
        return action.action

    async def act_and_feedback(self, turn: int, observation: Any) -> None:
        action = await self.reply(f"act (turn {turn})", self.channel.act(turn, observation))
        self.step = f"feedback (turn {turn})"
        await self.channel.feedback(
            Feedback(
                turn=turn,
                act_id=action.id,
                status="executed",
                action=action.action,
                outcome={"total": turn},
            )
        )


@asynccontextmanager
async def running(
    command: AgentCommand, settings: ConformanceSettings, group: TaskGroup
) -> AsyncIterator[AgentUnderTest]:
    """Start the program in its own process group; always stop and reap it on the way out.

    Its stderr is drained by a task in ``group``, which belongs to the caller: that way what
    a case raises reaches the caller as itself, never wrapped in an exception group.
    """
    process = await spawn(command)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    logs: list[LogMessage] = []
    channel = AgentChannel(process.stdout, process.stdin, on_log=logs.append)
    agent = AgentUnderTest(process, channel, settings, logs)
    draining = anyio.CancelScope()
    drained = anyio.Event()
    group.start_soon(_drain_stderr, process.stderr, agent.stderr, draining, drained)
    try:
        yield agent
    finally:
        with anyio.CancelScope(shield=True):
            await stop(
                process,
                channel,
                shutdown_grace=settings.shutdown_grace,
                terminate_grace=settings.terminate_grace,
                reason="the conformance case is over",
            )
            # stderr ends once the process group is gone; a process that left the group may
            # hold it open, so the wait is bounded, then abandoned.
            with anyio.move_on_after(settings.terminate_grace):
                await drained.wait()
            draining.cancel()
            await process.aclose()


async def _drain_stderr(
    stream: ByteReceiveStream, tail: bytearray, scope: anyio.CancelScope, done: anyio.Event
) -> None:
    """Read stderr to its end (a full pipe would block the program); keep only its tail."""
    with scope:
        try:
            async for chunk in stream:
                tail += chunk
                del tail[:-_STDERR_TAIL_BYTES]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            done.set()


CaseFunction = Callable[["CaseRun"], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ConformanceCase:
    """One case: its ``name`` (what ``cases=`` and ``--case`` select), a one-line ``summary``
    of what a conforming agent does, and the coroutine function that checks it."""

    name: str
    summary: str
    run: CaseFunction


class CaseRun:
    """What a case may do: start the program (as many times as it needs), under the settings."""

    def __init__(
        self, command: AgentCommand, settings: ConformanceSettings, group: TaskGroup
    ) -> None:
        self.command = command
        self.settings = settings
        self.group = group
        self.agents: list[AgentUnderTest] = []

    @asynccontextmanager
    async def agent(self) -> AsyncIterator[AgentUnderTest]:
        async with running(self.command, self.settings, self.group) as agent:
            self.agents.append(agent)
            yield agent


def hello_for(settings: ConformanceSettings, **fields: Any) -> Hello:
    values: dict[str, Any] = {
        "protocols": SUPPORTED_VERSIONS,
        "session": "ses_conformance",
        "participant": "alice",
        "role": "agent",
        "seed": 42,
        "environment": EnvironmentInfo(
            name="conformance", version="1", turn_order="simultaneous", roles=("agent",)
        ),
        "turns": 10,
        "capabilities": ("snapshot",),
        "limits": Limits(
            max_line_bytes=DEFAULT_MAX_LINE_BYTES,
            max_log_messages=DEFAULT_MAX_LOG_MESSAGES,
            ready_timeout=settings.reply_timeout,
            act_timeout=settings.reply_timeout,
            shutdown_grace=settings.shutdown_grace,
        ),
    }
    values.update(fields)
    return Hello(**values)


async def exit_status_within(agent: AgentUnderTest, grace: float) -> int | None:
    """The program's exit status if it exits within ``grace`` seconds (reading what it still
    writes meanwhile), else ``None``."""
    with anyio.move_on_after(grace):
        await discard_output(agent)
        return await agent.process.wait()
    return None


async def discard_output(agent: AgentUnderTest) -> None:
    """Read stdout to its end, so an agent writing its last lines cannot block on the pipe."""
    assert agent.process.stdout is not None
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for _ in agent.process.stdout:
            pass


def step_of(run: CaseRun) -> str:
    return run.agents[-1].step if run.agents else "starting"


def stderr_tail(run: CaseRun) -> str:
    if not run.agents:
        return ""
    text = bytes(run.agents[-1].stderr).decode("utf-8", "replace")
    return text.strip()


def as_text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + f"… ({len(text)} chars)"


def shell_words(argv: Sequence[str]) -> str:
    return shlex.join(argv)
