"""The host's side of one conversation with an external agent.

:class:`AgentChannel` turns two byte streams (the agent's stdout and stdin) into calls:
``handshake`` (``hello`` → ``ready``), ``act`` (→ ``action``), ``feedback`` (no answer),
``snapshot`` (→ ``state``), ``restore`` (→ ``restored``) and ``shutdown``. It checks every rule
the spec states for answers — the right type, the right id, no id answered twice, a version that
was offered — and raises a classified violation otherwise.

Two choices keep it safe with untrusted programs:

* A large message is sent while reading. An agent that is busy writing logs to a full pipe
  cannot read its input, and a host that only wrote would wait forever; reading concurrently
  drains the logs and so breaks that deadlock. A small message (at most
  :data:`DIRECT_SEND_BYTES`) is written directly, which is several times cheaper than a task:
  an agent has read every message up to the last one it answered, so at most two small
  messages (a ``feedback`` and the next request) wait unread in its input, and they fit in
  any OS pipe buffer — the write cannot block. Between calls nothing is read, so an idle
  agent's output waits in the OS pipe (back-pressure, not host memory).
* Callers own time. No method takes a timeout: wrap calls in ``anyio.fail_after`` with the
  values in :class:`~envharness.protocol.messages.Limits`. A call that fails or is cancelled
  leaves the channel *broken*; after that only ``shutdown`` is allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, ByteSendStream
from msgspec import UNSET

from envharness.protocol._calls import CallDiscipline
from envharness.protocol.errors import (
    AgentReportedError,
    ChannelUsageError,
    ProtocolViolationError,
)
from envharness.protocol.framing import DEFAULT_CHUNK_SIZE, MessageReader, MessageWriter
from envharness.protocol.messages import (
    Act,
    Action,
    AgentMessage,
    ErrorMessage,
    Feedback,
    Hello,
    HostMessage,
    Limits,
    LogMessage,
    Ready,
    Restore,
    Restored,
    Shutdown,
    Snapshot,
    State,
    Vetoed,
    decode_agent_message,
    message_type,
)

__all__ = ["DIRECT_SEND_BYTES", "AgentChannel", "LogCallback"]

LogCallback = Callable[[LogMessage], None]
"""Receives every ``log`` message, in order, as it is read (the runtime records them)."""

_Then = Literal["wait", "cancel", "close"]

DIRECT_SEND_BYTES = 4096
"""Lines up to this size are written without a concurrent read (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class _Awaited:
    """The one answer the channel is waiting for, and how to name it in a problem."""

    kind: type[AgentMessage]
    id: str | None
    request: str


class AgentChannel:
    """Request/response discipline over an agent's output (``receive``) and input (``send``).

    The streams stay the caller's: the channel closes ``send`` only in :meth:`shutdown`, as
    the protocol says, and never closes ``receive``. Calls must not overlap.
    """

    def __init__(
        self,
        receive: ByteReceiveStream,
        send: ByteSendStream,
        *,
        on_log: LogCallback | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        self._receive = receive
        self._writer = MessageWriter(send)
        self._on_log = on_log
        self._chunk_size = chunk_size
        self._reader: MessageReader[AgentMessage] | None = None
        self._limits = Limits()
        self._calls = CallDiscipline(AgentReportedError, "the agent reported an error")
        self._input_closed = False
        self._acted = False
        self._next_id = 0
        self._answered: set[str] = set()
        self._ready: Ready | None = None
        self._capabilities: frozenset[str] = frozenset()

    # -- what was negotiated -------------------------------------------------------------------

    @property
    def ready(self) -> Ready | None:
        """The agent's ``ready`` message, once the handshake succeeded."""
        return self._ready

    @property
    def protocol(self) -> int | None:
        return self._ready.protocol if self._ready is not None else None

    @property
    def capabilities(self) -> frozenset[str]:
        """Capabilities both sides named: the host offered them and the agent supports them."""
        return self._capabilities

    @property
    def limits(self) -> Limits:
        """The limits sent in ``hello`` (defaults before the handshake)."""
        return self._limits

    @property
    def broken(self) -> str | None:
        """Why the channel can no longer be used, or ``None`` while it can."""
        return self._calls.broken

    # -- the calls -----------------------------------------------------------------------------

    async def handshake(self, hello: Hello) -> Ready:
        """Send ``hello`` and wait for ``ready`` with one of the offered protocol versions."""
        with self._calls.call("handshake", "new"):
            self._limits = hello.limits
            self._reader = MessageReader(
                self._receive,
                decode_agent_message,
                max_line_bytes=hello.limits.max_line_bytes,
                chunk_size=self._chunk_size,
            )
            ready, line = await self._request(hello, _Awaited(Ready, None, "hello"))
            assert isinstance(ready, Ready)
            if ready.protocol not in hello.protocols:
                raise ProtocolViolationError(
                    "version_mismatch",
                    f"the agent chose protocol version {ready.protocol}, but the host offered "
                    f"{list(hello.protocols)}; choose one of the offered versions, or answer "
                    "`error` when none is supported",
                    line,
                )
            self._ready = ready
            self._capabilities = frozenset(hello.capabilities) & frozenset(ready.capabilities)
            self._calls.phase = "open"
        return ready

    async def act(
        self,
        turn: int,
        observation: Any,
        actions: Sequence[Any] | None = None,
        *,
        vetoed: Vetoed | None = None,
    ) -> Action:
        """Ask for a decision; the answer is the ``action`` whose id matches this request.
        ``vetoed`` says why the previous answer in this turn was not executed (a re-ask)."""
        with self._calls.call("act", "open"):
            act_id = self._new_id()
            message = Act(
                id=act_id,
                turn=turn,
                observation=observation,
                actions=tuple(actions) if actions is not None else None,
                vetoed=UNSET if vetoed is None else vetoed,
            )
            self._acted = True
            action, _ = await self._request(message, _Awaited(Action, act_id, f"act {act_id!r}"))
            assert isinstance(action, Action)
        return action

    async def feedback(self, feedback: Feedback) -> None:
        """Tell the agent what became of its action; nothing is answered."""
        with self._calls.call("feedback", "open"):
            await self._exchange(self._writer.encode(feedback), None, then="cancel")

    async def snapshot(self) -> Any:
        """The agent's state now, for a checkpoint (capability ``snapshot``)."""
        self._require("snapshot")
        with self._calls.call("snapshot", "open"):
            snapshot_id = self._new_id()
            state, _ = await self._request(
                Snapshot(id=snapshot_id), _Awaited(State, snapshot_id, f"snapshot {snapshot_id!r}")
            )
            assert isinstance(state, State)
        return state.state

    async def restore(self, state: Any) -> None:
        """Make the agent continue from ``state`` (capability ``snapshot``; before any ``act``)."""
        self._require("snapshot")
        if self._acted:
            raise ChannelUsageError("restore is only allowed before the first act")
        with self._calls.call("restore", "open"):
            restore_id = self._new_id()
            await self._request(
                Restore(id=restore_id, state=state),
                _Awaited(Restored, restore_id, f"restore {restore_id!r}"),
            )

    async def shutdown(self, reason: str = "") -> None:
        """Send ``shutdown``, close the agent's input, then read its last logs until it ends.

        Allowed in any state (also after a failure); on a broken channel it only sends and
        closes, because what follows a broken stream is not worth reading. Wrap it in
        ``anyio.move_on_after(limits.shutdown_grace)`` and terminate the process afterwards.
        """
        with self._calls.closing() as healthy:
            if healthy is None:
                return
            line = self._writer.encode(Shutdown(reason=reason))
            if healthy:
                await self._exchange(line, None, then="close")
            elif not self._input_closed:
                await self._send(line, then="close")

    # -- the discipline ------------------------------------------------------------------------

    def _require(self, capability: str) -> None:
        if capability not in self._capabilities:
            raise ChannelUsageError(
                f"the {capability!r} capability was not negotiated with this agent "
                f"(negotiated: {sorted(self._capabilities)})"
            )

    def _new_id(self) -> str:
        self._next_id += 1
        return str(self._next_id)

    async def _request(self, message: HostMessage, awaited: _Awaited) -> tuple[AgentMessage, bytes]:
        answer = await self._exchange(self._writer.encode(message), awaited)
        assert answer is not None
        if awaited.id is not None:
            self._answered.add(awaited.id)
        return answer

    async def _exchange(
        self, line: bytes, awaited: _Awaited | None, *, then: _Then = "wait"
    ) -> tuple[AgentMessage, bytes] | None:
        """Send ``line`` (while reading, when it is large), so neither side can block the other.

        Reading goes on until the awaited answer; with none awaited, until the line is sent
        (``then="cancel"``) or, after closing the agent's input, until its output ends
        (``then="close"``). Nothing inside the task group raises: a failure is kept and raised
        after it, so callers see the violation itself, never an exception group.
        """
        if len(line) <= DIRECT_SEND_BYTES and then != "close":
            await self._send(line, "wait")
            return None if awaited is None else await self._read(awaited, end_ok=False)
        answer: tuple[AgentMessage, bytes] | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._send, line, then, group.cancel_scope)
            try:
                answer = await self._read(awaited, end_ok=then == "close")
            except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
                failure = exc
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return answer

    async def _send(self, line: bytes, then: _Then, reading: CancelScope | None = None) -> None:
        """Send one line, then (``then``) keep going, stop the concurrent read, or close."""
        try:
            await self._writer.send_line(line)
            if then == "close":
                await self._writer.aclose()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The agent stopped reading (it exited, most likely). Keep reading: its last
            # words (an `error`, a log) come before the end of its output, which says the rest.
            self._input_closed = True
            return
        if then == "cancel" and reading is not None:
            reading.cancel()

    async def _read(
        self, awaited: _Awaited | None, *, end_ok: bool
    ) -> tuple[AgentMessage, bytes] | None:
        """Read until the awaited answer; pass logs on; anything else is a violation.

        With nothing awaited this reads until cancelled or, when ``end_ok`` (shutdown), until
        the end of the output, where it returns ``None``.
        """
        assert self._reader is not None
        logs = 0
        while True:
            try:
                message, line = await self._reader.receive()
            except anyio.EndOfStream:
                if end_ok:
                    return None
                raise self._closed(awaited) from None
            if isinstance(message, LogMessage):
                logs += 1
                if logs > self._limits.max_log_messages:
                    raise ProtocolViolationError(
                        "log_flood",
                        f"more than {self._limits.max_log_messages} log messages while "
                        f"{_waiting(awaited)}; log less, or raise max_log_messages on the host",
                        line,
                    )
                if self._on_log is not None:
                    self._on_log(message)
                continue
            if isinstance(message, ErrorMessage):
                if message.id is None or (awaited is not None and message.id == awaited.id):
                    raise AgentReportedError(message.message, message.id)
                raise self._wrong_id(message.id, awaited, line)
            if awaited is None:
                raise ProtocolViolationError(
                    "unexpected_message",
                    f"the agent sent {message_type(message)!r} while {_waiting(None)}; only "
                    "`log` and `error` may be sent unasked",
                    line,
                )
            if not isinstance(message, awaited.kind):
                raise ProtocolViolationError(
                    "unexpected_message",
                    f"the agent sent {message_type(message)!r} while {_waiting(awaited)}; answer "
                    f"{awaited.request.split()[0]!r} with {_answer_name(awaited)!r}",
                    line,
                )
            answer_id = getattr(message, "id", None)
            if answer_id != awaited.id:
                raise self._wrong_id(answer_id, awaited, line)
            return message, line

    def _wrong_id(
        self, answer_id: str | None, awaited: _Awaited | None, line: bytes
    ) -> ProtocolViolationError:
        expected = f"; it must repeat {awaited.id!r}" if awaited and awaited.id else ""
        if answer_id is not None and answer_id in self._answered:
            return ProtocolViolationError(
                "duplicate_id",
                f"the agent answered id {answer_id!r} again, but that request was already "
                f"answered{expected}",
                line,
            )
        return ProtocolViolationError(
            "wrong_id",
            f"the agent answered id {answer_id!r} while {_waiting(awaited)}{expected}",
            line,
        )

    def _closed(self, awaited: _Awaited | None) -> ProtocolViolationError:
        stopped = "; it had also stopped reading its input" if self._input_closed else ""
        when = _waiting(awaited) if awaited is not None else "the session was still running"
        return ProtocolViolationError(
            "closed",
            f"the agent's output ended while {when} (the program exited or closed "
            f"stdout{stopped}); its stderr usually says why",
        )


def _waiting(awaited: _Awaited | None) -> str:
    if awaited is None:
        return "no answer was owed"
    return f"the host waited for {_answer_name(awaited)!r} in answer to {awaited.request}"


def _answer_name(awaited: _Awaited) -> str:
    tag: str = awaited.kind.__struct_config__.tag  # type: ignore[assignment]
    return tag
