"""The store's database as one object: its helpers reach it through ``Store.backend``, and a
store directory handed to them instead still reaches the same database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from envharness.errors import StoreBusyError, StoreError, StoreLayoutError
from envharness.records import RunnerRef
from envharness.store import open_store, read_store
from envharness.store.backend import SqliteBackend, backend_of
from envharness.store.control import ControlRequests
from envharness.store.snapshots import SnapshotStore
from envharness.store.sources.store import SourceStore
from envharness.store.tokens import TokenStore

pytestmark = pytest.mark.anyio


async def test_every_helper_reaches_the_store_through_its_backend(store_path: Path) -> None:
    async with open_store(store_path) as store:
        assert isinstance(store.backend, SqliteBackend)
        assert store.backend.directory == store.directory
        helpers = (
            TokenStore(store.backend),
            ControlRequests(store.backend),
            SnapshotStore(store.backend),
            SourceStore(store.backend),
        )
        assert all(helper.backend is store.backend for helper in helpers)
        issued = await TokenStore(store.backend).issue("viewer", label="through the backend")
        runner = RunnerRef(host="h", pid=1, started="t")
        asked = await ControlRequests(store.backend).ask("ses_x", "stop", runner, "test")
    # A directory still works while callers outside the store are moved over: same rows.
    reader = await read_store(store_path)
    assert [t.id for t in await TokenStore(reader.directory).tokens()] == [issued.info.id]
    assert await ControlRequests(reader.directory).get(asked.id) == asked
    assert backend_of(reader.directory).directory == store_path


async def test_a_write_is_one_transaction_and_a_read_sees_it(store_path: Path) -> None:
    async with open_store(store_path) as store:
        backend = store.backend

        def insert_then_fail(connection: sqlite3.Connection) -> None:
            connection.execute("INSERT INTO datasets VALUES ('n', 'i', x'00', 't')")
            raise RuntimeError("halfway")

        with pytest.raises(RuntimeError, match="halfway"):
            await backend.write(insert_then_fail)
        count = "SELECT count(*) FROM datasets"
        assert await backend.read(lambda c: c.execute(count).fetchone()[0]) == 0
        await backend.write(
            lambda c: c.execute("INSERT INTO datasets VALUES ('n', 'i', x'00', 't')")
        )
        assert await backend.read(lambda c: c.execute(count).fetchone()[0]) == 1


async def test_a_read_cannot_write(store_path: Path) -> None:
    async with open_store(store_path) as store:
        with pytest.raises(StoreError, match="attempt to write a readonly database"):
            await store.backend.read(lambda c: c.execute("DELETE FROM tokens"))


def test_a_missing_store_is_named_and_not_created(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "nowhere")
    assert not backend.exists()
    assert backend.location == str(tmp_path / "nowhere")
    with pytest.raises(StoreLayoutError, match="no evidence store at"):
        backend.connect(create=False)
    assert not (tmp_path / "nowhere").exists()


def test_sqlite_errors_become_store_errors_naming_the_store(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path)
    busy = backend.translate(sqlite3.OperationalError("database is locked"))
    assert isinstance(busy, StoreBusyError)
    other = backend.translate(sqlite3.OperationalError("no such table: x"))
    assert str(tmp_path) in str(other)
    assert "no such table: x" in str(other)
