"""The PostgreSQL store's single writer per runner: group commit, acknowledged after commit.

The shape is the SQLite journal's (:class:`envharness.store.journal.Journal`): producers hand
over batches of sealed rows and learn of the commit through the same :class:`Pending`; one
writer task takes whatever is waiting and commits it in one transaction on one connection,
driven from a thread of its own. A transaction inserts the blobs (``ON CONFLICT DO NOTHING``),
takes the positions lock, copies the records in (``COPY``), and updates the indexes with the
SQLite store's own rules (:mod:`envharness.store.postgres.dialect`).

Positions follow commit order across runners: each transaction holds the positions lock
(``pg_advisory_xact_lock``) from its first record to its commit, so a reader that has seen
position *n* never misses a smaller one committed later.

The writer's connection also holds the owner lock of every chain this runner runs
(:mod:`envharness.store.postgres.ownership`). When it drops, the batch in flight is retried once
on a new connection: the owner locks are taken again first — a chain whose lock is refused has
been taken over, and nothing more of it is written — and a batch whose commit did reach the
server before the drop is recognised by its rows' digests, never written twice.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import cast

import anyio
import msgspec
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.errors import ChainConflictError, NameTakenError, StoreError
from envharness.records import RecordRow
from envharness.store.index_rules import _move_heads_together, _update_index
from envharness.store.journal import (
    REQUEST_BUFFER,
    BrokenChains,
    Pending,
    _Request,
    commit_in_groups,
    hand_over,
)
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection, Target, failure, psycopg_module
from envharness.store.postgres.ownership import owner_changes, owner_key
from envharness.store.postgres.schema import LOCKS

__all__ = ["PostgresJournal"]

_log = logging.getLogger("envharness.store")

_COPY_RECORDS = (
    "COPY records (session_id, seq, kind, turn, participant, at, payload, prev, digest)"
    " FROM STDIN (FORMAT BINARY)"
)
_RECORD_TYPES = ("text", "int8", "text", "int8", "text", "text", "bytea", "text", "text")
"""The columns' types, for the binary COPY (less for the server to parse than text)."""
_INSERT_BLOBS = "INSERT INTO blobs (digest, data) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_TRY_LOCKS = "SELECT k, pg_try_advisory_lock(k) FROM unnest(%s::bigint[]) AS k"


class _Dropped(Exception):
    """The connection broke; what was in flight may or may not have committed."""


class _ConnectionLost(Exception):
    """The database could not be reached again: every request of the batch fails with
    ``error`` (retrying them one by one would wait for the database once per request)."""

    def __init__(self, error: StoreError) -> None:
        super().__init__(str(error))
        self.error = error


class PostgresJournal:
    """Owns the runner's writer connection and the owner locks it holds."""

    def __init__(self, connect: Callable[[], Connection], where: Target) -> None:
        self._connect = connect
        self._where = where
        self._connection: Connection | None = None
        self._thread = anyio.CapacityLimiter(1)
        self._held: set[str] = set()
        """Chains whose owner lock the connection holds."""
        self._broken = BrokenChains()
        send, receive = anyio.create_memory_object_stream[_Request](REQUEST_BUFFER)
        self._send: MemoryObjectSendStream[_Request] = send
        self._receive: MemoryObjectReceiveStream[_Request] = receive

    # -- the producers' side (same contract as Journal) ----------------------------------------

    async def append(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> None:
        """Write ``rows`` durably in one transaction; returns after the commit."""
        await (await self.submit(rows, blobs)).committed()

    async def submit(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> Pending:
        """Hand ``rows`` to the writer and return at once; :meth:`Pending.committed` waits."""
        return await hand_over(self._send, rows, blobs)

    def close(self) -> None:
        """No more appends; the writer drains what was sent and stops."""
        self._send.close()

    async def in_writer_thread(self, work: Callable[[Connection], object]) -> object:
        """Run ``work`` on the writer's connection, between its transactions."""
        return await anyio.to_thread.run_sync(
            lambda: work(self._ensure()), limiter=self._thread, abandon_on_cancel=False
        )

    async def claim(self, chains: Collection[str]) -> set[str]:
        """Take the owner locks of ``chains`` that no live runner holds; the taken ones."""
        taken = await self.in_writer_thread(lambda _: self._try_locks(set(chains)))
        return cast(set[str], taken)

    async def release(self, chains: Collection[str]) -> None:
        await self.in_writer_thread(lambda _: self._unlock(set(chains)))

    async def backend_pid(self) -> int:
        """The server process of the writer's connection (what an operator would terminate)."""
        return cast(int, await self.in_writer_thread(lambda c: c.info.backend_pid))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The writer loop; shielded, it ends when :meth:`close` is called (as Journal's)."""
        with anyio.CancelScope(shield=True):
            task_status.started()
            await commit_in_groups(self._receive, self._commit, self._thread)

    async def aclose(self) -> None:
        """Close the connection (its locks go with it); after :meth:`run` has ended."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._disconnect, limiter=self._thread)

    # -- runs in the writer's thread -----------------------------------------------------------

    def _ensure(self) -> Connection:
        """The connection, made on first use; one found broken is replaced with its owner
        locks taken again (:meth:`_reconnect`), never silently without them."""
        connection = self._connection
        if connection is None:
            self._connection = connection = self._connect()
        elif connection.closed or connection.broken:
            connection = self._reconnect()
        return connection

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._held.clear()

    def _commit(self, batch: list[_Request]) -> None:
        live = [request for request in batch if not self._broken.refused(request)]
        if not live:
            return
        try:
            self._attempt(live)
        except _ConnectionLost as lost:
            for request in live:
                self._broken.fail(request, lost.error)
        except StoreError as exc:
            if len(live) == 1:
                self._broken.fail(live[0], exc)
                return
            for request in live:  # one bad request must not fail its neighbours
                if self._broken.refused(request):
                    continue
                try:
                    self._attempt([request])
                except StoreError as single:
                    self._broken.fail(request, single)

    def _attempt(self, batch: list[_Request]) -> None:
        """One transaction; if the connection drops, once more on a new one."""
        try:
            self._transaction(batch)
            return
        except _Dropped as dropped:
            _log.warning(
                "the connection to the PostgreSQL store %s dropped (%s); reconnecting and "
                "retrying the batch once",
                self._where,
                dropped,
            )
        try:
            self._reconnect()
        except (psycopg_module().Error, StoreError) as exc:
            raise _ConnectionLost(
                StoreError(
                    f"the connection to the PostgreSQL store {self._where} dropped and could not "
                    f"be made again ({_first_line(exc)}); the batch was committed whole or not "
                    "at all — reopen the store once the database answers, and resume the sessions"
                )
            ) from None
        live = [request for request in batch if not self._broken.refused(request)]
        if not live:
            return
        if self._already_committed(live):
            # Its commit went through: what it ended gives up its owner locks now (they were
            # taken again with the others on the new connection).
            _, after = owner_changes(row for request in live for row in request.rows)
            self._unlock({chain for chain, owned in after.items() if not owned})
            return
        try:
            self._transaction(live)
        except _Dropped as again:
            raise _ConnectionLost(
                StoreError(
                    f"the connection to the PostgreSQL store {self._where} dropped twice while "
                    f"committing ({again}); the batch was committed whole or not at all — reopen "
                    "the store once the database answers, and resume the sessions from what it "
                    "holds"
                )
            ) from None

    def _reconnect(self) -> Connection:
        """A new connection, with every owner lock taken again first; a chain whose lock is
        refused now runs elsewhere, and nothing more of it is written here."""
        held = set(self._held)
        self._disconnect()
        try:
            self._connection = connection = self._connect()
        except StoreError as exc:
            for chain in held:
                self._broken.mark(chain, exc)
            raise
        taken = self._try_locks(held)
        for chain in held - taken:
            self._broken.mark(
                chain,
                StoreError(
                    f"{chain} was taken over by another runner while this runner's connection "
                    "to the database was down (its owner lock is held elsewhere); this runner "
                    "stops writing it"
                ),
            )
        return connection

    def _try_locks(self, chains: set[str]) -> set[str]:
        wanted = {owner_key(chain): chain for chain in chains - self._held}
        if wanted:
            rows = self._ensure().execute(_TRY_LOCKS, (list(wanted),)).fetchall()
            self._held.update(wanted[key] for key, ok in rows if ok)
        return chains & self._held

    def _unlock(self, chains: set[str]) -> None:
        mine = chains & self._held
        connection = self._connection
        if not mine or connection is None or connection.closed or connection.broken:
            self._held -= mine
            return
        connection.execute(
            "SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS k",
            ([owner_key(chain) for chain in mine],),
        )
        self._held -= mine

    def _already_committed(self, batch: Sequence[_Request]) -> bool:
        """Whether the batch's commit reached the server before the drop: every request's last
        row is stored with its digest (the transaction was all or nothing)."""
        lasts = [request.rows[-1] for request in batch if request.rows]
        if not lasts:
            return False
        found = {
            (session, seq): digest
            for session, seq, digest in self._ensure()
            .execute(
                "SELECT session_id, seq, digest FROM records"
                " WHERE (session_id, seq) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))",
                ([row.session_id for row in lasts], [row.seq for row in lasts]),
            )
            .fetchall()
        }
        return all(found.get((row.session_id, row.seq)) == row.digest for row in lasts)

    def _transaction(self, batch: Sequence[_Request]) -> None:
        psycopg = psycopg_module()
        rows = [row for request in batch for row in request.rows]
        blobs = {digest: data for request in batch for digest, data in request.blobs.items()}
        # In digest order: two runners inserting the same new blobs wait for each other in
        # one order, never in a cycle (a deadlock PostgreSQL would break by failing one).
        kept = sorted(blobs.items())
        try:
            connection = self._ensure()
            claimed, after = owner_changes(rows)
            new = claimed - self._held
            taken = self._try_locks(new)
            if refused := new - taken:
                self._unlock(taken)
                raise ChainConflictError(
                    f"{', '.join(sorted(refused))} is run by another runner (its owner lock is "
                    "held by another connection to the database); a live runner is never "
                    "taken over"
                )
            try:
                with connection.transaction():
                    if kept:
                        connection.cursor().executemany(_INSERT_BLOBS, kept)
                    connection.execute(
                        "SELECT pg_advisory_xact_lock(%s, %s)",
                        (LOCKS.NAMESPACE, LOCKS.POSITIONS),
                    )
                    with connection.cursor().copy(_COPY_RECORDS) as copy:
                        copy.set_types(_RECORD_TYPES)
                        for row in rows:
                            copy.write_row(row)
                    # The SQLite store's index rules, on this connection (dialect.py), the
                    # chains' heads moved many to a statement: each is a round trip here.
                    _update_index(
                        cast(sqlite3.Connection, SqliteStyle(connection)),
                        rows,
                        _move_heads_together,
                    )
            except BaseException:
                if connection.closed or connection.broken:
                    self._held -= taken  # gone with the connection
                else:
                    self._unlock(taken)
                raise
            self._unlock({chain for chain, owned in after.items() if not owned})
        except msgspec.MsgspecError as exc:
            raise StoreError(f"a record's payload is malformed and was not written: {exc}") from exc
        except psycopg.Error as exc:
            if self._connection is None or self._connection.broken or self._connection.closed:
                raise _Dropped(_first_line(exc)) from None
            raise self._translate(exc) from None

    def _translate(self, exc: Exception) -> StoreError:
        constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
        if constraint == "harness_versions_pkey":
            return NameTakenError(
                "a harness version of that name is already in the store: another optimizer run "
                "accepted one at the same time (seal the record again under the next name)"
            )
        if constraint == "records_chain_position":
            return ChainConflictError(
                "a record's position in its session chain is already taken: another writer "
                "is appending to the same session (only one runner may drive a session)"
            )
        return failure(self._where, exc, who="a runner")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
