"""Shared fixtures. Every async test runs on both backends (anyio's own pytest plugin)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store directory that does not exist yet (opening it creates it)."""
    return tmp_path / "store"


@pytest.fixture(autouse=True)
def no_blocking_portal_outlives_its_test() -> Iterator[None]:
    """A blocking portal left open keeps a non-daemon thread alive, and the test process then
    never exits (CI would wait out its whole time limit): name the test that leaked it."""
    before = {thread.ident for thread in threading.enumerate()}
    yield
    leaked = []
    for thread in threading.enumerate():
        if thread.ident in before or "portal" not in thread.name:
            continue
        thread.join(timeout=5)
        if thread.is_alive():
            leaked.append(thread.name)
    assert not leaked, f"blocking portal thread(s) left running: {leaked}; close what opened them"


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


def pytest_unconfigure(config: pytest.Config) -> None:
    """A non-daemon thread still running here would make Python wait for it forever after the
    last test — a worker thread started for an event loop that had already ended, say (one
    such leak, from a read finalised at loop shutdown, is tested in tests/store/test_reader.py).
    Threads that are merely on their way out get a moment; any other fails the run by name,
    and the process ends instead of hanging CI until its time limit."""
    deadline = time.monotonic() + 5
    stray = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stray.append(thread.name)
    if stray and _exit_status:
        print(
            f"\nFAILED: non-daemon threads still running after the tests: {stray}; "
            "find what started them (a worker thread of an event loop that had ended?)",
            file=sys.stderr,
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(_exit_status[0] or 1)
