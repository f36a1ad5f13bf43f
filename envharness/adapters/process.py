"""``ProcessEnvironment``: an environment program, in any language, as a session's environment.

The program speaks environment protocol v1 (``protocol/environment.md``) on its stdin and
stdout: the runtime's calls become requests, each answered by a ``result``. Three choices keep
it exact and safe:

* **The state is JSON the program returns** from ``initialize``, ``resolve`` and
  ``intervene``, and every request carries the state it applies to. The harness records it,
  and resume, branch and checkpoint restore hand it back like any other environment's; the
  program may be pure, or keep a live state and rebuild it only when a request names another.
  So there is nothing to snapshot and no ``snapshot``/``restore`` message.
* **The spec is read once, when the ProcessEnvironment is made**: the program is started,
  answers ``hello`` with ``ready`` (which holds its spec) and is stopped. The harness reads the
  spec before any session, from a fresh instance, so it has to be known without a session;
  every later process must describe itself the same, or its session fails. The constructor
  blocks while it does that (a script, a notebook, the CLI); async code awaits
  :meth:`ProcessEnvironment.create` instead.
* **One process per session**, started by :meth:`ProcessEnvironment.lifespan`, which the
  runtime holds around a session, and always stopped with it — ``shutdown``, then ``SIGTERM``
  to its process group, then ``SIGKILL``, then reaped, as for a ``CommandAgent``. A call
  outside a lifespan (a branch's ``intervene``) runs in a process of its own, started and
  stopped around it. A program that crashes, hangs past ``call_timeout``, writes what the
  protocol forbids or answers out of order is stopped at once, and its session fails with the
  violation and the end of the program's stderr.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from os import PathLike
from random import Random
from typing import Annotated, Any, TypeVar

import anyio
import anyio.abc
import msgspec

from envharness._portal import call_blocking
from envharness.contracts.environment import (
    EnvironmentSpec,
    FindingSpec,
    Resolution,
    ScoreReport,
)
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.protocol.environment_channel import EnvironmentChannel
from envharness.protocol.environment_messages import (
    ENVIRONMENT_CAPABILITIES,
    SUPPORTED_ENVIRONMENT_VERSIONS,
    Acting,
    CheckAction,
    EnvironmentReportedError,
    HostRequest,
    Initialize,
    Intervene,
    Observe,
    ProgramHello,
    ProgramLimits,
    ProgramLog,
    ProgramReady,
    Purpose,
    RenderText,
    ResolutionValue,
    Resolve,
    ScenarioInfo,
    ScoreRequest,
    ScoreValue,
)
from envharness.protocol.errors import ProtocolError, ProtocolViolationError
from envharness.protocol.process import (
    DEFAULT_INHERITED_ENV,
    AgentCommand,
    StderrTail,
    agent_command,
    chunks,
    spawn,
    stop,
)

__all__ = [
    "SHUTDOWN_GRACE",
    "STDERR_DRAIN_GRACE",
    "STDERR_TAIL_BYTES",
    "TERMINATE_GRACE",
    "ProcessEnvironment",
    "ProgramLimits",
]

SHUTDOWN_GRACE = 2.0
"""Seconds a program has to exit after ``shutdown`` (unless ``limits.shutdown_grace`` says)."""
TERMINATE_GRACE = 2.0
"""Seconds a program has to exit after ``SIGTERM`` before its process group is killed."""
STDERR_DRAIN_GRACE = 1.0
"""Seconds to wait, after the program exits, for the rest of its stderr."""
STDERR_TAIL_BYTES = 8192
"""How much of the end of stderr is kept with a failure, for its diagnosis."""

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_Build = Callable[[str], HostRequest]


class ProcessEnvironment:
    """An environment program; call it for a fresh instance (the harness does, per session).

    ``command`` is an argv list, or a string split like a shell would (no shell runs it).
    ``env`` adds variables to the minimal inherited set ``inherit_env`` (the host's credentials
    never reach the program by accident); ``cwd`` is its working directory. ``limits`` sets the
    line size and the timeouts the host enforces (``call_timeout`` applies to every request).

    The constructor starts the program once to read its spec (see the module docstring) and
    raises :class:`~envharness.errors.ConfigurationError` when it cannot: a program that does
    not exist, crashes, or describes an invalid spec.
    """

    spec: EnvironmentSpec
    implementation: str | None
    """The program's own versioned id, from its ``ready``."""
    capabilities: frozenset[str]
    """The optional requests it answers: ``acting``, ``check_action``, ``render_text``,
    ``score``. Without one, that method answers as an environment without it would (every
    action legal, no text view, no score) and asks the program nothing."""

    def __init__(
        self,
        command: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | PathLike[str] | None = None,
        inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
        limits: ProgramLimits | None = None,
    ) -> None:
        program = _Program.checked(command, env, cwd, inherit_env, limits)
        self._bind(program, call_blocking(partial(_describe, program)))

    @classmethod
    async def create(
        cls,
        command: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | PathLike[str] | None = None,
        inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
        limits: ProgramLimits | None = None,
    ) -> ProcessEnvironment:
        """The same as the constructor, for async code: reading the spec does not block."""
        program = _Program.checked(command, env, cwd, inherit_env, limits)
        return cls._made(program, await _describe(program))

    @classmethod
    def _made(
        cls, program: _Program, ready: ProgramReady, spec: EnvironmentSpec | None = None
    ) -> ProcessEnvironment:
        made = cls.__new__(cls)
        made._bind(program, ready, spec)
        return made

    def _bind(
        self, program: _Program, ready: ProgramReady, spec: EnvironmentSpec | None = None
    ) -> None:
        self._program = program
        self._ready = ready
        self.spec = spec if spec is not None else _environment_spec(ready, program)
        self.implementation = ready.implementation
        self.capabilities = frozenset(ready.capabilities) & ENVIRONMENT_CAPABILITIES
        self._connection: _Connection | None = None

    def __call__(self) -> ProcessEnvironment:
        """A fresh instance of the same program and spec, with no process of its own yet."""
        return self._made(self._program, self._ready, self.spec)

    @property
    def command(self) -> tuple[str, ...]:
        return self._program.command.argv

    @property
    def limits(self) -> ProgramLimits:
        return self._program.limits

    def __repr__(self) -> str:
        return f"ProcessEnvironment({str(self._program.command)!r})"

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Start the program for the calls made until the block ends, and stop it then,
        however the block ends. The runtime holds a session in one."""
        if self._connection is not None:
            raise ConfigurationError(
                f"{self!r} is already running a session; each session needs its own instance "
                "(call the ProcessEnvironment for a fresh one, as the harness does)"
            )
        async with _Connection.open(self._program, "session", self._ready) as connection:
            self._connection = connection
            try:
                yield
            finally:
                self._connection = None

    # -- the environment contract ----------------------------------------------------------------

    async def initialize(self, input: Any, rng: Random, roster: Mapping[str, str]) -> Any:
        seed = rng.randrange(2**32)  # a JavaScript number holds it exactly
        builtin = msgspec.to_builtins(input)
        return await self._call(
            lambda id: Initialize(id=id, input=builtin, seed=seed, roster=dict(roster)),
            Any,
            "a state",
        )

    async def observe(self, state: Any, participant: str) -> Any:
        return await self._call(
            lambda id: Observe(id=id, state=state, participant=participant), Any, "a value"
        )

    async def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        value = await self._call(
            lambda id: Resolve(id=id, state=state, actions=dict(actions)),
            ResolutionValue,
            "a resolution ({state, outcomes, done, truncated, signals, rewards, artifacts})",
        )
        return Resolution(
            state=value.state,
            outcomes=value.outcomes,
            done=value.done,
            signals=value.signals,  # type: ignore[arg-type]
            artifacts=value.artifacts,
            truncated=value.truncated,
            rewards=value.rewards,
        )

    async def intervene(self, state: Any, intervention: Mapping[str, Any]) -> Any:
        builtin = msgspec.to_builtins(intervention)
        return await self._call(
            lambda id: Intervene(id=id, state=state, intervention=builtin), Any, "a state"
        )

    async def acting(self, state: Any) -> list[str]:
        self._require("acting")
        return await self._call(
            lambda id: Acting(id=id, state=state), list[str], "a list of participant names"
        )

    async def check_action(self, state: Any, participant: str, action: Any) -> str | None:
        if "check_action" not in self.capabilities:
            return None
        builtin = msgspec.to_builtins(action)
        return await self._call(
            lambda id: CheckAction(id=id, state=state, participant=participant, action=builtin),
            str | None,  # type: ignore[arg-type]
            "null or a string",
        )

    async def render_text(self, state: Any, participant: str) -> str | None:
        if "render_text" not in self.capabilities:
            return None
        return await self._call(
            lambda id: RenderText(id=id, state=state, participant=participant),
            str | None,  # type: ignore[arg-type]
            "null or a string",
        )

    async def score(self, state: Any, scenario: Scenario[Any]) -> ScoreReport | None:
        if "score" not in self.capabilities:
            return None
        info = ScenarioInfo(
            id=scenario.id,
            input=msgspec.to_builtins(scenario.input),
            reference=msgspec.to_builtins(scenario.reference),
            metadata=msgspec.to_builtins(scenario.metadata),
        )
        value = await self._call(
            lambda id: ScoreRequest(id=id, state=state, scenario=info),
            ScoreValue | None,  # type: ignore[arg-type]
            "null or a score report ({metrics, passed, findings, per_participant, ...})",
        )
        if value is None:
            return None
        return ScoreReport(
            metrics=value.metrics,
            passed=value.passed,
            findings=tuple(
                FindingSpec(f.title, f.detail, f.severity, f.turns) for f in value.findings
            ),
            uncertainty=value.uncertainty,
            version=value.version,
            per_participant=value.per_participant,
        )

    # -- internals -------------------------------------------------------------------------------

    def _require(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise ConfigurationError(
                f"{self!r} does not declare the {capability!r} capability in its ready"
            )

    async def _call(self, build: _Build, kind: type[_T], what: str) -> _T:
        connection = self._connection
        if connection is not None:
            return await connection.call(build, kind, what)
        # Outside a session (a branch's intervene, a direct call): a process for this call.
        async with _Connection.open(self._program, "call", self._ready) as connection:
            return await connection.call(build, kind, what)


class _Program:
    """A checked command and the limits it runs under."""

    __slots__ = ("command", "limits")

    def __init__(self, command: AgentCommand, limits: ProgramLimits) -> None:
        self.command = command
        self.limits = limits

    @classmethod
    def checked(
        cls,
        command: Sequence[str] | str,
        env: Mapping[str, str] | None,
        cwd: str | PathLike[str] | None,
        inherit_env: Iterable[str],
        limits: ProgramLimits | None,
    ) -> _Program:
        argv = shlex.split(command) if isinstance(command, str) else [str(p) for p in command]
        if not argv:
            raise ConfigurationError(
                "ProcessEnvironment needs a program to run, got an empty command"
            )
        if limits is not None and not isinstance(limits, ProgramLimits):
            raise ConfigurationError(
                f"limits must be a ProgramLimits(...), not {type(limits).__name__}"
            )
        checked = agent_command(
            argv, cwd=cwd, env=env, inherit_env=inherit_env, owner="environment"
        )
        return cls(checked, limits or ProgramLimits())


async def _describe(program: _Program) -> ProgramReady:
    """Start the program, read its ``ready``, stop it: the spec, known before any session."""
    try:
        async with _Connection.open(program, "describe", None) as connection:
            return connection.ready
    except ProtocolError as exc:
        raise ConfigurationError(
            f"environment program {str(program.command)!r} could not describe itself: {exc}"
        ) from exc


def _environment_spec(ready: ProgramReady, program: _Program) -> EnvironmentSpec:
    """The program's spec as an ``EnvironmentSpec``: its schemas ride on JSON types (the
    evidence and agents see them; checking against them is the program's job)."""
    described = ready.spec
    if described.turn_order == "environment" and "acting" not in ready.capabilities:
        raise ConfigurationError(
            f"environment program {str(program.command)!r} declares turn_order 'environment' "
            "but not the 'acting' capability; answer `acting` requests and list 'acting' in "
            "ready.capabilities"
        )
    try:
        return EnvironmentSpec(
            name=described.name,
            version=described.version,
            input_type=_typed(Any, described.input_schema, f"{described.name}.Input"),
            action_type=(
                _typed(dict[str, Any], described.action_schema, f"{described.name}.Action")
                if described.action_schema is not None
                else None
            ),
            observation_type=(
                _typed(Any, described.observation_schema, f"{described.name}.Observation")
                if described.observation_schema is not None
                else None
            ),
            roles=described.roles,
            turn_order=described.turn_order,
            invalid_actions=described.invalid_actions,
            scoring_version=described.scoring_version,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"environment program {str(program.command)!r} described an invalid spec: {exc}"
        ) from exc


def _typed(base: Any, schema: dict[str, Any] | None, name: str) -> Any:
    """``base`` carrying ``schema`` as its JSON Schema (what the evidence records), named
    ``environment_program.<name>`` in the evidence (it has no Python class)."""
    if schema is None:
        return base
    # The title makes the alias (typing caches them by their arguments) this name's own; a
    # typing alias keeps dunder attributes for itself, and the evidence names a type by them.
    typed: Any = Annotated[base, msgspec.Meta(title=name, extra_json_schema=schema)]
    typed.__module__ = "environment_program"
    typed.__qualname__ = name
    return typed


class _Connection:
    """One running program process: its channel, the end of its stderr, and its stopping."""

    def __init__(
        self,
        program: _Program,
        process: anyio.abc.Process,
        channel: EnvironmentChannel,
    ) -> None:
        self._program = program
        self._process = process
        self._channel = channel
        self._tail = StderrTail(STDERR_TAIL_BYTES)
        self._drained = anyio.Event()
        self._lock = anyio.Lock()
        self._stopped = False
        self._ready: ProgramReady | None = None

    @property
    def ready(self) -> ProgramReady:
        assert self._ready is not None
        return self._ready

    @classmethod
    @asynccontextmanager
    async def open(
        cls, program: _Program, purpose: Purpose, expected: ProgramReady | None
    ) -> AsyncIterator[_Connection]:
        """A started, handshaken program until the block ends; then it is stopped."""
        process = await spawn(program.command)
        assert process.stdout is not None
        assert process.stdin is not None
        assert process.stderr is not None
        name = str(program.command)
        channel = EnvironmentChannel(
            process.stdout, process.stdin, limits=program.limits, on_log=partial(_log, name)
        )
        connection = cls(program, process, channel)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(connection._read_stderr, process.stderr)
                try:
                    await connection._handshake(purpose, expected)
                    yield connection
                finally:
                    with anyio.CancelScope(shield=True):
                        await connection._stop("the session ended")
                        group.cancel_scope.cancel()
                        await process.aclose()
        except BaseExceptionGroup as group_error:
            if len(group_error.exceptions) == 1:  # the session's own failure, not a group
                failure = group_error.exceptions[0]
                raise failure from failure.__cause__
            raise

    async def call(self, build: _Build, kind: type[_T], what: str) -> _T:
        """One request and its result's value, as ``kind``; any failure is diagnosed."""
        async with self._lock:
            channel = self._channel
            if channel.broken is not None:
                raise ProtocolViolationError(
                    "closed",
                    f"the environment program can no longer be asked ({channel.broken}); the "
                    "session should have ended with that failure",
                )
            request = build(channel.new_id())
            tag = request.__struct_config__.tag
            limit = self._program.limits.call_timeout
            try:
                with anyio.fail_after(limit):
                    value, line = await channel.call(request)
            except TimeoutError as exc:
                violation = ProtocolViolationError(
                    "timeout", f"no `result` within {limit}s after `{tag}`"
                )
                raise await self._diagnosed(violation) from exc
            except EnvironmentReportedError as exc:
                if exc.answered:  # the program is in step: it refused this one request
                    exc.stderr_tail = self._tail.text  # type: ignore[attr-defined]
                    raise
                raise await self._diagnosed(exc) from exc
            except ProtocolError as exc:
                raise await self._diagnosed(exc) from exc
            try:
                return msgspec.convert(value, kind)
            except msgspec.ValidationError as exc:
                violation = ProtocolViolationError(
                    "invalid_field",
                    f"the `result` of `{tag}` must hold {what} in `value`: {exc}",
                    line,
                )
                raise await self._diagnosed(violation) from exc

    # -- internals -------------------------------------------------------------------------------

    async def _handshake(self, purpose: Purpose, expected: ProgramReady | None) -> None:
        limits = self._program.limits
        hello = ProgramHello(
            protocols=SUPPORTED_ENVIRONMENT_VERSIONS,
            purpose=purpose,
            limits=limits,
        )
        try:
            with anyio.fail_after(limits.ready_timeout):
                ready = await self._channel.handshake(hello)
        except TimeoutError as exc:
            violation = ProtocolViolationError(
                "timeout", f"no `ready` within {limits.ready_timeout}s after `hello`"
            )
            raise await self._diagnosed(violation) from exc
        except ProtocolError as exc:
            raise await self._diagnosed(exc) from exc
        if expected is not None and _described(ready) != _described(expected):
            raise ConfigurationError(
                f"environment program {str(self._program.command)!r} now describes itself "
                f"differently from when the ProcessEnvironment read its spec (then "
                f"{_described(expected)}, now {_described(ready)}); its evidence would not be "
                "comparable: make the ProcessEnvironment again"
            )
        self._ready = ready

    async def _stop(self, reason: str) -> None:
        """Stop the program (bounded; idempotent) and wait briefly for the rest of stderr."""
        if self._stopped:
            return
        self._stopped = True
        grace = self._program.limits.shutdown_grace
        await stop(
            self._process,
            self._channel,
            shutdown_grace=SHUTDOWN_GRACE if grace is None else grace,
            terminate_grace=TERMINATE_GRACE,
            reason=reason,
        )
        # The program's last words (often the reason it failed) come after its exit.
        with anyio.move_on_after(STDERR_DRAIN_GRACE):
            await self._drained.wait()

    async def _diagnosed(self, exc: ProtocolError) -> ProtocolError:
        """``exc`` with the program's last words: the program is stopped first (nothing more
        can be asked of it), so its stderr is complete and its exit status known."""
        with anyio.CancelScope(shield=True):
            await self._stop("the environment program failed")
        tail = self._tail.text
        if isinstance(exc, ProtocolViolationError):
            extra = ""
            status = self._process.returncode
            if exc.code == "closed" and status is not None:
                extra += f" (exit status {status})"
            last = _last_line(tail)
            if last:
                extra += f"; its stderr ends: {last!r}"
            if extra:
                diagnosed = ProtocolViolationError.sized(
                    exc.code, exc.problem + extra, exc.offending, exc.offending_size
                )
                diagnosed.__cause__ = exc.__cause__
                exc = diagnosed
        exc.stderr_tail = tail  # type: ignore[attr-defined]
        return exc

    async def _read_stderr(self, stderr: anyio.abc.ByteReceiveStream) -> None:
        """Read stderr to its end (the program never blocks on a full pipe); keep its end for
        a diagnosis, and pass its lines to this module's logger at debug level."""
        pending = b""
        try:
            async for chunk in chunks(stderr):
                self._tail.keep(chunk)
                if _logger.isEnabledFor(logging.DEBUG):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    pending = pending[-STDERR_TAIL_BYTES:]
                    for line in lines:
                        _logger.debug(
                            "%s stderr: %s", self._program.command, line.decode("utf-8", "replace")
                        )
        finally:
            self._drained.set()


def _described(ready: ProgramReady) -> tuple[Any, ...]:
    return (ready.protocol, ready.spec, ready.implementation, sorted(ready.capabilities))


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def _log(name: str, message: ProgramLog) -> None:
    _logger.log(_LEVELS.get(message.level, logging.ERROR), "%s: %s", name, message.message)


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[-300:]
    return ""
