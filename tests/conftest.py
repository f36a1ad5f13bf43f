"""Shared fixtures. Every async test runs on both backends (anyio's own pytest plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store directory that does not exist yet (opening it creates it)."""
    return tmp_path / "store"
