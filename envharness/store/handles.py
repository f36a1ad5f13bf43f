"""This process's SQLite handles on each store's database file, and the one descriptor through
which envharness reads the file's own bytes.

POSIX advisory locks belong to a process and a file: closing *any* descriptor of a file drops
every lock the process holds on it, SQLite's own included (SQLite's "How To Corrupt An SQLite
Database File", section 2.2). A connection in WAL mode holds a shared lock on the database file
for as long as it is open; with that lock gone, another process's last connection takes itself
for the only one, checkpoints and deletes the write-ahead log on closing, and what this process
commits afterwards goes to a deleted file. SQLite's handles within one process share their
locks and never close a descriptor under each other; envharness's own reads of the raw file
(the header checks of :mod:`envharness.store.damage`) must not either.

So every SQLite handle envharness opens on a store's database is made here
(:func:`open_connection`) and counted per file (device, inode) until it is closed. The first
handle keeps a descriptor of the file open (opening one drops no lock), and only the last one's
close, after SQLite closed its own, closes it. :func:`read_start` reads through that
descriptor; when no handle is open it opens one of its own and closes it again, holding the
lock every handle takes to be counted, so none opens meanwhile.

A handle opened outside envharness in this process (a plain ``sqlite3.connect`` of the file) is
not counted, so a descriptor is closed only while ``/proc/locks`` shows no lock of this process
on the file (where it can be read); otherwise it stays open, and a later close tries again.

Nothing else in envharness opens the database file. Its ``-shm`` file, where SQLite keeps its
WAL locks, is never opened either; its ``-wal`` is (by :mod:`envharness.store.walscan`):
SQLite takes no lock on that file. ``docs/architecture.md`` records the choice.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Handle", "lock_holders", "open_connection", "read_start"]

_Key = tuple[int, int]


@dataclass
class _File:
    """A database file's counted handles and the descriptors kept open for it (one, but for a
    file replaced at its path while a second was being opened)."""

    handles: int = 0
    descriptors: list[int] = field(default_factory=list)


_lock = threading.Lock()
_files: dict[_Key, _File] = {}
_pending: list[_Key] = []
"""Files of handles closed by their finaliser, to count out when the lock is next taken."""


@contextmanager
def _locked() -> Iterator[None]:
    with _lock:
        while _pending:
            _release(_pending.pop())
        yield


class Handle(sqlite3.Connection):
    """A connection counted for its database file until it is closed."""

    _counted: _Key | None = None

    def close(self) -> None:
        super().close()
        with _locked():
            key, self._counted = self._counted, None
            if key is not None:
                _release(key)

    def __del__(self) -> None:
        # Collected unclosed: SQLite's handle is closed here and counted out the next time the
        # lock is taken (a finaliser may run in a thread that holds it). One that cannot be
        # closed here (made for another thread) stays counted: that only keeps a descriptor.
        key = self._counted
        if key is not None:
            with suppress(Exception):  # a finaliser has no caller to tell
                super().close()
                self._counted = None
                _pending.append(key)


def open_connection(
    database: Path,
    target: str | None = None,
    *,
    timeout: float = 5.0,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """A connection (autocommit) to ``database``, counted for it until closed: ``target``, an
    SQLite URI naming that file, or the file itself."""
    with _locked():
        key = _hold(database)
    try:
        connection = sqlite3.connect(
            target if target is not None else database,
            timeout=timeout,
            isolation_level=None,
            check_same_thread=check_same_thread,
            uri=target is not None,
            factory=Handle,
        )
    except BaseException:
        if key is not None:
            with _locked():
                _release(key)
        raise
    connection._counted = key
    if key is None:  # SQLite made the file: counted now, before any statement takes a lock
        with _locked():
            connection._counted = _hold(database)
    return connection


def read_start(database: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of ``database``, read without closing a descriptor that this
    process's SQLite handles depend on; ``None`` when that cannot be done (the file is open
    here but no descriptor of it could be kept). Raises ``OSError`` (``FileNotFoundError``
    when there is no such file)."""
    with _locked():
        status = os.stat(database)
        entry = _files.get((status.st_dev, status.st_ino))
        if entry is not None:
            return os.pread(entry.descriptors[0], size, 0) if entry.descriptors else None
        key = _keep(database)
        try:
            entry = _files[key]
            return os.pread(entry.descriptors[0], size, 0)
        finally:
            _release(key, counted=False)


def lock_holders(status: os.stat_result) -> set[int] | None:
    """The processes holding a POSIX lock on the file ``status`` describes, by ``/proc/locks``
    (Linux); ``None`` where that cannot be read."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return None
    wanted = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    holders: set[int] = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[1] == "POSIX":  # a waiter's line reads "->" there
            try:
                major, minor, inode = fields[5].split(":")
                if (int(major, 16), int(minor, 16), int(inode)) == wanted:
                    holders.add(int(fields[4]))
            except ValueError:
                continue
    return holders


def _hold(database: Path) -> _Key | None:
    """Count one more handle of ``database`` (under ``_lock``); ``None`` when there is no such
    file (yet)."""
    try:
        status = os.stat(database)
    except OSError:
        return None
    key = (status.st_dev, status.st_ino)
    if key not in _files:
        try:
            key = _keep(database)
        except OSError:
            _files[key] = _File()  # counted without a descriptor: its header is not read
    _files[key].handles += 1
    return key


def _keep(database: Path) -> _Key:
    """Open a descriptor of ``database`` and keep it for that file (under ``_lock``). Keyed by
    the file opened: if another took the path's place since it was looked up, and that one is
    open here already, the descriptor joins those kept for it and is closed with them."""
    descriptor = os.open(database, os.O_RDONLY)
    status = os.fstat(descriptor)
    key = (status.st_dev, status.st_ino)
    _files.setdefault(key, _File()).descriptors.append(descriptor)
    return key


def _release(key: _Key, *, counted: bool = True) -> None:
    """Count one handle out (under ``_lock``); with none left, close the file's descriptors
    unless this process still holds a lock on it (a handle opened outside envharness)."""
    entry = _files[key]
    entry.handles -= 1 if counted else 0
    if entry.handles or not entry.descriptors:
        if not entry.handles:
            del _files[key]
        return
    holders = lock_holders(os.fstat(entry.descriptors[0]))
    if holders is not None and os.getpid() in holders:
        return  # kept until a later close finds the file unlocked
    del _files[key]
    for descriptor in entry.descriptors:
        os.close(descriptor)
