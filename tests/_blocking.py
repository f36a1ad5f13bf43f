"""A blocking call on an event loop's thread fails the test that made it, as in AnyIO's and
Trio's own suites.

While the suite runs, these calls are wrapped: ``time.sleep`` (for more than 0 s),
``sqlite3.connect``, ``subprocess.run``, ``call``, ``check_call`` and ``check_output``,
``Popen.wait`` and ``Popen.communicate`` on a child that is still running, and ``connect``,
``accept``, ``recv``, ``recv_into``, ``recvfrom``, ``send``, ``sendall`` and ``sendto`` on a
socket in blocking mode (an event loop's own sockets are non-blocking, so they pass). Each wrapper
asks whether its own thread is running an event loop — sniffio (a trio run, an asyncio task) or
asyncio's running loop (a transport's callback, outside any task) — so a worker thread
(``anyio.to_thread``) passes. A call made on a loop is recorded with its stack, and the autouse
fixture in ``tests/conftest.py`` fails the test that made it when the call is the project's:
the nearest caller that is neither the standard library nor an installed package, and the
innermost such coroutine that led to it (if any), are in ``envharness/`` (or ``research/``,
``agents/``, ``examples/``), not in ``tests/``. So a test's own environment or agent may sleep
on purpose (the runtime calls an environment's ordinary methods on the loop), and an async test
may call a blocking function itself (to inspect a store with ``sqlite3``, or to check that
``connect`` refuses to run on a loop); ``ENVHARNESS_BLOCKING_TESTS=1`` counts those too. A
wrapped call that another wrapped call makes (``subprocess.run`` waiting on its ``Popen``) is not
checked again.

The cost is one function call and one look at the thread's state per wrapped call.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import sniffio

ROOT = Path(__file__).resolve().parent.parent
TESTS = str(ROOT / "tests") + os.sep
PROJECT = str(ROOT) + os.sep
OUTSIDE = tuple(
    str(Path(p).resolve()) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}
)
"""Files under these (the virtual environment, the interpreter's library) are not the
project's, even where the virtual environment lies inside the project."""
COUNT_TESTS = os.environ.get("ENVHARNESS_BLOCKING_TESTS") == "1"
ASYNC_CODE = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@dataclass(frozen=True)
class Violation:
    call: str
    library: str
    thread: str
    stack: str

    def __str__(self) -> str:
        return f"{self.call} on {self.library}'s event loop (thread {self.thread!r}):\n{self.stack}"


_found: list[Violation] = []
_found_lock = threading.Lock()
_inside = threading.local()
_restore: list[Callable[[], None]] = []


def running_loop() -> str | None:
    """The async library running an event loop on this thread, or None."""
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        pass
    if asyncio._get_running_loop() is not None:  # a callback outside any task
        return "asyncio"
    return None


def take() -> list[Violation]:
    """The violations recorded since the last call, forgotten once returned."""
    with _found_lock:
        found = list(_found)
        _found.clear()
    return found


def _always(*args: Any, **kwargs: Any) -> bool:
    return True


def _sleeps(seconds: float) -> bool:
    return seconds > 0


def _child_runs(process: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> bool:
    return process.returncode is None and process.poll() is None


def _socket_blocks(sock: socket.socket, *args: Any, **kwargs: Any) -> bool:
    return sock.gettimeout() != 0.0


def _the_projects_call() -> bool:
    """Whether the project, not a test, made the blocking call: both the nearest caller of the
    project's and the innermost coroutine of the project's that led to it (where one did) are
    outside ``tests/``."""
    frame: FrameType | None = sys._getframe(2)
    caller = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(PROJECT) and not filename.startswith(OUTSIDE):
            if COUNT_TESTS:
                return True
            if filename.startswith(TESTS):
                return False
            caller = caller or filename
            if frame.f_code.co_flags & ASYNC_CODE:
                return True
        frame = frame.f_back
    return caller is not None


def _guard(name: str, original: Callable[..., Any], blocks: Callable[..., bool]) -> Any:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "depth", 0):
            return original(*args, **kwargs)
        if blocks(*args, **kwargs):
            library = running_loop()
            if library is not None and _the_projects_call():
                stack = "".join(traceback.format_stack(limit=16)[:-1])
                found = Violation(name, library, threading.current_thread().name, stack)
                with _found_lock:
                    _found.append(found)
        _inside.depth = 1
        try:
            return original(*args, **kwargs)
        finally:
            _inside.depth = 0

    return guarded


def _wrap(owner: Any, attribute: str, name: str, blocks: Callable[..., bool]) -> None:
    had = attribute in vars(owner)
    original = getattr(owner, attribute)
    setattr(owner, attribute, _guard(name, original, blocks))

    def restore() -> None:
        if had:
            setattr(owner, attribute, original)
        else:
            delattr(owner, attribute)

    _restore.append(restore)


def install() -> None:
    """Wrap the blocking calls (once per process; ``uninstall`` undoes it)."""
    if _restore:
        return
    _wrap(time, "sleep", "time.sleep", _sleeps)
    _wrap(sqlite3, "connect", "sqlite3.connect", _always)
    for function in ("run", "call", "check_call", "check_output"):
        _wrap(subprocess, function, f"subprocess.{function}", _always)
    for method in ("wait", "communicate"):
        _wrap(subprocess.Popen, method, f"Popen.{method}", _child_runs)
    for method in (
        "connect",
        "accept",
        "recv",
        "recv_into",
        "recvfrom",
        "send",
        "sendall",
        "sendto",
    ):
        _wrap(socket.socket, method, f"socket.{method}", _socket_blocks)


def uninstall() -> None:
    while _restore:
        _restore.pop()()
