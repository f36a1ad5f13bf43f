"""Fixtures for the CLI tests: a runner that always names its store, and a quickstart store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envharness.cli import app
from tests.cli._support import Invoke


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """Run ``envharness ARGS`` in-process; the caller's ENVHARNESS_STORE never leaks in."""
    monkeypatch.delenv("ENVHARNESS_STORE", raising=False)
    runner = CliRunner()

    def run(*args: str | Path) -> Result:
        return runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)

    return run


@pytest.fixture(scope="session")
def quickstart_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One quickstart store for the whole run; tests read it, or copy it to change it."""
    store = tmp_path_factory.mktemp("quickstart") / "store"
    result = CliRunner().invoke(app, ["--store", str(store), "quickstart", "--turns", "4"])
    assert result.exit_code == 0, result.output
    return store


@pytest.fixture
def quickstart_store(quickstart_master: Path, tmp_path: Path) -> Path:
    """A private copy of the quickstart store."""
    return Path(shutil.copytree(quickstart_master, tmp_path / "store"))
