"""A PostgreSQL store's database in the read/write shape of
:class:`~envharness.store.backend.SqliteBackend`, for the helpers that take one: stop and pause
requests (:mod:`envharness.store.control`) so far.

Callbacks run in a worker thread on a :class:`SqliteStyle` connection, so the helpers' SQL keeps
SQLite's ``?`` placeholders. Each call opens a connection and closes it, unless the backend is
made with ``keep=True``: a run's watcher reads every half second, and a new connection costs
the server a process and ~10 ms, so the watcher's backend keeps one read connection between
reads and lets it go with :meth:`aclose` when the last run stops watching (a later read opens
another). A write always opens a connection of its own: it is rare (a request asked or taken),
and is never retried on a kept connection that may have been cut, which could not tell whether
it had committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio

from envharness.errors import StoreError
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection, connect, psycopg_module, target

__all__ = ["PostgresBackend"]

_T = TypeVar("_T")


class PostgresBackend:
    """The database at one PostgreSQL URL; messages name it without its password."""

    __slots__ = ("_idle", "_keep", "_lock", "_url", "location")

    def __init__(self, url: str, *, keep: bool = False) -> None:
        self._url = url
        self._keep = keep
        self.location = str(target(url))
        """Where the store is, as messages name it: the URL without its password."""
        self._idle: Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    async def read(self, work: Callable[[SqliteStyle], _T]) -> _T:
        """``work(connection)`` in autocommit, in a worker thread, on the kept connection."""
        return await anyio.to_thread.run_sync(self._read, work)

    async def write(self, work: Callable[[SqliteStyle], _T]) -> _T:
        """``work(connection)`` in one transaction on a new connection, in a worker thread;
        not abandoned on cancel, so the caller learns whether it happened."""
        with anyio.CancelScope(shield=True):
            done = await anyio.to_thread.run_sync(self._write, work)
        return done

    async def aclose(self) -> None:
        """Close the kept read connection, if any (the next read opens one again)."""
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(idle.close)

    def _read(self, work: Callable[[SqliteStyle], _T]) -> _T:
        psycopg = psycopg_module()
        with self._lock:
            connection, self._idle = self._idle, None
        kept = connection is not None and not (connection.closed or connection.broken)
        if connection is None or not kept:
            connection = connect(self._url)
        try:
            try:
                result = work(SqliteStyle(connection))
            except psycopg.OperationalError:
                if not (kept and connection.broken):
                    raise
                # Cut while it was kept (a server restart, an idle timeout): a read changes
                # nothing, so it is made once more on a new connection.
                connection.close()
                connection = connect(self._url)
                result = work(SqliteStyle(connection))
        except psycopg.Error as exc:
            connection.close()
            raise self._failed(exc) from None
        except BaseException:
            connection.close()
            raise
        with self._lock:
            if self._keep and self._idle is None and not connection.broken:
                self._idle, connection = connection, None
        if connection is not None:
            connection.close()
        return result

    def _write(self, work: Callable[[SqliteStyle], _T]) -> _T:
        psycopg = psycopg_module()
        connection = connect(self._url)
        try:
            with connection.transaction():
                return work(SqliteStyle(connection))
        except psycopg.Error as exc:
            raise self._failed(exc) from None
        finally:
            connection.close()

    def _failed(self, exc: Exception) -> StoreError:
        text = str(exc).strip().splitlines()
        return StoreError(
            f"the PostgreSQL store {self.location} failed: "
            f"{text[0] if text else type(exc).__name__}"
        )
