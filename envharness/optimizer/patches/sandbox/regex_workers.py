"""Regex worker processes: how ``LocalSandbox`` gives a match a deadline it can enforce.

``re`` matches in C while holding the GIL and never looks up: a catastrophic pattern on a
26-character text held the whole host for seconds, and nothing in the process can interrupt it.
So the matches the runtime cannot bound (``_hookrt.regex_cost``) go to a worker
(``sys.executable -S -P -B _hookrt.py --regex``: the standard library only, an environment built
from nothing, ``RLIMIT_AS``, ``RLIMIT_NPROC=0``), and the calling thread waits in ``select`` —
without the GIL — until the call's deadline; past it the worker is killed and the call fails as a
timeout. Workers are started on first need, reused, one per concurrent call.

Raw ``posix_spawn`` and ``waitpid``, not ``subprocess``: a ``Popen`` object would warn when a
worker of a forgotten sandbox is collected, and its ``wait`` would count as a blocking call if a
collection happened on an event loop's thread.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from envharness.optimizer.patches.sandbox import _hookrt

__all__ = ["REGEX_MEMORY_BYTES", "REGEX_STARTUP_TIMEOUT_S", "RegexWorkers"]

REGEX_MEMORY_BYTES = 512 * 1024 * 1024
"""Each regex worker's address space."""
REGEX_STARTUP_TIMEOUT_S = 30.0
"""Seconds a new regex worker has to say it is ready (not charged to the hook's deadline)."""
_ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "LC_ALL": "C.UTF-8"}
_READ_CHUNK = 1 << 16


class RegexWorkers:
    """The regex workers of one ``LocalSandbox``; :meth:`run` is its ``_hookrt.RegexRunner``.

    Thread-safe: each call borrows an idle worker or starts one. :meth:`close` kills them all
    (including one a call still waits on); a closed pool starts no more.
    """

    def __init__(
        self, *, memory_bytes: int = REGEX_MEMORY_BYTES, python: str = sys.executable
    ) -> None:
        self._memory = int(memory_bytes)
        self._python = python
        self._lock = threading.Lock()
        self._idle: list[_RegexWorker] = []
        self._all: set[_RegexWorker] = set()
        self._closed = False

    @property
    def pids(self) -> tuple[int, ...]:
        """The running workers' process ids (for diagnosis and tests)."""
        with self._lock:
            return tuple(worker.pid for worker in self._all)

    def run(self, request: Mapping[str, Any], deadline: float) -> Any:
        """Answer ``request`` before ``deadline`` (``time.monotonic``) or raise ``TimeoutError``
        (the worker is killed). A worker that cannot start raises ``HookError("internal")``;
        one that ran out of memory or died raises the patch's ``HookError``."""
        worker = self._borrow()
        try:
            reply = worker.ask(request, deadline)
        except BaseException:
            self._discard(worker)
            raise
        self._give_back(worker)
        if reply.get("ok"):
            return reply.get("value")
        kind = "memory" if reply.get("kind") == "memory" else "exception"
        raise _hookrt.HookError(kind, f"a regex helper failed: {reply.get('message', reply)}")

    def close(self) -> None:
        """Kill every worker and wait for it; bounded (they are killed, not asked)."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.kill()

    def _borrow(self) -> _RegexWorker:
        with self._lock:
            if self._closed:
                raise _hookrt.HookError("internal", "the sandbox was closed")
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                self._all.discard(worker)  # it died idle (killed from outside): not the patch's
                worker.kill()
        worker = _RegexWorker.start(self._python, self._memory)
        with self._lock:
            if not self._closed:
                self._all.add(worker)
                return worker
        worker.kill()
        raise _hookrt.HookError("internal", "the sandbox was closed")

    def _give_back(self, worker: _RegexWorker) -> None:
        with self._lock:
            if worker in self._all:
                self._idle.append(worker)
                return
        worker.kill()

    def _discard(self, worker: _RegexWorker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()


class _RegexWorker:
    """One regex worker process and its two pipes."""

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self._requests = requests
        self._replies = replies
        self._buffer = bytearray()
        self._killed = False
        self._reaped = False

    @classmethod
    def start(cls, python: str, memory_bytes: int) -> _RegexWorker:
        if not hasattr(os, "posix_spawn"):  # pragma: no cover - the test suite runs on POSIX
            raise _hookrt.HookError(
                "internal", "LocalSandbox's regex helpers need POSIX; use SubprocessSandbox"
            )
        child_in, requests = os.pipe()
        replies, child_out = os.pipe()
        argv = [python, "-S", "-P", "-B", _hookrt.__file__, "--regex", str(memory_bytes)]
        actions = [
            (os.POSIX_SPAWN_DUP2, child_in, 0),
            (os.POSIX_SPAWN_DUP2, child_out, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        try:
            pid = os.posix_spawn(python, argv, _ENVIRONMENT, file_actions=actions, setsid=True)
        except OSError as exc:
            for fd in (child_in, requests, replies, child_out):
                os.close(fd)
            raise _hookrt.HookError("internal", f"could not start a regex worker: {exc}") from None
        os.close(child_in)
        os.close(child_out)
        worker = cls(pid, requests, replies)
        try:
            ready = worker._line(time.monotonic() + REGEX_STARTUP_TIMEOUT_S)
            if not json.loads(ready).get("ok"):
                raise ValueError(ready[:200])
        except (TimeoutError, EOFError, ValueError, AttributeError) as exc:
            worker.kill()
            raise _hookrt.HookError(
                "internal", f"a regex worker did not start ({type(exc).__name__}: {exc})"
            ) from None
        return worker

    def ask(self, request: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        message = {**request, "cpu_seconds": math.ceil(left) + 1}
        data = json.dumps(message, ensure_ascii=False).encode() + b"\n"
        try:
            self._write(data, deadline)
            line = self._line(deadline)
        except EOFError:
            raise _hookrt.HookError(
                "crash", "the regex worker died during the match (out of memory or CPU)"
            ) from None
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise _hookrt.HookError("internal", f"the regex worker sent {line[:200]!r}")
        return reply

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                _, writable, _ = select.select([], [self._requests], [], left)
                if writable:
                    view = view[os.write(self._requests, view[:_READ_CHUNK]) :]
            except (OSError, ValueError):  # the worker died, or close() killed it
                raise EOFError from None

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                readable, _, _ = select.select([self._replies], [], [], left)
                chunk = os.read(self._replies, _READ_CHUNK) if readable else None
            except (OSError, ValueError):  # close() killed it while this call waited
                raise EOFError from None
            if chunk is None:
                continue  # the deadline passed: the loop's check raises
            if not chunk:
                raise EOFError
            self._buffer += chunk
        end = self._buffer.index(b"\n")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def alive(self) -> bool:
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            return False
        if pid == 0:
            return True
        self._reaped = True
        return False

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        for fd in (self._requests, self._replies):
            os.close(fd)
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError):  # it had already ended
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reaped elsewhere
            os.waitpid(self.pid, 0)  # immediate: SIGKILL cannot be caught or ignored
