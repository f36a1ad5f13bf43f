"""``SubprocessSandbox``: hook code in long-lived worker processes under kernel limits.

Each worker is ``sys.executable -S -P -B _hookrt.py`` — the standard library only, no site
packages, in its own session (process group), with an environment built from nothing (never the
parent's: no credentials), ``cwd=/``, and, set by the worker before it reads any hook code,
``RLIMIT_AS`` (memory bombs fail with ``MemoryError``), ``RLIMIT_CPU`` (re-armed per request:
CPU spent in C code — a catastrophic regex, ``sorted`` of a huge list — ends in ``SIGXCPU``),
``RLIMIT_FSIZE=0``, ``RLIMIT_CORE=0`` and ``RLIMIT_NPROC=0``. The host waits ``timeout_s +
kill_grace_s`` for each answer; past it the worker's process group is killed and a fresh worker
is started on the next call. A worker stays alive across calls (a fresh interpreter per call
would cost tens to hundreds of milliseconds) and compiles each patch once (keyed by digest).

Blame: whatever happens once a call was handed to a worker — an exception, a budget, a kill, the
worker dying — is the patch's (``PatchFailure``): a patch must not be able to turn its negative
reward into "no result" by crashing its sandbox. Only what the patch cannot have caused — a
worker that does not start, the sandbox not being open, a garbled reply — is a
``SandboxInfrastructureError``.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.errors import ConfigurationError
from envharness.optimizer.patches.errors import (
    FailureKind,
    PatchFailure,
    SandboxInfrastructureError,
)
from envharness.optimizer.patches.sandbox import _hookrt
from envharness.optimizer.patches.sandbox.contract import (
    HookCall,
    HookOutcome,
    SandboxBase,
    SandboxLimits,
    failure,
)
from envharness.protocol.process import chunks, signal_group

__all__ = [
    "KILL_GRACE_S",
    "MAX_REPLY_BYTES",
    "SANDBOX_ENV",
    "STARTUP_TIMEOUT_S",
    "SubprocessSandbox",
]

WORKER_SCRIPT = Path(_hookrt.__file__)
SANDBOX_ENV: Mapping[str, str] = {
    "PYTHONHASHSEED": "0",  # set iteration order is the same in every rerun
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "LC_ALL": "C.UTF-8",
}
"""The worker's whole environment: nothing is inherited from the parent."""
STARTUP_TIMEOUT_S = 30.0
"""Seconds a new worker has to say it is ready."""
KILL_GRACE_S = 1.0
"""Seconds past a call's timeout before the host kills the worker (it normally answers first)."""
MAX_REPLY_BYTES = 4 * 1024 * 1024
"""The longest reply line the host reads; longer is the patch's failure (``result``)."""
_STDERR_TAIL = 4096
_MIB = 1024 * 1024


class SubprocessSandbox(SandboxBase):
    """Hook calls in ``workers`` worker processes; open it with ``async with``.

    ``memory_bytes`` bounds each worker's address space, ``cpu_seconds`` the CPU one request may
    use (whole seconds, the kernel's resolution). Calls are spread over the workers; each worker
    runs one call at a time.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        memory_bytes: int = 512 * _MIB,
        cpu_seconds: int = 2,
        workers: int = 1,
        kill_grace_s: float = KILL_GRACE_S,
        python: str = sys.executable,
    ) -> None:
        if os.name != "posix":  # pragma: no cover - the test suite runs on POSIX
            raise ConfigurationError(
                "SubprocessSandbox needs POSIX resource limits; use LocalSandbox on this system"
            )
        if workers < 1:
            raise ConfigurationError(f"SubprocessSandbox needs at least 1 worker, not {workers}")
        if cpu_seconds < 1 or memory_bytes < 64 * _MIB:
            raise ConfigurationError(
                "SubprocessSandbox needs cpu_seconds >= 1 and memory_bytes >= 64 MiB "
                f"(got {cpu_seconds} and {memory_bytes})"
            )
        super().__init__(limits)
        self._memory = int(memory_bytes)
        self._cpu = int(cpu_seconds)
        self._count = workers
        self._grace = kill_grace_s
        self._python = python
        self._stack: AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._workers: list[_Worker] = []
        self._idle_send: MemoryObjectSendStream[_Worker] | None = None
        self._idle_receive: MemoryObjectReceiveStream[_Worker] | None = None

    @property
    def name(self) -> str:
        return "subprocess"

    @property
    def pids(self) -> tuple[int, ...]:
        """The running workers' process ids (for diagnosis)."""
        return tuple(w.process.pid for w in self._workers if w.process is not None)

    async def __aenter__(self) -> SubprocessSandbox:
        if self._stack is not None:
            raise ConfigurationError("this SubprocessSandbox is already open")
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        send, receive = anyio.create_memory_object_stream[_Worker](self._count)
        self._idle_send, self._idle_receive = send, receive
        stack.callback(send.close)
        stack.callback(receive.close)
        try:
            self._workers = [_Worker(self) for _ in range(self._count)]
            for worker in self._workers:
                await worker.start()
                send.send_nowait(worker)
        except BaseException:
            await self._close(None)  # the drains end with their workers
            raise
        return self

    async def _close(self, exc: BaseException | None) -> None:
        stack, self._stack = self._stack, None
        with anyio.CancelScope(shield=True):
            for worker in self._workers:
                await worker.kill()
        self._workers = []
        self._idle_send = self._idle_receive = None
        self._group = None
        if stack is not None:
            await stack.__aexit__(
                None if exc is None else type(exc), exc, None if exc is None else exc.__traceback__
            )

    async def _call(self, call: HookCall) -> HookOutcome:
        hook = call.hook
        idle = self._idle_receive
        if idle is None or self._idle_send is None:
            raise SandboxInfrastructureError(
                "the SubprocessSandbox is not open; use `async with SubprocessSandbox() as s:`",
                hook=hook,
            )
        try:
            worker = await idle.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise SandboxInfrastructureError(
                "the SubprocessSandbox was closed", hook=hook
            ) from None
        try:
            return await worker.call(call)
        finally:
            send = self._idle_send
            if send is not None:
                send.send_nowait(worker)


class _Worker:
    """One worker process; restarted on the next call after it was killed or died."""

    def __init__(self, owner: SubprocessSandbox) -> None:
        self.owner = owner
        self.process: anyio.abc.Process | None = None
        self._replies: BufferedByteReceiveStream | None = None
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-_STDERR_TAIL:]

    async def start(self) -> None:
        owner = self.owner
        group = owner._group
        if group is None:
            raise SandboxInfrastructureError("the SubprocessSandbox is not open")
        script = str(WORKER_SCRIPT)
        argv = [owner._python, "-S", "-P", "-B", script, str(owner._memory), str(owner._cpu)]
        try:
            process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(SANDBOX_ENV),
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxInfrastructureError(f"could not start a sandbox worker: {exc}") from exc
        assert process.stdout is not None
        assert process.stderr is not None
        self.process = process
        self._replies = BufferedByteReceiveStream(process.stdout)
        self._stderr.clear()
        self._stderr_size = 0
        group.start_soon(self._drain, process.stderr)
        try:
            with anyio.fail_after(STARTUP_TIMEOUT_S):
                line = await self._replies.receive_until(b"\n", MAX_REPLY_BYTES)
            ready = json.loads(line)
            if not isinstance(ready, dict) or not ready.get("ok"):
                raise ValueError(f"unexpected greeting {line[:200]!r}")
        except (TimeoutError, ValueError, anyio.EndOfStream, anyio.IncompleteRead,
                anyio.DelimiterNotFound, anyio.BrokenResourceError) as exc:  # fmt: skip
            await self.kill()
            raise SandboxInfrastructureError(
                f"a sandbox worker did not start ({type(exc).__name__}: {exc}); "
                f"its stderr: {self.stderr_tail or '(empty)'}"
            ) from None

    async def call(self, call: HookCall) -> HookOutcome:
        program, hook = call.program, call.hook
        if self.process is None or self.process.returncode is not None:
            await self.kill()
            await self.start()
        limits = self.owner.limits
        request = {
            "op": "call",
            "id": program.digest,
            "hook": hook,
            "ctx": call.ctx,
            "nb": call.notebook,
            "limits": limits.runtime().to_json(),
        }
        started = time.perf_counter()
        reply = await self._exchange(request, hook)
        error = reply.get("error") or {}
        if not reply.get("ok") and error.get("kind") == "not_loaded":
            load = {"op": "load", "id": program.digest, "hooks": [list(h) for h in program.hooks]}
            loaded = await self._exchange(load, hook)
            if not loaded.get("ok"):
                await self._raise(hook, loaded)
            reply = await self._exchange(request, hook)
        if not reply.get("ok"):
            await self._raise(hook, reply)
        seconds = time.perf_counter() - started
        effect, result, lines = reply.get("effect"), reply.get("nb"), reply.get("lines", 0)
        if (effect is not None and not isinstance(effect, dict)) or not isinstance(result, dict):
            await self.kill()
            raise SandboxInfrastructureError(f"the worker sent a malformed reply: {reply!r:.200}")
        return HookOutcome(effect, result, int(lines), seconds)

    async def _raise(self, hook: str, reply: Mapping[str, Any]) -> NoReturn:
        error = reply.get("error") or {}
        kind, message = str(error.get("kind", "internal")), str(error.get("message", reply))
        if kind not in ("exception", "lines", "timeout", "result", "notebook", "recursion"):
            # Out of memory, or a reply the host did not expect: start the next call afresh
            # (killed and reaped now, so its end is never blamed on the next patch).
            await self.kill()
        raise failure(hook, kind, message)

    async def _exchange(self, request: Mapping[str, Any], hook: str) -> dict[str, Any]:
        process, replies = self.process, self._replies
        assert process is not None
        assert process.stdin is not None
        assert replies is not None
        try:
            data = json.dumps(request, ensure_ascii=False, allow_nan=False).encode() + b"\n"
        except (TypeError, ValueError) as exc:
            raise SandboxInfrastructureError(
                f"the call's context is not JSON ({exc})", hook=hook
            ) from None
        limits = self.owner.limits
        done = False
        try:
            try:
                await process.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise SandboxInfrastructureError(
                    f"the worker could not be sent the call ({type(exc).__name__})", hook=hook
                ) from None
            with anyio.move_on_after(limits.timeout_s + self.owner._grace):
                line = await replies.receive_until(b"\n", MAX_REPLY_BYTES)
                done = True
        except anyio.DelimiterNotFound:
            raise PatchFailure(
                hook,
                f"returned more than {MAX_REPLY_BYTES} bytes; the worker was killed",
                kind="result",
            ) from None
        except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError,
                anyio.ClosedResourceError):  # fmt: skip
            raise await self._died(hook) from None
        finally:
            if not done:  # timed out, failed or cancelled: the streams are out of step
                await self.kill()
        if not done:
            raise PatchFailure(
                hook,
                f"ran past its {limits.timeout_s:g}s wall-clock timeout inside one operation "
                "(C code: a regex, a huge sort); its sandbox worker was killed",
                kind="timeout",
            )
        try:
            reply = json.loads(line)
        except ValueError:
            await self.kill()
            raise SandboxInfrastructureError(
                f"the worker sent a line that is not JSON: {line[:200]!r}", hook=hook
            ) from None
        if not isinstance(reply, dict):
            await self.kill()
            raise SandboxInfrastructureError(f"the worker sent {reply!r:.200}", hook=hook)
        return reply

    async def _died(self, hook: str) -> PatchFailure:
        """The worker ended during a call: the patch's doing (CPU limit, memory, a crash)."""
        process = self.process
        code = None
        if process is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                code = await process.wait()
        await self.kill()
        limit_signal = getattr(signal, "SIGXCPU", None)
        if code is not None and limit_signal is not None and code == -limit_signal:
            return PatchFailure(
                hook,
                f"used more than its {self.owner._cpu}s CPU limit (the worker got SIGXCPU and "
                "was restarted)",
                kind="cpu",
            )
        tail = self.stderr_tail.strip()
        kind: FailureKind = "memory" if "memory" in tail.lower() else "crash"
        return PatchFailure(
            hook,
            f"its sandbox worker died during the call (exit status {code}); the worker was "
            f"restarted{'; its stderr: ' + tail[-500:] if tail else ''}",
            kind=kind,
        )

    async def kill(self) -> None:
        """Kill the worker's whole process group and reap it; bounded and shielded."""
        process, self.process, self._replies = self.process, None, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            signal_group(process, signal.SIGKILL)
            with anyio.move_on_after(5):
                await process.wait()
            with anyio.move_on_after(5):
                await process.aclose()

    async def _drain(self, stderr: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in chunks(stderr):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= _STDERR_TAIL:
                self._stderr_size -= len(self._stderr.popleft())
