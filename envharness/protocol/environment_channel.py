"""The host's side of one conversation with an environment program.

:class:`EnvironmentChannel` turns the program's stdout and stdin into calls: ``handshake``
(``hello`` → ``ready``), ``call`` (a request → its ``result``) and ``shutdown``. It holds every
answer to the same rules as :class:`~envharness.protocol.channel.AgentChannel` holds an agent's,
with the same violation codes: the right type, the right id, no id answered twice, a version
that was offered, a bounded number of logs per answer; lines are read by the agent protocol's
:class:`~envharness.protocol.framing.LineReader`, so the same ``max_line_bytes`` bounds memory.

As there, a large request (environment requests carry the state) is written while the output
is read, so a program busy logging to a full pipe cannot deadlock the host; callers own time
(wrap calls in ``anyio.fail_after`` with the :class:`ProgramLimits` values); and a call that
fails or is cancelled leaves the channel broken, after which only ``shutdown`` is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import ByteReceiveStream, ByteSendStream

from envharness.protocol._calls import CallDiscipline
from envharness.protocol.channel import DIRECT_SEND_BYTES
from envharness.protocol.environment_messages import (
    EnvironmentReportedError,
    HostRequest,
    ProgramError,
    ProgramHello,
    ProgramLimits,
    ProgramLog,
    ProgramMessage,
    ProgramReady,
    ProgramShutdown,
    Result,
    decode_program_message,
)
from envharness.protocol.errors import ChannelUsageError, ProtocolViolationError
from envharness.protocol.framing import DEFAULT_CHUNK_SIZE, LineReader

__all__ = ["EnvironmentChannel", "ProgramLogCallback"]

ProgramLogCallback = Callable[[ProgramLog], None]

_encoder = msgspec.json.Encoder()


def _tag(message: msgspec.Struct) -> str:
    tag: str = message.__struct_config__.tag  # type: ignore[assignment]
    return tag


class EnvironmentChannel:
    """Request/response discipline over a program's output (``receive``) and input (``send``).

    The streams stay the caller's: the channel closes ``send`` only in :meth:`shutdown`. Calls
    must not overlap (the caller serialises them).
    """

    def __init__(
        self,
        receive: ByteReceiveStream,
        send: ByteSendStream,
        *,
        limits: ProgramLimits,
        on_log: ProgramLogCallback | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        self._send_stream = send
        self._lines = LineReader(
            receive, max_line_bytes=limits.max_line_bytes, chunk_size=chunk_size
        )
        self._limits = limits
        self._on_log = on_log
        self._buffer = bytearray(256)
        self._calls = CallDiscipline(
            EnvironmentReportedError,
            "the environment program reported an error",
            survives=_answered,
        )
        self._input_closed = False
        self._next_id = 0
        self._answered: set[str] = set()
        self.ready: ProgramReady | None = None
        """The program's ``ready``, once the handshake succeeded."""

    @property
    def broken(self) -> str | None:
        """Why the channel can no longer be used, or ``None`` while it can."""
        return self._calls.broken

    def new_id(self) -> str:
        """A request id no earlier request of this channel used."""
        self._next_id += 1
        return str(self._next_id)

    async def handshake(self, hello: ProgramHello) -> ProgramReady:
        """Send ``hello`` and wait for ``ready`` naming one of the offered versions."""
        with self._calls.call("handshake", "new"):
            message, line = await self._exchange(self._encode(hello), "ready", None, "hello")
            assert isinstance(message, ProgramReady)
            if message.protocol not in hello.protocols:
                raise ProtocolViolationError(
                    "version_mismatch",
                    f"the environment program chose protocol version {message.protocol}, but "
                    f"the host offered {list(hello.protocols)}; choose one of them, or answer "
                    "`error` when none is supported",
                    line,
                )
            self.ready = message
            self._calls.phase = "open"
        return message

    async def call(self, request: HostRequest) -> tuple[Any, bytes]:
        """Send ``request``; its result's ``value`` and the line it came in."""
        request_id = request.id
        with self._calls.call(_tag(request), "open"):
            if request_id in self._answered:
                raise ChannelUsageError(f"request id {request_id!r} was used before")
            what = f"{_tag(request)} {request_id!r}"
            message, line = await self._exchange(self._encode(request), "result", request_id, what)
            assert isinstance(message, Result)
            self._answered.add(request_id)
        return message.value, line

    async def shutdown(self, reason: str = "") -> None:
        """Send ``shutdown``, close the program's input, and read its output to the end (its
        last logs). Bounded only by the program: call it under ``anyio.move_on_after``."""
        with self._calls.closing() as healthy:
            if healthy is None:
                return
            line = self._encode(ProgramShutdown(reason=reason))
            if not self._input_closed:
                await self._send(line, close=True)
            if healthy:
                await self._read(None, None, "shutdown")

    # -- the discipline ------------------------------------------------------------------------

    def _encode(self, message: msgspec.Struct) -> bytes:
        """The line for ``message``; ``TypeError``/``EncodeError`` for a value with no JSON."""
        _encoder.encode_into(message, self._buffer)
        self._buffer.extend(b"\n")
        return bytes(self._buffer)

    async def _exchange(
        self, line: bytes, answer: str, answer_id: str | None, request: str
    ) -> tuple[ProgramMessage, bytes]:
        """Send ``line`` and read the answer; a large line is sent while reading.

        A program reads every request before it answers it, so a small line (at most
        :data:`DIRECT_SEND_BYTES`) fits in the pipe and is written directly; a large one could
        block while the program writes logs nobody reads, so it goes from a task.
        """
        if len(line) <= DIRECT_SEND_BYTES:
            await self._send(line)
            return await self._answer(answer, answer_id, request)
        found: tuple[ProgramMessage, bytes] | None = None
        failure: Exception | None = None
        sent = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._send, line, False, sent)
            try:
                found = await self._answer(answer, answer_id, request)
            except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
                failure = exc
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if not sent.is_set():
            # Answered before reading all of it: the rest of the line would be read as the
            # next request. This answer stands; nothing more can be asked.
            self._calls.broken = f"the program answered {request} before reading all of it"
        assert found is not None
        return found

    async def _send(
        self, line: bytes, close: bool = False, sent: anyio.Event | None = None
    ) -> None:
        try:
            await self._send_stream.send(line)
            if close:
                await self._send_stream.aclose()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The program stopped reading (it exited, most likely); its output says the rest.
            self._input_closed = True
        if sent is not None:
            sent.set()

    async def _answer(
        self, answer: str, answer_id: str | None, request: str
    ) -> tuple[ProgramMessage, bytes]:
        found = await self._read(answer, answer_id, request)
        if found is None:
            raise self._ended(answer, request)
        return found

    async def _read(
        self, answer: str | None, answer_id: str | None, request: str
    ) -> tuple[ProgramMessage, bytes] | None:
        """Read until the awaited answer, passing logs on; anything else is a violation.

        ``None`` at the end of the output (which, with nothing awaited, is the goal)."""
        logs = 0
        while True:
            try:
                line = await self._lines.receive_line()
            except anyio.EndOfStream:
                return None
            if not line.strip():
                continue
            message = decode_program_message(line)
            if isinstance(message, ProgramLog):
                logs += 1
                if logs > self._limits.max_log_messages:
                    raise ProtocolViolationError(
                        "log_flood",
                        f"more than {self._limits.max_log_messages} log messages while the host "
                        f"waited for an answer to {request}; log less, or raise "
                        "max_log_messages on the host",
                        line,
                    )
                if self._on_log is not None:
                    self._on_log(message)
                continue
            if isinstance(message, ProgramError):
                if message.id is not None and message.id == answer_id:
                    self._answered.add(message.id)  # answered: the channel stays in step
                    raise EnvironmentReportedError(message.message, request, answered=True)
                if message.id is None:
                    raise EnvironmentReportedError(message.message, request)
                raise self._wrong_id(message.id, answer_id, request, line)
            kind = _tag(message)
            if answer is None or kind != answer:
                wanted = f"; answer {request.split()[0]!r} with {answer!r}" if answer else ""
                raise ProtocolViolationError(
                    "unexpected_message",
                    f"the environment program sent {kind!r} while the host waited for "
                    f"{answer or 'the end of its output'} (after {request}){wanted}",
                    line,
                )
            if isinstance(message, Result) and message.id != answer_id:
                raise self._wrong_id(message.id, answer_id, request, line)
            return message, line

    def _wrong_id(
        self, found: str, expected: str | None, request: str, line: bytes
    ) -> ProtocolViolationError:
        repeat = f"; it must repeat {expected!r}" if expected is not None else ""
        if found in self._answered:
            return ProtocolViolationError(
                "duplicate_id",
                f"the environment program answered id {found!r} again while the host waited "
                f"for an answer to {request}{repeat}",
                line,
            )
        return ProtocolViolationError(
            "wrong_id",
            f"the environment program answered id {found!r} while the host waited for an "
            f"answer to {request}{repeat}",
            line,
        )

    def _ended(self, answer: str | None, request: str) -> ProtocolViolationError:
        stopped = "; it had also stopped reading its input" if self._input_closed else ""
        return ProtocolViolationError(
            "closed",
            f"the environment program's output ended while the host waited for "
            f"{answer!r} in answer to {request} (the program exited or closed stdout{stopped}); "
            "its stderr usually says why",
        )


def _answered(exc: BaseException) -> bool:
    """An ``error`` that answered its request keeps the channel in step; one without an id
    means the program gave up, and nothing more will be answered."""
    return isinstance(exc, EnvironmentReportedError) and exc.answered
