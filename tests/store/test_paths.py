"""Store paths that mean something in a URI (``?``, ``#``, ``%``) are read like any other."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.errors import StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store import read_store
from envharness.store.database import DATABASE_NAME
from envharness.store.reader import database_uri, open_reader

pytestmark = pytest.mark.anyio

AWKWARD_NAMES = ["we?ird#x", "a%41b", "per%cent", "#hash", "q?mode=rwc", "spaced out é"]


@pytest.mark.parametrize("name", AWKWARD_NAMES)
@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
async def test_a_store_at_an_awkward_path_is_written_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, relative: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    store = Path(name) if relative else tmp_path / name
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    session = await harness.run(
        Scenario(id="awkward", input=SyntheticScenarioInput(starting_total=3)), turns=2
    )
    assert session.status == "completed", session.reason

    [info] = await harness.sessions()
    records = [record async for record in harness.records(session.id)]
    report = await harness.verify()

    assert info.id == session.id
    assert [record.seq for record in records] == list(range(info.records))
    assert records[0].kind == "session.created"
    assert (report.ok, report.sessions, report.records) == (True, 1, info.records)
    # The store's own files, and nothing else anywhere: a URI cut short at "?" or "#" (or a
    # "%41" decoded to "A") would have made SQLite create a stray database beside it.
    assert _names(tmp_path) == [name]
    assert DATABASE_NAME in _names(tmp_path / name)


def _names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


async def test_awkward_paths_are_percent_encoded_in_the_uri(tmp_path: Path) -> None:
    uri = database_uri(tmp_path / "we?ird#x%41")
    assert uri.startswith("file:///")
    assert uri.endswith("/we%3Fird%23x%2541/evidence.sqlite3?mode=ro")


async def test_a_missing_database_is_a_store_error_for_every_read(tmp_path: Path) -> None:
    store_path = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    session = await harness.run(
        Scenario(id="gone", input=SyntheticScenarioInput(starting_total=1)), turns=1
    )
    store = await read_store(store_path)
    for path in store_path.glob(f"{DATABASE_NAME}*"):
        os.unlink(path)

    with pytest.raises(StoreError, match="unable to open database file"):
        await store.sessions()
    with pytest.raises(StoreError, match="unable to open database file"):
        await store.verify()
    with pytest.raises(StoreError, match="unable to open database file"):
        await store.blob("00" * 32)
    with pytest.raises(StoreError, match="unable to open database file"):
        _ = [row async for row in store.rows(session.id)]
    with pytest.raises(StoreError, match="unable to open database file"):
        open_reader(store_path)
    assert not (store_path / DATABASE_NAME).exists()
