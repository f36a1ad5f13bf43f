"""Shared fixtures. Every async test runs on both backends (anyio's own pytest plugin)."""

from __future__ import annotations

import threading
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
