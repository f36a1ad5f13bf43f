"""Short reads and small side writes, each in a worker thread, in one place.

Opening a SQLite connection costs far more than a small query (~0.6 ms against ~3 µs): a
service request that read a token, a session and a page opened three. Read-only connections are
therefore kept for reuse — a few per store, a few in all — and handed to one thread at a time.
An idle reader holds no transaction, so it pins no WAL snapshot and blocks no writer; it is kept
under its database file's identity (device, inode, change time), so a store removed and made
again at the same path is never read through an old reader. A reader idle for
:data:`IDLE_SECONDS`, or kept for a database file that is gone or replaced, is closed the next
time the pool is used, and a store's idle readers are closed when ``open_store`` closes it: a
deleted store's files are not held open. Writes outside the
journal (tokens, snapshots, datasets) get a connection of their own and one ``BEGIN IMMEDIATE``
transaction, so they wait for the journal's lock like any other writer.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import anyio

from envharness.store.database import (
    DATABASE_NAME,
    connect,
    translate_sqlite_error,
    unwritable_store,
)
from envharness.store.handles import open_connection

__all__ = [
    "IDLE_READERS",
    "IDLE_SECONDS",
    "borrowed_reader",
    "close_idle_readers",
    "database_uri",
    "open_reader",
    "read_in_thread",
    "release_reader",
    "take_reader",
    "write_in_thread",
]

_T = TypeVar("_T")

IDLE_READERS = 8
"""Idle read-only connections kept in all (the least recently used store's go first)."""
IDLE_SECONDS = 30.0
"""An idle reader unused for this long is closed (when the pool is next used)."""
_PRUNE_EVERY_S = 1.0

_lock = threading.Lock()
_Key = tuple[Path, int, int, int]
_idle: OrderedDict[_Key, list[sqlite3.Connection]] = OrderedDict()
_since: dict[sqlite3.Connection, float] = {}
"""When each idle reader was given back."""
_count = 0
_pruned = 0.0


def open_reader(directory: Path) -> sqlite3.Connection:
    """A read-only connection; reads never take the write lock.

    Raises :class:`StoreError` when the database cannot be opened.
    """
    try:
        connection = open_connection(
            directory / DATABASE_NAME, database_uri(directory), check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise unwritable_store(directory) or translate_sqlite_error(exc, directory) from exc
    try:
        connection.execute("PRAGMA query_only=ON")
    except BaseException as exc:
        connection.close()
        if isinstance(exc, sqlite3.Error):
            raise translate_sqlite_error(exc, directory) from exc
        raise
    return connection


def database_uri(directory: Path) -> str:
    """The read-only SQLite URI of the store's database.

    ``as_uri`` percent-encodes the path, so a directory named with ``?``, ``#`` or ``%`` names
    that directory instead of starting the URI's query or fragment (or being decoded).
    """
    return f"{(directory / DATABASE_NAME).resolve().as_uri()}?mode=ro"


def take_reader(directory: Path) -> tuple[_Key | None, sqlite3.Connection]:
    """An idle reader of the store, or a new one (blocking: call it from a worker thread).
    Give it back with :func:`release_reader` when the read went well; close it otherwise."""
    key = _key(directory)
    connection = _take(key) if key is not None else None
    return key, connection if connection is not None else open_reader(directory)


def release_reader(key: _Key | None, connection: sqlite3.Connection) -> None:
    """Keep a reader for the next read, unless it is in a transaction or its store unknown."""
    if connection.in_transaction or key is None:
        connection.close()
    else:
        _give_back(key, connection)


@contextmanager
def borrowed_reader(directory: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store, this thread's alone until the block ends."""
    key, connection = take_reader(directory)
    try:
        yield connection
    except BaseException:
        connection.close()  # its state is unknown: never reuse it
        raise
    release_reader(key, connection)


async def read_in_thread(directory: Path, work: Callable[[sqlite3.Connection], _T]) -> _T:
    """``work(connection)`` on a reused reader in a worker thread.

    Reads change nothing, so a cancelled caller does not wait for the thread to finish.
    """

    def run() -> _T:
        try:
            with borrowed_reader(directory) as connection:
                return work(connection)
        except sqlite3.Error as exc:
            raise translate_sqlite_error(exc, directory) from exc

    return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)


async def write_in_thread(directory: Path, work: Callable[[sqlite3.Connection], _T]) -> _T:
    """``work(connection)`` in one ``BEGIN IMMEDIATE`` transaction on a connection of its own.

    A write is not abandoned on cancel: the caller learns whether it happened.
    """

    def run() -> _T:
        connection = connect(directory, create=False)
        try:
            connection.execute("BEGIN IMMEDIATE")
            result = work(connection)
            connection.execute("COMMIT")
            return result
        except BaseException as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise translate_sqlite_error(exc, directory) from exc
            raise
        finally:
            connection.close()

    return await anyio.to_thread.run_sync(run)


def _key(directory: Path) -> _Key | None:
    """The database file's identity. An inode number can be reused by a new file; its change
    time then differs (a checkpoint changes it too, which only costs a reopen)."""
    try:
        status = os.stat(directory / DATABASE_NAME)
    except OSError:
        return None
    return directory, status.st_dev, status.st_ino, status.st_ctime_ns


def _take(key: _Key) -> sqlite3.Connection | None:
    global _count
    with _lock:
        stale = _stale(time.monotonic())
        free = _idle.get(key)
        connection = None
        if free:
            _count -= 1
            connection = free.pop()
            del _since[connection]
            if not free:
                del _idle[key]
    for reader in stale:
        reader.close()
    return connection


def _give_back(key: _Key, connection: sqlite3.Connection) -> None:
    global _count
    now = time.monotonic()
    with _lock:
        evicted = _stale(now)
        _idle.setdefault(key, []).append(connection)
        _since[connection] = now
        _idle.move_to_end(key)
        _count += 1
        while _count > IDLE_READERS:
            oldest_key, oldest = next(iter(_idle.items()))
            evicted.append(oldest.pop(0))
            del _since[evicted[-1]]
            _count -= 1
            if not oldest:
                del _idle[oldest_key]
    for stale in evicted:
        stale.close()


def _stale(now: float) -> list[sqlite3.Connection]:
    """Take out (under the lock) the readers idle too long or kept for a database file that is
    no longer there as it was (deleted, replaced, checkpointed: never taken again). At most
    once a second; a ``stat`` per store kept."""
    global _count, _pruned
    if now - _pruned < _PRUNE_EVERY_S:
        return []
    _pruned = now
    stale: list[sqlite3.Connection] = []
    for key in list(_idle):
        current = _key(key[0]) == key
        for connection in list(_idle[key]):
            if not current or now - _since[connection] >= IDLE_SECONDS:
                _idle[key].remove(connection)
                del _since[connection]
                stale.append(connection)
                _count -= 1
        if not _idle[key]:
            del _idle[key]
    return stale


def close_idle_readers(directory: Path) -> None:
    """Close the idle readers of the store at ``directory`` (blocking: closing may wait for
    SQLite; run it in a worker thread)."""
    global _count
    with _lock:
        idle = [c for key in list(_idle) if key[0] == directory for c in _idle.pop(key)]
        for connection in idle:
            del _since[connection]
        _count -= len(idle)
    for connection in idle:
        connection.close()


@atexit.register
def _close_idle() -> None:
    global _count
    with _lock:
        idle = [c for free in _idle.values() for c in free]
        _idle.clear()
        _since.clear()
        _count = 0
    for connection in idle:
        connection.close()
