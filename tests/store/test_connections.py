"""Reused readers: fewer connections opened, never a stale or broken one handed out."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from envharness.store import connections, open_store
from envharness.store.connections import IDLE_READERS, borrowed_reader, read_in_thread
from envharness.store.tokens import TokenStore


def idle() -> list[sqlite3.Connection]:
    return [c for free in connections._idle.values() for c in free]


@pytest.fixture(autouse=True)
def no_idle_readers() -> None:
    connections._close_idle()


async def a_store(path: Path) -> Path:
    async with open_store(path):
        pass
    return path


async def test_a_reader_is_reused_by_the_next_read(tmp_path: Path, anyio_backend: str) -> None:
    store = await a_store(tmp_path / "store")
    first = await read_in_thread(store, lambda c: c)
    second = await read_in_thread(store, lambda c: c)
    assert first is second
    assert idle() == [first]


async def test_a_replaced_database_is_never_read_through_an_old_reader(
    tmp_path: Path, anyio_backend: str
) -> None:
    store = await a_store(tmp_path / "store")
    old = await read_in_thread(store, lambda c: c)
    other = await a_store(tmp_path / "other")
    await TokenStore(other).issue("viewer", label="only in the other store")
    shutil.rmtree(store)
    shutil.copytree(other, store)  # same path, another file
    count = "SELECT count(*) FROM tokens"
    assert await read_in_thread(store, lambda c: c.execute(count).fetchone()[0]) == 1
    assert await read_in_thread(store, lambda c: c) is not old


def test_a_reader_whose_work_failed_is_closed_not_reused(tmp_path: Path) -> None:
    import anyio

    store = anyio.run(a_store, tmp_path / "store")
    with pytest.raises(ZeroDivisionError), borrowed_reader(store) as connection:
        1 / 0  # noqa: B018
    assert idle() == []
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("SELECT 1")


def test_an_open_transaction_is_never_handed_on(tmp_path: Path) -> None:
    import anyio

    store = anyio.run(a_store, tmp_path / "store")
    with borrowed_reader(store) as connection:
        connection.execute("BEGIN")
        connection.execute("SELECT count(*) FROM records").fetchone()
    assert idle() == []


def test_idle_readers_are_bounded_across_stores(tmp_path: Path) -> None:
    import anyio

    stores = [anyio.run(a_store, tmp_path / f"store-{i}") for i in range(IDLE_READERS + 3)]
    for store in stores:
        with borrowed_reader(store):
            pass
    assert len(idle()) == IDLE_READERS
    assert all(key[0] in stores[3:] for key in connections._idle), "the oldest went first"


def open_files_under(directory: Path) -> list[str]:
    """What this process holds open under ``directory`` (a deleted file too)."""
    found = []
    for descriptor in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_a_closed_store_keeps_no_reader_open(tmp_path: Path) -> None:
    import anyio

    store = tmp_path / "store"

    async def read_while_open() -> None:
        async with open_store(store) as opened:
            await opened.sessions()  # a pooled reader

    anyio.run(read_while_open)
    assert open_files_under(store) == []
    shutil.rmtree(store)  # its disk space is freed: no descriptor holds the files


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_readers_of_a_deleted_store_or_idle_too_long_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    deleted, idle_one, used = (anyio.run(a_store, tmp_path / name) for name in "abc")
    for store in (deleted, idle_one):
        with borrowed_reader(store):
            pass
    shutil.rmtree(deleted)
    assert open_files_under(deleted)  # kept by the pool, though the store is gone
    monkeypatch.setattr(connections, "_PRUNE_EVERY_S", 0.0)
    monkeypatch.setattr(connections, "IDLE_SECONDS", 0.0)
    with borrowed_reader(used):  # the next use of the pool looks at what it keeps
        pass
    assert open_files_under(deleted) == []
    assert open_files_under(idle_one) == []
    assert len(idle()) == 1
