"""``CommandAgent``: an external program, in any language, as a session participant.

The program is started once per participant per session, in its own process group, and spoken
to with the JSON-lines protocol (``protocol/README.md``) on its stdin and stdout; its stderr
becomes ``log`` records. It inherits only a minimal environment (``PATH``, ``HOME``, locale…)
plus what is passed explicitly, so the host's credentials never leak into it by accident.

Stopping is bounded and always complete: ``shutdown`` on the protocol, then ``SIGTERM`` to the
process group after :data:`SHUTDOWN_GRACE`, then ``SIGKILL`` after :data:`TERMINATE_GRACE`, and
the process is reaped — no zombie and no orphan, whatever the program does.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from os import PathLike
from typing import Any, TypeVar

import anyio
import anyio.abc
from msgspec import UNSET

from envharness.contracts.agent import AgentContext, AgentReply
from envharness.errors import ConfigurationError
from envharness.protocol import (
    CAPABILITIES,
    SUPPORTED_VERSIONS,
    AgentChannel,
    EnvironmentInfo,
    Feedback,
    Hello,
    Limits,
    LogMessage,
    ProtocolError,
    ProtocolViolationError,
    ScenarioInfo,
    Vetoed,
)
from envharness.protocol.process import (
    DEFAULT_INHERITED_ENV,
    StderrTail,
    agent_command,
    chunks,
    spawn,
    stop,
)
from envharness.records import Cost

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "SHUTDOWN_GRACE",
    "TERMINATE_GRACE",
    "CommandAgent",
    "CommandAgentProcess",
]

SHUTDOWN_GRACE = 2.0
"""Seconds a program has to exit after ``shutdown`` before it is sent ``SIGTERM``."""
TERMINATE_GRACE = 2.0
"""Seconds a program has to exit after ``SIGTERM`` before its process group is killed."""
STDERR_DRAIN_GRACE = 1.0
"""Seconds to wait, after the program exits, for the rest of its stderr."""
STDERR_TAIL_BYTES = 8192
"""How much of the end of stderr is kept with a failure, for its diagnosis."""
MAX_STDERR_LOGS = 2000
"""stderr lines recorded as ``log`` records per session; the rest are counted, not kept."""
_STDERR_LINE_CHARS = 4000


class CommandAgent:
    """How to start an agent program; the harness starts one process per session from it.

    ``command`` is an argv list, or a string split like a shell would (no shell runs it).
    ``env`` adds variables (e.g. ``{"MODEL": "x", "API_KEY": os.environ["API_KEY"]}``) to the
    minimal inherited set ``inherit_env``. ``limits`` sets the per-message timeouts and line
    size the host enforces (protocol ``Limits``); unset timeouts default to 60 s for ``ready``
    and none for ``action`` beyond the session's ``action_timeout``.
    """

    def __init__(
        self,
        command: Sequence[str] | str,
        *,
        implementation: str,
        env: Mapping[str, str] | None = None,
        cwd: str | PathLike[str] | None = None,
        inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
        limits: Limits | None = None,
    ) -> None:
        argv = shlex.split(command) if isinstance(command, str) else [str(p) for p in command]
        if not argv:
            raise ConfigurationError("CommandAgent needs a program to run, got an empty command")
        if not isinstance(implementation, str) or not implementation:
            raise ConfigurationError(
                f"CommandAgent {shlex.join(argv)!r} needs implementation='name@version', "
                "recorded with the evidence"
            )
        self.command = agent_command(argv, cwd=cwd, env=env, inherit_env=inherit_env)
        self.implementation = implementation
        self.limits = limits or Limits(ready_timeout=60.0, shutdown_grace=SHUTDOWN_GRACE)

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command.argv

    def __call__(self) -> CommandAgentProcess:
        return CommandAgentProcess(self)

    def __repr__(self) -> str:
        return f"CommandAgent({str(self.command)!r}, implementation={self.implementation!r})"


@dataclass(slots=True)
class _LastAct:
    id: str
    action: dict[str, Any]


class CommandAgentProcess:
    """One running program for one participant of one session (made by :class:`CommandAgent`)."""

    def __init__(self, agent: CommandAgent) -> None:
        self.agent = agent
        self.implementation = agent.implementation
        self._channel: AgentChannel | None = None
        self._stderr_tail = StderrTail(STDERR_TAIL_BYTES)
        self._last_act: _LastAct | None = None
        self._vetoed: Vetoed | None = None
        """Why the last answer was vetoed, for the next ``act`` (the re-ask) to carry."""
        self._next_turn = 1
        """The turn the next ``act`` belongs to when the session does not say (one after the
        last turn given feedback)."""
        self._current_turn: Callable[[], int | None] = lambda: None

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.text

    @asynccontextmanager
    async def lifespan(self, context: AgentContext) -> AsyncIterator[None]:
        limits = self.agent.limits
        self._next_turn = context.first_turn
        self._current_turn = context.current_turn
        process = await spawn(self.agent.command)
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        channel = AgentChannel(process.stdout, process.stdin, on_log=self._on_log(context))
        try:
            async with anyio.create_task_group() as group:
                drained = anyio.Event()
                group.start_soon(self._drain_stderr, process.stderr, context, drained)
                try:
                    await self._handshake(channel, context)
                    self._channel = channel
                    yield
                finally:
                    self._channel = None
                    with anyio.CancelScope(shield=True):
                        await stop(
                            process,
                            channel,
                            shutdown_grace=_or(limits.shutdown_grace, SHUTDOWN_GRACE),
                            terminate_grace=TERMINATE_GRACE,
                            reason="the session ended",
                        )
                        # The program's last words (often the reason it failed) come after
                        # its exit; wait for them briefly, never indefinitely.
                        with anyio.move_on_after(STDERR_DRAIN_GRACE):
                            await drained.wait()
                        group.cancel_scope.cancel()
                        await process.aclose()
        except BaseExceptionGroup as group_error:
            if len(group_error.exceptions) == 1:
                raise self._diagnosed(group_error.exceptions[0]) from None
            raise

    async def act(self, observation: Any) -> AgentReply:
        channel = self._require_channel()
        vetoed, self._vetoed = self._vetoed, None
        action = await self._answer(
            channel.act(self._current_turn() or self._next_turn, observation, vetoed=vetoed),
            self.agent.limits.act_timeout,
            "action",
            "act",
        )
        self._last_act = _LastAct(action.id, action.action)
        cost = None
        if action.cost is not None:
            c = action.cost
            cost = Cost(c.input_tokens, c.output_tokens, c.usd, c.seconds, c.model)
        return AgentReply(action.action, cost)

    async def feedback(
        self, turn: int, outcome: Any, blocked: str | None, *, action: Any = None
    ) -> None:
        """Tell the program what became of its last action: ``action`` is what was executed
        (a harness hook may have rewritten the program's answer), ``None`` when blocked — or,
        with neither an action nor a reason, the outcome of a turn it did not act in."""
        channel = self._require_channel()
        last = self._last_act
        if blocked is None and action is None:
            message = Feedback(turn=turn, act_id="", status="outcome", outcome=outcome)
        else:
            message = Feedback(
                turn=turn,
                act_id=last.id if last is not None else "",
                status="blocked" if blocked is not None else "executed",
                action=action if blocked is None else None,
                outcome=outcome if blocked is None else None,
                reason=blocked,
            )
        self._next_turn = turn + 1
        try:
            await channel.feedback(message)
        except ProtocolError as exc:
            raise self._diagnosed(exc) from exc

    def vetoed(self, turn: int, action: Any, reason: str) -> None:
        """A harness hook vetoed the program's last answer: the ``act`` that asks again (for
        the same turn, next) carries ``vetoed`` with the answer and the hook's message."""
        self._vetoed = Vetoed(action=action, reason=reason)

    @property
    def can_snapshot(self) -> bool:
        """Whether the program declared the ``snapshot`` capability in its ``ready``."""
        return self._channel is not None and "snapshot" in self._channel.capabilities

    async def snapshot(self) -> Any:
        """The program's own state, for a checkpoint (only when :attr:`can_snapshot`)."""
        channel = self._require_channel()
        timeout = self.agent.limits.act_timeout
        return await self._answer(channel.snapshot(), timeout, "state", "snapshot")

    async def restore(self, state: Any) -> None:
        """Continue from a checkpointed state; allowed before the first ``act`` only."""
        channel = self._require_channel()
        timeout = self.agent.limits.act_timeout
        await self._answer(channel.restore(state), timeout, "restored", "restore")

    # -- internals -----------------------------------------------------------------------------

    async def _handshake(self, channel: AgentChannel, context: AgentContext) -> None:
        environment = context.environment
        hello = Hello(
            protocols=SUPPORTED_VERSIONS,
            session=context.session_id,
            participant=context.participant,
            role=context.role,
            seed=context.seed,
            environment=EnvironmentInfo(
                name=environment.name,
                version=environment.version,
                turn_order=environment.turn_order,
                roles=environment.roles,
                action_schema=environment.action_schema,
            ),
            turns=context.turns,
            capabilities=tuple(sorted(CAPABILITIES)),
            limits=self.agent.limits,
            scenario=(
                ScenarioInfo(id=context.scenario_id, input=context.input)
                if context.scenario_id
                else UNSET
            ),
        )
        timeout = self.agent.limits.ready_timeout
        ready = await self._answer(channel.handshake(hello), timeout, "ready", "hello")
        context.log(
            f"ready: protocol {ready.protocol}, implementation {ready.implementation!r}, "
            f"capabilities {sorted(ready.capabilities)}",
            "info",
            "protocol",
        )

    async def _answer(
        self, call: Awaitable[_T], limit: float | None, answer: str, request: str
    ) -> _T:
        """Await the program's answer within ``limit`` seconds (the configured ``Limits``); a
        timeout is the protocol violation ``timeout``, and every failure carries the
        program's last stderr."""
        try:
            with anyio.fail_after(limit):
                return await call
        except TimeoutError as exc:
            raise self._diagnosed(
                ProtocolViolationError(
                    "timeout", f"no `{answer}` within {limit}s after `{request}`"
                )
            ) from exc
        except ProtocolError as exc:
            raise self._diagnosed(exc) from exc

    def _require_channel(self) -> AgentChannel:
        if self._channel is None:
            raise ConfigurationError(
                f"{self.agent!r} is not running: the session starts it through lifespan()"
            )
        return self._channel

    def _on_log(self, context: AgentContext) -> Any:
        def on_log(message: LogMessage) -> None:
            context.log(message.message, message.level, "protocol")

        return on_log

    async def _drain_stderr(
        self, stderr: anyio.abc.ByteReceiveStream, context: AgentContext, drained: anyio.Event
    ) -> None:
        """Read stderr to its end, so the program never blocks on a full pipe.

        Lines become ``log`` records up to :data:`MAX_STDERR_LOGS`; the rest are only counted.
        The last :data:`STDERR_TAIL_BYTES` are kept for the diagnosis of a failure.
        """
        try:
            await self._read_stderr(stderr, context)
        finally:
            drained.set()

    async def _read_stderr(
        self, stderr: anyio.abc.ByteReceiveStream, context: AgentContext
    ) -> None:
        pending = b""
        logged = dropped = 0
        async for chunk in chunks(stderr):
            self._stderr_tail.keep(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > _STDERR_LINE_CHARS:  # a newline-less flood: cut it into lines
                lines.append(pending)
                pending = b""
            for line in lines:
                if logged < MAX_STDERR_LOGS:
                    text = line.decode("utf-8", "replace").rstrip("\r")[:_STDERR_LINE_CHARS]
                    context.log(text, "info", "stderr")
                    logged += 1
                else:
                    dropped += 1
        if pending and logged < MAX_STDERR_LOGS:
            context.log(pending.decode("utf-8", "replace")[:_STDERR_LINE_CHARS], "info", "stderr")
        if dropped:
            context.log(f"{dropped} further stderr lines were not recorded", "warning", "stderr")

    def _diagnosed(self, exc: BaseException) -> BaseException:
        """Attach the stderr tail, which is often the only explanation a program gives."""
        if isinstance(exc, Exception):
            exc.stderr_tail = self.stderr_tail  # type: ignore[attr-defined]
        return exc


_T = TypeVar("_T")


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
