"""Opening a store: layout checks, migrations, refusing newer stores, append-only records."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness.errors import StoreBusyError, StoreError, StoreLayoutError, StoreVersionError
from envharness.store import SCHEMA_VERSION, open_store, read_store
from envharness.store.database import DATABASE_NAME, connect

from ._support import count_rows, fill, plain, session_rows, small_disk


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in ``directory`` with its bytes and mtime."""
    return {
        path.name: (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(directory.iterdir())
    }


def make_newer_store(store: Path, journal_mode: str) -> None:
    store.mkdir()
    with plain(store) as connection:
        connection.execute(f"PRAGMA journal_mode={journal_mode}")
        connection.execute("CREATE TABLE from_the_future (x)")
        connection.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")


@pytest.mark.anyio
async def test_a_fresh_store_is_created_and_migrated(store_path: Path) -> None:
    async with open_store(store_path):
        pass
    assert (store_path / DATABASE_NAME).is_file()
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"records", "sessions", "blobs"} <= tables
    assert {"records_are_append_only_update", "records_are_append_only_delete"} <= tables


def test_connect_uses_wal_and_full_durability(store_path: Path) -> None:
    connection = connect(store_path, create=True)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert connection.isolation_level is None
    finally:
        connection.close()


@pytest.mark.anyio
async def test_reopening_keeps_the_evidence_and_the_version(store_path: Path) -> None:
    rows = session_rows(3)
    async with open_store(store_path) as store:
        await store.append(rows)
    async with open_store(store_path, create=False) as store:
        assert (await store.session(rows[0].session_id)).records == 3
    assert count_rows(store_path) == 3
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_empty_database_file_is_migrated(store_path: Path) -> None:
    store_path.mkdir()
    (store_path / DATABASE_NAME).touch()
    connect(store_path, create=False).close()
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
@pytest.mark.anyio
async def test_a_newer_store_is_refused_and_left_untouched(
    store_path: Path, journal_mode: str
) -> None:
    make_newer_store(store_path, journal_mode)
    before = snapshot(store_path)
    with pytest.raises(StoreVersionError, match="upgrade envharness") as caught:
        async with open_store(store_path):
            pytest.fail("a newer store was opened")
    message = str(caught.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert str(store_path) in message
    assert snapshot(store_path) == before


def test_a_newer_store_is_refused_by_connect_too(store_path: Path) -> None:
    make_newer_store(store_path, "wal")
    before = snapshot(store_path)
    with pytest.raises(StoreVersionError, match="upgrade"):
        connect(store_path, create=False)
    assert snapshot(store_path) == before


@pytest.mark.anyio
async def test_a_store_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-directory"
    path.write_bytes(b"hello")
    with pytest.raises(StoreLayoutError, match="is a file; a store is a directory"):
        async with open_store(path):
            pytest.fail("a file was opened as a store")
    assert path.read_bytes() == b"hello"


@pytest.mark.anyio
async def test_create_false_on_a_missing_directory_creates_nothing(store_path: Path) -> None:
    with pytest.raises(StoreLayoutError, match="no evidence store"):
        async with open_store(store_path, create=False):
            pytest.fail("a missing store was opened")
    assert not await anyio.Path(store_path).exists()


def test_create_false_on_an_empty_directory_creates_nothing(store_path: Path) -> None:
    store_path.mkdir()
    with pytest.raises(StoreLayoutError, match="no evidence store"):
        connect(store_path, create=False)
    assert list(store_path.iterdir()) == []


def test_a_database_file_that_is_not_sqlite_is_a_layout_error(store_path: Path) -> None:
    store_path.mkdir()
    garbage = b"this is not an SQLite database " * 200
    (store_path / DATABASE_NAME).write_bytes(garbage)
    with pytest.raises(StoreLayoutError, match="not an envharness store"):
        connect(store_path, create=True)
    assert (store_path / DATABASE_NAME).read_bytes() == garbage


def test_migrating_while_another_process_holds_the_lock_is_a_busy_error(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("envharness.store.database.BUSY_TIMEOUT_S", 0.1)
    store_path.mkdir()
    with plain(store_path) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("CREATE TABLE unrelated (x)")
        with pytest.raises(StoreBusyError, match="locked by another process"):
            connect(store_path, create=True)
        other.execute("ROLLBACK")
    connect(store_path, create=True).close()


def test_connections_racing_to_create_one_store_all_succeed(tmp_path: Path) -> None:
    # SQLite answers a race to switch a new database to WAL with an immediate SQLITE_BUSY
    # (no busy handler); connect() must wait that out like any other lock.
    failures: list[StoreError] = []
    for attempt in range(20):
        store = tmp_path / f"store-{attempt}"
        barrier = threading.Barrier(4)

        def open_it(store: Path = store, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                connect(store, create=True).close()
            except StoreError as exc:
                failures.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


@pytest.mark.anyio
async def test_records_are_append_only(store_path: Path) -> None:
    rows = session_rows(3)
    async with open_store(store_path) as store:
        await store.append(rows)
    with plain(store_path) as connection:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute("UPDATE records SET payload = x'00' WHERE seq = 1")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute("DELETE FROM records WHERE seq = 2")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute("DELETE FROM records")
        stored = connection.execute("SELECT digest FROM records ORDER BY seq").fetchall()
    assert [row[0] for row in stored] == [row.digest for row in rows]


def test_closing_the_last_connection_leaves_only_the_database(store_path: Path) -> None:
    connect(store_path, create=True).close()
    leftovers = sorted(os.listdir(store_path))
    assert leftovers == [DATABASE_NAME], "WAL files should be gone once the last connection closes"


# -- a store this user may not write -----------------------------------------------------------


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A directory this user cannot write to (the test is skipped where that cannot be)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("running as root: root writes anywhere, so permissions cannot block it")
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        if os.access(directory, os.W_OK):
            pytest.skip("chmod 0o555 does not stop this user writing here")
        yield directory
    finally:
        directory.chmod(0o755)


def test_an_unwritable_store_directory_says_so(unwritable: Path) -> None:
    async def open_it() -> None:
        async with open_store(unwritable):
            pass

    with pytest.raises(StoreLayoutError, match="the directory is not writable") as raised:
        anyio.run(open_it)
    assert "--store" in str(raised.value)
    assert "chmod" in str(raised.value)
    assert list(unwritable.iterdir()) == []


def test_an_existing_store_in_an_unwritable_directory_says_so(
    store_path: Path, unwritable: Path
) -> None:
    async def write() -> None:
        async with open_store(store_path) as store:
            await store.append(session_rows(3))

    async def reopen(path: Path) -> None:
        async with open_store(path, create=False):
            pass

    anyio.run(write)
    # A closed store is only its database: SQLite must create -wal and -shm to open it again.
    store = unwritable / "store"
    unwritable.chmod(0o755)
    store_path.rename(store)
    store.chmod(0o555)
    try:
        with pytest.raises(StoreLayoutError, match="the directory is not writable"):
            anyio.run(reopen, store)
        with pytest.raises(StoreLayoutError, match="the directory is not writable"):
            anyio.run(read_store, store)
    finally:
        store.chmod(0o755)
        unwritable.chmod(0o555)


def test_a_permission_problem_is_named_in_the_open_error(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs as root too: ``os.access`` decides the message, whatever made the open fail."""
    store_path.mkdir()
    (store_path / DATABASE_NAME).mkdir()  # a database SQLite cannot open, even as root
    with pytest.raises(StoreLayoutError, match="unable to open database file") as plain_error:
        connect(store_path, create=True)
    assert "not writable" not in str(plain_error.value)

    real_access = os.access

    def access(path: str | Path, mode: int, **options: Any) -> bool:
        return Path(path) != store_path and real_access(path, mode, **options)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(StoreLayoutError, match="the directory is not writable") as raised:
        connect(store_path, create=True)
    message = str(raised.value)
    assert message.startswith(f"cannot open the store at {str(store_path)!r}: ")
    assert "give this user write permission on it" in message
    assert "or pass another --store" in message


@pytest.mark.anyio
async def test_opening_refuses_to_block_an_event_loop(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envharness.store import database

    def must_not_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("the database was opened before the refusal")

    monkeypatch.setattr(database.sqlite3, "connect", must_not_open)
    with pytest.raises(RuntimeError, match=r"call it through anyio\.to_thread"):
        database.connect(store_path, create=True)


# -- a new store is private; a store that could not be made leaves nothing ----------------------


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Umask 0: what is created without an explicit mode is readable by everyone."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.anyio
@pytest.mark.usefixtures("open_umask")
async def test_a_new_store_is_its_owners_alone_whatever_the_umask(tmp_path: Path) -> None:
    store = tmp_path / "made" / "store"
    async with open_store(store) as opened:
        await opened.append(session_rows(3))
        await opened.put_artifact(b"an artifact")
        with plain(store) as pin:  # while a reader is open, -wal and -shm are there
            pin.execute("SELECT count(*) FROM records").fetchall()
            made = {
                path.relative_to(store).as_posix(): mode(path)
                for path in store.rglob("*")
                if not path.name.startswith(".")
            }
    assert mode(store) == 0o700
    names = [DATABASE_NAME, *(DATABASE_NAME + end for end in ("-wal", "-shm", "-acked"))]
    assert {name: made[name] for name in names} == dict.fromkeys(names, 0o600)
    folders = {name for name in made if (store / name).is_dir()}
    assert folders
    assert {made[name] for name in folders} == {0o700}  # artifacts/ and its shards
    assert {
        made[name] for name in made if name.startswith("artifacts/") and name not in folders
    } == {0o600}


@pytest.mark.anyio
@pytest.mark.usefixtures("open_umask")
async def test_an_existing_folder_keeps_its_mode(tmp_path: Path) -> None:
    """The user made the folder: its mode is theirs. What the store makes in it is private."""
    store = tmp_path / "mine"
    store.mkdir(mode=0o755)
    async with open_store(store):
        pass
    assert mode(store) == 0o755
    assert mode(store / DATABASE_NAME) == 0o600


@pytest.mark.anyio
async def test_a_store_that_cannot_be_created_leaves_nothing_behind(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        fill(disk)
        with pytest.raises(StoreError) as raised:
            async with open_store(disk / "parent" / "store"):
                pass
        assert "cannot create the store" in str(raised.value)
        assert "disk is full" in str(raised.value)
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]
