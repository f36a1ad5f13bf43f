"""Read connections to a PostgreSQL store: a few kept idle between reads, each read in a worker
thread.

Each read is one statement in autocommit (its own snapshot) or, for a read that must see one
state across statements, one ``REPEATABLE READ`` transaction. Connections are kept apart from
the writer's, so a slow reader never holds up a commit, and a reader's connection never holds
an owner lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio

from envharness.errors import StoreError
from envharness.store.postgres.driver import Connection, Target, psycopg_module

__all__ = ["IDLE_READERS", "Readers"]

IDLE_READERS = 4
"""Read connections kept open between reads; more are opened while reads overlap."""

_T = TypeVar("_T")


class Readers:
    """The read connections of one open store."""

    def __init__(self, connect: Callable[[], Connection], where: Target) -> None:
        self._connect = connect
        self._where = where
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    async def read(self, work: Callable[[Connection], _T]) -> _T:
        """``work(connection)`` in a worker thread; a database error becomes a StoreError."""
        return await anyio.to_thread.run_sync(self._run, work)

    def _run(self, work: Callable[[Connection], _T]) -> _T:
        psycopg = psycopg_module()
        connection, kept = self._take()
        try:
            try:
                result = work(connection)
            except psycopg.OperationalError:
                if not (kept and connection.broken):
                    raise
                # An idle connection the server ended meanwhile (a restart, an idle timeout):
                # reads change nothing, so the read is made once more on a new one.
                connection.close()
                connection = self._connect()
                result = work(connection)
        except psycopg.Error as exc:
            connection.close()  # in an unknown state: never handed on
            text = str(exc).strip().splitlines()
            raise StoreError(
                f"reading the PostgreSQL store {self._where} failed: "
                f"{text[0] if text else type(exc).__name__}"
            ) from None
        except BaseException:
            connection.close()
            raise
        self._give_back(connection)
        return result

    def _take(self) -> tuple[Connection, bool]:
        """A connection, and whether it was kept idle (and so may have been ended meanwhile)."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed; open it again to read from it")
            while self._idle:
                connection = self._idle.pop()
                if not (connection.closed or connection.broken):
                    return connection, True
        return self._connect(), False

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < IDLE_READERS and not connection.broken:
                self._idle.append(connection)
                return
        connection.close()

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []

        def close_all() -> None:
            for connection in idle:
                connection.close()

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close_all)
