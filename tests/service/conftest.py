"""Fixtures for the service tests: a quickstart store and a store with harness versions for the
run, a private copy of either per test; and a store with one long session."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from envharness.cli.quickstart import write_quickstart
from tests.service._harness_store import write_harness_versions
from tests.service._support import World, make_world
from tests.service._trajectory_support import write_signal_session


@pytest.fixture(scope="session")
def quickstart_store_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("service-quickstart") / "store"
    anyio.run(lambda: write_quickstart(store, turns=3))
    return store


@pytest.fixture
def world(quickstart_store_master: Path, tmp_path: Path) -> World:
    """A service over a private copy of the quickstart store, with a token per role."""
    return make_world(Path(shutil.copytree(quickstart_store_master, tmp_path / "store")))


@pytest.fixture(scope="session")
def harness_store_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the real optimizer wrote: harness-v1, then harness-v2 (``_harness_store``)."""
    store = tmp_path_factory.mktemp("service-harnesses") / "store"
    write_harness_versions(store)
    return store


@pytest.fixture
def harness_world(harness_store_master: Path, tmp_path: Path) -> World:
    """A service over a private copy of the harness store, with a token per role."""
    return make_world(Path(shutil.copytree(harness_store_master, tmp_path / "store")))


@pytest.fixture
def long_observed_world(tmp_path: Path) -> tuple[World, str]:
    """A store with one session of 10,000 turns, each observed by alice (20,006 records), and
    the session's id."""
    session = write_signal_session(tmp_path / "store", 10_000, observe=True)
    return make_world(tmp_path / "store"), session
