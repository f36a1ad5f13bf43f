"""A PostgreSQL store's database in the read/write shape of
:class:`~envharness.store.backend.SqliteBackend`, for the helpers that take one: stop and pause
requests (:mod:`envharness.store.control`), service tokens (:mod:`envharness.store.tokens`),
the service's reads (:mod:`envharness.store.named_reads`) and recorded artifacts.

Callbacks given to :meth:`~PostgresBackend.read` and :meth:`~PostgresBackend.write` run in a
worker thread on a :class:`SqliteStyle` connection, so the helpers' portable SQL keeps SQLite's
``?`` placeholders; :meth:`~PostgresBackend.read_native` hands the psycopg connection itself to
reads written in PostgreSQL's own SQL. Each call opens a connection and closes it, unless the
backend is made with ``keep=True``: a run's watcher reads every half second, the service on
every request and an open store on every read, and a new connection costs the server a process
and ~10 ms, so a kept backend keeps a few read connections between reads and lets them go with
:meth:`aclose` (a later read opens another, unless the close was final: an open store's
backend reads for it, and refuses once the store is closed). Read connections are apart from
the store's writer, so a slow reader never holds up a commit, and never holds an owner
lock. A write always opens a connection of its own: it is rare (a
request asked or taken, a token issued or revoked), and is never retried on a kept connection
that may have been cut, which could not tell whether it had committed.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio

from envharness.errors import DamagedStoreError, NotFoundError, StoreError
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection, connect, failure, psycopg_module, target

__all__ = ["KEPT_READERS", "PostgresBackend"]

_T = TypeVar("_T")

KEPT_READERS = 4
"""Read connections a kept backend holds idle between reads; more open while reads overlap."""


class PostgresBackend:
    """The database at one PostgreSQL URL; messages name it without its password."""

    __slots__ = ("_closed", "_closings", "_idle", "_keep", "_lock", "_url", "location", "where")

    def __init__(self, url: str, *, keep: bool = False) -> None:
        self._url = url
        self._keep = keep
        self.where = target(url)
        """The user, host, port and database the URL names (never its password)."""
        self.location = str(self.where)
        """Where the store is, as messages name it: the URL without its password."""
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closings = 0
        self._closed = False
        """How many times :meth:`aclose` ran: a read that began before the last one closes its
        connection rather than keeping it, so nothing stays open after the close."""

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    async def read(self, work: Callable[[SqliteStyle], _T]) -> _T:
        """``work(connection)`` in autocommit, in a worker thread, on a kept connection."""
        return await self.read_native(lambda connection: work(SqliteStyle(connection)))

    async def read_native(self, work: Callable[[Connection], _T]) -> _T:
        """``work`` given the psycopg connection itself, for reads in PostgreSQL's own SQL;
        otherwise as :meth:`read`."""
        return await anyio.to_thread.run_sync(self._read, work)

    async def write(self, work: Callable[[SqliteStyle], _T]) -> _T:
        """``work(connection)`` in one transaction on a new connection, in a worker thread;
        not abandoned on cancel, so the caller learns whether it happened."""
        with anyio.CancelScope(shield=True):
            done = await anyio.to_thread.run_sync(self._write, work)
        return done

    async def aclose(self, *, final: bool = False) -> None:
        """Close the kept read connections, if any: the next read opens one again, unless
        ``final`` (the store this backend read for is closed), when reads are refused."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closings += 1
            self._closed = self._closed or final

        def close_all() -> None:
            for connection in idle:
                connection.close()

        if idle:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(close_all)

    async def artifact(self, sha256: str) -> bytes:
        """An artifact's bytes, checked against its sha256 in the worker thread that reads
        them: :class:`NotFoundError` when the store has none by that sha256,
        :class:`DamagedStoreError` when its content no longer has it."""
        return await self.read_native(lambda connection: self._checked(connection, sha256))

    async def artifact_prefix(self, sha256: str, limit: int) -> bytes | None:
        """At most the first ``limit`` bytes of an artifact, unchecked (a preview); ``None``
        when the store has none by that sha256."""
        rows = await self.read_native(
            lambda connection: connection.execute(
                "SELECT substring(data FROM 1 FOR %s) FROM artifacts WHERE sha256 = %s",
                (max(limit, 0), sha256),
            ).fetchall()
        )
        return bytes(rows[0][0]) if rows else None

    async def missing_privileges(self, table: str, privileges: Sequence[str]) -> list[str]:
        """Which of ``privileges`` (``SELECT``, ``INSERT``, ...) this URL's role lacks on
        ``table``: asked of the server before they are needed, so a role set up for another
        job is named with the grant it misses instead of failing on a later request."""

        def missing(connection: Connection) -> list[str]:
            return [
                privilege
                for privilege in privileges
                if not connection.execute(
                    "SELECT has_table_privilege(%s, %s)", (table, privilege)
                ).fetchone()[0]
            ]

        return await self.read_native(missing)

    def _checked(self, connection: Connection, sha256: str) -> bytes:
        rows = connection.execute(
            "SELECT data FROM artifacts WHERE sha256 = %s", (sha256,)
        ).fetchall()
        if not rows:
            raise NotFoundError(
                f"artifact {sha256} is missing from the store {self.location}; run "
                "`envharness verify` to see what else is damaged"
            )
        data = bytes(rows[0][0])
        if hashlib.sha256(data).hexdigest() != sha256:
            raise DamagedStoreError(
                f"artifact {sha256} in the store {self.location} was modified (its content no "
                "longer has that sha256); run `envharness verify` to see what else is damaged"
            )
        return data

    def kept_connections(self) -> int:
        """How many read connections are kept idle now (what :meth:`aclose` would close)."""
        with self._lock:
            return len(self._idle)

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        psycopg = psycopg_module()
        with self._lock:
            closings = self._closings
        connection, kept = self._take()
        try:
            try:
                result = work(connection)
            except psycopg.OperationalError:
                if not (kept and connection.broken):
                    raise
                # Cut while it was kept (a server restart, an idle timeout): a read changes
                # nothing, so it is made once more on a new connection.
                connection.close()
                connection = connect(self._url)
                result = work(connection)
        except psycopg.Error as exc:
            connection.close()
            raise self._failed(exc) from None
        except BaseException:
            connection.close()
            raise
        self._give_back(connection, closings)
        return result

    def _take(self) -> tuple[Connection, bool]:
        """A connection, and whether it was kept idle (and so may have been ended meanwhile)."""
        found: Connection | None = None
        ended: list[Connection] = []
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed; open it again to read from it")
            while self._idle and found is None:
                connection = self._idle.pop()
                if connection.closed or connection.broken:
                    ended.append(connection)
                else:
                    found = connection
        for connection in ended:  # its socket goes now, not when it is collected
            connection.close()
        return (found, True) if found is not None else (connect(self._url), False)

    def _give_back(self, connection: Connection, closings: int) -> None:
        """Keep ``connection`` for the next read, unless the backend was closed since the read
        that used it began (:meth:`aclose` has already closed what it kept)."""
        with self._lock:
            if (
                self._keep
                and closings == self._closings
                and len(self._idle) < KEPT_READERS
                and not connection.broken
            ):
                self._idle.append(connection)
                return
        connection.close()

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
        return failure(self.where, exc, who="this command")
