"""The blocking-call detector under the suite (``tests/_blocking.py``) sees what it should: a
blocking call on an event loop, on both backends, and not the same call on a worker thread."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests import _blocking

pytestmark = pytest.mark.anyio


@pytest.fixture
def counting_tests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Count this test's own blocking calls (normally only the project's fail a test), and take
    them back before the autouse detector fixture looks."""
    monkeypatch.setattr(_blocking, "COUNT_TESTS", True)
    yield
    _blocking.take()


async def test_a_sleep_on_the_loop_is_seen(counting_tests: None, anyio_backend: str) -> None:
    time.sleep(0.001)  # noqa: ASYNC251 - the blocking call under test
    [found] = _blocking.take()
    assert (found.call, found.library) == ("time.sleep", anyio_backend)
    assert "test_a_sleep_on_the_loop_is_seen" in found.stack


async def test_the_same_calls_on_a_worker_thread_pass(counting_tests: None, tmp_path: Path) -> None:
    def block() -> None:
        time.sleep(0.001)
        sqlite3.connect(tmp_path / "db.sqlite3").close()
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    await anyio.to_thread.run_sync(block)
    assert _blocking.take() == []


async def test_sqlite_and_subprocess_on_the_loop_are_seen_once_each(
    counting_tests: None, tmp_path: Path
) -> None:
    sqlite3.connect(tmp_path / "db.sqlite3").close()
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # noqa: ASYNC221 - on purpose
    assert [found.call for found in _blocking.take()] == ["sqlite3.connect", "subprocess.run"]


async def test_a_blocking_socket_is_seen_and_a_non_blocking_one_is_not(
    counting_tests: None,
) -> None:
    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        left.send(b"x")
        assert _blocking.take() == []
        right.recv(1)
        assert [found.call for found in _blocking.take()] == ["socket.recv"]


def test_outside_an_event_loop_nothing_is_seen(counting_tests: None) -> None:
    time.sleep(0.001)
    assert _blocking.running_loop() is None
    assert _blocking.take() == []


def test_a_tests_own_blocking_call_does_not_count_by_default() -> None:
    async def sleep_on_the_loop() -> None:
        time.sleep(0.001)  # noqa: ASYNC251 - the blocking call under test

    anyio.run(sleep_on_the_loop)
    assert _blocking.take() == []
