"""The agent-side conformance suite: does a program speak protocol v1 the way the spec says?

``envharness protocol check -- PROGRAM ARGS...`` runs it; this module is its engine, usable from
any test suite (``await check_agent(["node", "my_agent.mjs"])``). It is how an agent author in
another language learns that their program will work in a session before running one.

Each case starts a **fresh process**, so a failure in one case can neither hide nor cause a
failure in another, and every process is stopped the way a session stops it: protocol
``shutdown``, then SIGTERM to its process group after a grace period, then SIGKILL, under a
shielded scope — whatever happens, nothing is left running and nothing is left unreaped. The
program gets the minimal environment a session gives it (:data:`INHERITED_ENV` plus what the
caller passes), so a check that passes here does not pass only thanks to the caller's variables.

Cases talk through :class:`~envharness.protocol.channel.AgentChannel`, the host's own
implementation of the protocol, so "conformant" means exactly "works with the host"; every
answer is awaited under ``anyio.fail_after`` with the configured timeout. When the handshake
fails, the remaining cases are skipped: they would fail the same way, each after a timeout.
"""

from __future__ import annotations

import json
import os
import shlex
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from envharness.errors import ConfigurationError
from envharness.protocol.channel import AgentChannel
from envharness.protocol.errors import (
    AgentReportedError,
    ProtocolViolationError,
)
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
    DEFAULT_INHERITED_ENV,
    AgentCommand,
    agent_command,
    spawn,
    stop,
)

__all__ = [
    "CASES",
    "DEFAULT_REPLY_TIMEOUT",
    "DEFAULT_SHUTDOWN_GRACE",
    "DEFAULT_TERMINATE_GRACE",
    "INHERITED_ENV",
    "CaseResult",
    "CaseStatus",
    "ConformanceCase",
    "ConformanceReport",
    "ConformanceSettings",
    "check_agent",
]

DEFAULT_REPLY_TIMEOUT: Final = 10.0
"""Seconds an agent has for each answer (``ready``, ``action``, ``state``, ``restored``)."""
DEFAULT_SHUTDOWN_GRACE: Final = 3.0
"""Seconds an agent has to exit after ``shutdown`` (or the end of its input) before SIGTERM."""
DEFAULT_TERMINATE_GRACE: Final = 2.0
"""Seconds an agent has to exit after SIGTERM before its process group is killed."""

INHERITED_ENV: Final = DEFAULT_INHERITED_ENV
"""Variables the program gets from the caller's environment; everything else must be passed."""

UNSUPPORTED_VERSION: Final = 999
"""A protocol version no agent speaks: offered alone, it must be refused with ``error``."""

LARGE_OBSERVATION_BYTES: Final = 256 * 1024
"""Larger than an OS pipe buffer and than the 64 KiB a default line reader often stops at
(Go's ``bufio.Scanner``, for one); protocol lines may be up to 1 MiB."""

_STDERR_TAIL_BYTES = 2048
_EXCERPT_CHARS = 200

_T = TypeVar("_T")


CaseStatus = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """What one case found. ``detail`` says what was seen (or why it was skipped); for a failure
    it names the step, the rule and the offending line, and ``stderr`` holds the end of what the
    program wrote there (often the real explanation: a traceback, a missing module)."""

    name: str
    status: CaseStatus
    detail: str
    seconds: float
    stderr: str = ""


@dataclass(frozen=True, slots=True)
class ConformanceReport:
    """Every case's result, in the order the cases ran, and what the agent said it is."""

    argv: tuple[str, ...]
    results: tuple[CaseResult, ...]
    implementation: str | None = None
    capabilities: tuple[str, ...] = ()

    def count(self, status: CaseStatus) -> int:
        return sum(1 for result in self.results if result.status == status)

    @property
    def passed(self) -> int:
        return self.count("passed")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def ok(self) -> bool:
        """No case failed (skipped cases are optional features the agent did not declare)."""
        return self.failed == 0


@dataclass(frozen=True, slots=True)
class ConformanceSettings:
    """The timeouts a check runs under; tests shrink them, slow (model-backed) agents raise
    ``reply_timeout``."""

    reply_timeout: float = DEFAULT_REPLY_TIMEOUT
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    terminate_grace: float = DEFAULT_TERMINATE_GRACE

    def __post_init__(self) -> None:
        for name in ("reply_timeout", "shutdown_grace", "terminate_grace"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds")


# -- running one program -------------------------------------------------------------------------


class _Failure(Exception):
    """A case found the agent breaking a rule the channel cannot see (exit status, equality)."""


class _Skip(Exception):
    """The case does not apply to this agent (an optional capability it did not declare)."""


@dataclass(slots=True)
class _Agent:
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
        await self.reply("hello", self.channel.handshake(_hello(self.settings, **fields)))

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
async def _running(
    command: AgentCommand, settings: ConformanceSettings, group: TaskGroup
) -> AsyncIterator[_Agent]:
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
    agent = _Agent(process, channel, settings, logs)
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


# -- the cases -----------------------------------------------------------------------------------

_CaseFunction = Callable[["_Run"], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ConformanceCase:
    """One case: its ``name`` (what ``cases=`` and ``--case`` select), a one-line ``summary``
    of what a conforming agent does, and the coroutine function that checks it."""

    name: str
    summary: str
    run: _CaseFunction


class _Run:
    """What a case may do: start the program (as many times as it needs), under the settings."""

    def __init__(
        self, command: AgentCommand, settings: ConformanceSettings, group: TaskGroup
    ) -> None:
        self.command = command
        self.settings = settings
        self.group = group
        self.agents: list[_Agent] = []

    @asynccontextmanager
    async def agent(self) -> AsyncIterator[_Agent]:
        async with _running(self.command, self.settings, self.group) as agent:
            self.agents.append(agent)
            yield agent


def _synthetic(total: int, turn: int, target: int | None = 3) -> dict[str, Any]:
    """An observation shaped like ``envharness.fixtures.SyntheticEnvironment``'s."""
    return {"total": total, "turn": turn, "target": target, "my_contributions": []}


async def _handshake_case(run: _Run) -> str:
    async with run.agent() as agent:
        # An unknown capability must be ignored (spec section 5).
        await agent.handshake(capabilities=("snapshot", "x-conformance-unknown"))
        ready = agent.channel.ready
        assert ready is not None
        named = (
            f"implementation {ready.implementation!r}"
            if ready.implementation
            else "no implementation named (recommended: name@version)"
        )
        capabilities = ", ".join(ready.capabilities) or "none"
        return f"protocol {ready.protocol}, {named}, capabilities: {capabilities}"


async def _unsupported_version_case(run: _Run) -> str:
    async with run.agent() as agent:
        try:
            await agent.handshake(protocols=(UNSUPPORTED_VERSION,))
        except AgentReportedError as exc:
            message = exc.message
        else:
            raise _Failure(
                f"the agent answered ready with protocol {UNSUPPORTED_VERSION}, a version it "
                "cannot speak; when no offered version is supported, answer `error` and exit"
            )
        agent.step = "exit after error"
        with anyio.move_on_after(run.settings.shutdown_grace):
            await _discard_output(agent)
            status = await agent.process.wait()
            return f"refused with error {_excerpt(message)!r}, then exited with status {status}"
        raise _Failure(
            f"the agent answered error but was still running {run.settings.shutdown_grace:g} s "
            "later; after refusing every offered version, exit"
        )


async def _act_case(run: _Run) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        action = await agent.act(1, _synthetic(0, 0))
        return f"answered with action {_excerpt(_json(action))}"


async def _act_sequence_case(run: _Run) -> str:
    turns = 5
    async with run.agent() as agent:
        await agent.handshake()
        for turn in range(1, turns + 1):
            await agent.act(turn, _synthetic(turn - 1, turn - 1))
        return f"answered {turns} acts, each with its own id"


async def _feedback_case(run: _Run) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        first = await agent.reply("act (turn 1)", agent.channel.act(1, _synthetic(0, 0)))
        agent.step = "executed feedback (turn 1)"
        await agent.channel.feedback(
            Feedback(turn=1, act_id=first.id, status="executed", action=first.action, outcome={})
        )
        second = await agent.reply("act (turn 2)", agent.channel.act(2, _synthetic(0, 1)))
        agent.step = "blocked feedback (turn 2)"
        await agent.channel.feedback(
            Feedback(
                turn=2,
                act_id=second.id,
                status="blocked",
                action=second.action,
                reason="conformance: this action is blocked on purpose",
            )
        )
        # Any answer to either feedback arrives before this act's action and fails it.
        await agent.act(3, _synthetic(0, 2))
        return "took executed and blocked feedback without answering"


async def _logs_case(run: _Run) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        for turn in (1, 2, 3):
            await agent.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        agent.step = "shutdown"
        with anyio.move_on_after(run.settings.shutdown_grace):
            await agent.channel.shutdown("conformance: logs case")
        if not agent.logs:
            return "sent no log messages (they are optional)"
        levels = Counter(log.level for log in agent.logs)
        counted = ", ".join(f"{count} {level}" for level, count in sorted(levels.items()))
        return f"{len(agent.logs)} well-formed log messages ({counted})"


_TRICKY_TEXT = 'héllo wörld — 你好 🎲 "quoted" back\\slash\nnew line\ttab \u2028 \x00 end'


async def _observation_values_case(run: _Run) -> str:
    observations: list[tuple[str, Any]] = [
        (
            "nested object with unicode",
            {
                "text": _TRICKY_TEXT,
                "ключ": ["значение", {"深い": [[[{"id": "not-the-id", "type": "shutdown"}]]]}],
                "numbers": [0, -1, 2.5, -3e-10, 1e300, 2**63 - 1],
                "flags": [True, False, None],
                "empty": [{}, [], ""],
                "id": "decoy",
                "type": "act",
                "total": 7,
                "target": None,
            },
        ),
        ("a string", _TRICKY_TEXT),
        ("null", None),
        ("an array", [1, "two", {"three": [3]}]),
        ("a number", -42),
    ]
    async with run.agent() as agent:
        await agent.handshake()
        for turn, (what, observation) in enumerate(observations, start=1):
            agent.step = f"act (turn {turn}, observation: {what})"
            await agent.act(turn, observation, actions=[{"value": 1}, {"value": -1}])
        return f"answered {len(observations)} acts: " + ", ".join(w for w, _ in observations)


async def _large_observation_case(run: _Run) -> str:
    blob = "0123456789abcdef" * (LARGE_OBSERVATION_BYTES // 16)
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act(1, {**_synthetic(0, 0), "blob": blob})
        await agent.act(2, _synthetic(0, 1))
        return f"answered an act of {len(blob) // 1024} KiB and the act after it"


async def _snapshot_restore_case(run: _Run) -> str:
    async with run.agent() as first:
        await first.handshake()
        if "snapshot" not in first.channel.capabilities:
            raise _Skip("the agent did not declare the 'snapshot' capability (optional)")
        for turn in (1, 2):
            await first.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        state = await first.reply("snapshot", first.channel.snapshot())
        await first.act(3, _synthetic(2, 2))  # it goes on after a snapshot
    async with run.agent() as second:
        await second.handshake()
        await second.reply("restore", second.channel.restore(state))
        again = await second.reply("snapshot after restore", second.channel.snapshot())
        if again != state:
            raise _Failure(
                f"a snapshot right after restoring {_excerpt(_json(state))} returned "
                f"{_excerpt(_json(again))}; restore must put the agent back exactly where the "
                "snapshot was taken (branches and resumed sessions rely on it)"
            )
        await second.act(3, _synthetic(2, 2))  # and it acts after a restore
    return f"state {_excerpt(_json(state))} survived snapshot, restore and snapshot again"


async def _shutdown_case(run: _Run) -> str:
    grace = run.settings.shutdown_grace
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act_and_feedback(1, _synthetic(0, 0))
        agent.step = "shutdown"
        started = anyio.current_time()
        with anyio.move_on_after(grace):
            await agent.channel.shutdown("conformance: shutdown case")
            status = await agent.process.wait()
            seconds = anyio.current_time() - started
            if status != 0:
                raise _Failure(f"the agent exited with status {status} after shutdown; exit 0")
            return f"exited with status 0 after {seconds:.2f} s"
        raise _Failure(
            f"the agent was still running {grace:g} s after shutdown (it would get SIGTERM); "
            "exit when shutdown arrives"
        )


async def _end_of_input_case(run: _Run) -> str:
    grace = run.settings.shutdown_grace
    async with run.agent() as agent:
        await agent.handshake()
        await agent.act_and_feedback(1, _synthetic(0, 0))
        agent.step = "end of input"
        assert agent.process.stdin is not None
        await agent.process.stdin.aclose()
        with anyio.move_on_after(grace):
            await _discard_output(agent)
            status = await agent.process.wait()
            return f"exited with status {status} when its input ended"
        raise _Failure(
            f"the agent was still running {grace:g} s after its input ended; an agent that "
            "reads end of input must exit as if it had received shutdown"
        )


async def _stdout_case(run: _Run) -> str:
    async with run.agent() as agent:
        await agent.handshake()
        for turn in (1, 2, 3):
            await agent.act_and_feedback(turn, _synthetic(turn - 1, turn - 1))
        extra = ""
        if "snapshot" in agent.channel.capabilities:
            await agent.reply("snapshot", agent.channel.snapshot())
            extra = ", a snapshot"
        agent.step = "shutdown (reading the output to its end)"
        with anyio.move_on_after(run.settings.shutdown_grace):
            await agent.channel.shutdown("conformance: stdout case")
        return (
            f"every line was a protocol message through a handshake, 3 acts with feedback{extra}"
            " and shutdown"
        )


CASES: Final[tuple[ConformanceCase, ...]] = (
    ConformanceCase(
        "handshake", "answers hello with ready and an offered version", _handshake_case
    ),
    ConformanceCase(
        "unsupported-version",
        "refuses a hello offering no version it speaks with error, then exits",
        _unsupported_version_case,
    ),
    ConformanceCase("act", "answers act with an action object repeating the act's id", _act_case),
    ConformanceCase(
        "act-sequence", "answers several acts in turn, each with its id", _act_sequence_case
    ),
    ConformanceCase(
        "feedback", "takes executed and blocked feedback without answering", _feedback_case
    ),
    ConformanceCase("logs", "sends only well-formed log messages between answers", _logs_case),
    ConformanceCase(
        "observation-values",
        "accepts unicode, nested values and observations of any JSON kind",
        _observation_values_case,
    ),
    ConformanceCase(
        "large-observation",
        "reads an act line larger than a pipe buffer (256 KiB)",
        _large_observation_case,
    ),
    ConformanceCase(
        "snapshot-restore",
        "round-trips its state through snapshot and restore (capability snapshot)",
        _snapshot_restore_case,
    ),
    ConformanceCase(
        "shutdown", "exits with status 0 within the grace period after shutdown", _shutdown_case
    ),
    ConformanceCase(
        "end-of-input", "exits when its input ends without shutdown", _end_of_input_case
    ),
    ConformanceCase(
        "stdout-protocol-only",
        "writes nothing but protocol lines on stdout through a whole session",
        _stdout_case,
    ),
)
"""Every case, in the order they run; ``handshake`` comes first because all others need it."""

_BY_NAME = {case.name: case for case in CASES}


# -- the suite -----------------------------------------------------------------------------------


async def check_agent(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: Iterable[str] = INHERITED_ENV,
    settings: ConformanceSettings | None = None,
    cases: Iterable[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> ConformanceReport:
    """Run the conformance cases (all, or those named) against the program ``argv``.

    A program that cannot be found or run raises :class:`~envharness.errors.ConfigurationError`
    before any case runs; everything the *agent* gets wrong is a failed case in the report.
    ``on_result`` hears about each case as it finishes (the CLI prints progress with it).
    """
    settings = settings or ConformanceSettings()
    selected = _select(cases)
    command = agent_command(argv, cwd=cwd, env=env, inherit_env=inherit_env)
    results: list[CaseResult] = []
    implementation: str | None = None
    capabilities: tuple[str, ...] = ()
    handshake_failed = False
    for case in selected:
        if handshake_failed:
            result = CaseResult(case.name, "skipped", "needs the handshake, which failed", 0.0)
        else:
            result, run = await _run_case(case, command, settings)
            handshake_failed = case.name == "handshake" and result.status == "failed"
            ready = run.agents[0].channel.ready if run.agents else None
            if ready is not None and implementation is None:
                implementation, capabilities = ready.implementation, ready.capabilities
        results.append(result)
        if on_result is not None:
            on_result(result)
    return ConformanceReport(
        argv=command.argv,
        results=tuple(results),
        implementation=implementation,
        capabilities=capabilities,
    )


async def _run_case(
    case: ConformanceCase, command: AgentCommand, settings: ConformanceSettings
) -> tuple[CaseResult, _Run]:
    """Run one case; what the agent does wrong becomes a failed result, never an exception.

    Everything is caught inside the task group that drains stderr, so nothing reaches its exit
    but cancellation; a program that cannot start is raised after it, as itself.
    """
    started = anyio.current_time()
    status: CaseStatus = "failed"
    detail = ""
    unstartable: ConfigurationError | None = None
    async with anyio.create_task_group() as group:
        run = _Run(command, settings, group)
        try:
            detail = await case.run(run)
            status = "passed"
        except _Skip as skip:
            status, detail = "skipped", str(skip)
        except _Failure as failure:
            detail = f"at {_step(run)}: {failure}"
        except ProtocolViolationError as violation:
            detail = f"at {_step(run)}: {violation.code}: {violation.problem}"
            if violation.offending:
                detail += f"; the line: {_excerpt(_text(violation.offending))}"
        except AgentReportedError as error:
            detail = f"at {_step(run)}: the agent answered error: {_excerpt(error.message)}"
        except ConfigurationError as error:
            unstartable = error
    if unstartable is not None:
        raise unstartable
    seconds = anyio.current_time() - started
    stderr = _stderr_tail(run) if status == "failed" else ""
    return CaseResult(case.name, status, detail, seconds, stderr), run


def _select(names: Iterable[str] | None) -> tuple[ConformanceCase, ...]:
    if names is None:
        return CASES
    wanted = set(names)
    unknown = sorted(wanted - _BY_NAME.keys())
    if unknown:
        raise ConfigurationError(
            f"unknown conformance case {', '.join(map(repr, unknown))}; the cases are: "
            f"{', '.join(_BY_NAME)}"
        )
    return tuple(case for case in CASES if case.name in wanted)


# -- helpers -------------------------------------------------------------------------------------


def _hello(settings: ConformanceSettings, **fields: Any) -> Hello:
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


async def _discard_output(agent: _Agent) -> None:
    """Read stdout to its end, so an agent writing its last lines cannot block on the pipe."""
    assert agent.process.stdout is not None
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for _ in agent.process.stdout:
            pass


def _step(run: _Run) -> str:
    return run.agents[-1].step if run.agents else "starting"


def _stderr_tail(run: _Run) -> str:
    if not run.agents:
        return ""
    text = bytes(run.agents[-1].stderr).decode("utf-8", "replace")
    return text.strip()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + f"… ({len(text)} chars)"


def _shell_words(argv: Sequence[str]) -> str:
    return shlex.join(argv)
