"""The store's single writer: group commit with acknowledgement after commit.

Producers (session runners, importers) call :meth:`Journal.append` with a batch of sealed rows;
the call returns only once the transaction holding them has committed. The writer task takes
whatever requests are waiting, up to :data:`MAX_BATCH_ROWS`, and commits them together: under
load, many sessions share one fsync. The request stream is bounded, so a slow disk slows the
producers instead of growing a queue.

After each commit the writer updates the acknowledged high-water mark (:mod:`.wal`), and once
the journal has been idle for :data:`IDLE_CHECKPOINT_S` it checkpoints the write-ahead log into
the database and empties it, so that little lives only in the log while nothing is written.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import msgspec
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.errors import ChainConflictError, NameTakenError, StoreBusyError, StoreError
from envharness.records import (
    RecordRow,
)
from envharness.store.blobs import pack
from envharness.store.database import BUSY_TIMEOUT_S, DATABASE_NAME, translate_sqlite_error
from envharness.store.index_rules import (
    NULL_INTEGER,
    NULL_TEXT,
    ROWS_PER_INSERT,
    _update_index,
    insert_rows,
    insert_sessions_standing_in,
)
from envharness.store.wal import MarkWriter
from envharness.store.walscan import WAL_SUFFIX

__all__ = [
    "BrokenChains",
    "IDLE_CHECKPOINT_S",
    "MAX_BATCH_ROWS",
    "ROWS_PER_INSERT",
    "REQUEST_BUFFER",
    "WAL_WARNING_BYTES",
    "Journal",
    "Pending",
    "commit_in_groups",
    "hand_over",
]

MAX_BATCH_ROWS = 4096
"""Upper bound on rows in one transaction, so one commit never holds the lock for long."""
REQUEST_BUFFER = 64
"""Append requests that may wait for the writer before producers block (back-pressure)."""
LINGER_S = 0.002
"""When several producers' requests wait together, the writer waits this long for more before
it commits them: under load, commits get fuller and fewer; a lone producer never waits."""
IDLE_CHECKPOINT_S = 1.0
"""After this long without a commit, the writer checkpoints the log and empties it."""
WAL_WARNING_BYTES = 16 << 20
"""A log this large means something keeps SQLite from checkpointing: warned of (then at each
doubling). SQLite's own checkpoints keep it near 4 MiB otherwise."""

_log = logging.getLogger("envharness.store")
_LAST_POSITION = "SELECT max(pos) FROM records"


_INSERT_RECORDS = (
    "INSERT INTO records (session_id, seq, kind, turn, participant, at, payload, prev, digest)"
    " VALUES "
)
# Each NULL is bound as a stand-in that NULLIF turns back, each payload as a bytearray:
# ``sqlite3`` binds ``None`` and ``bytes`` the slow way (see index_rules.NULL_INTEGER), which
# was a fifth of the writer's instructions.
_RECORD_VALUES = "(?, ?, ?, NULLIF(?, ''), NULLIF(?, 0), ?, ?, NULLIF(?, 0), ?)"
_INSERT_BLOBS = "INSERT OR IGNORE INTO blobs (digest, codec, data) VALUES "
_BLOB_VALUES = "(?, ?, ?)"


class _Request:
    __slots__ = ("blobs", "done", "error", "rows")

    def __init__(self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes]) -> None:
        self.rows = rows
        self.blobs = blobs
        self.done = anyio.Event()
        self.error: StoreError | None = None


class BrokenChains:
    """The chains whose rows failed to commit, in one writer: each has a gap from there on, so
    nothing later of it may be written (a producer may have submitted more before it learned of
    the error). The SQLite journal and the PostgreSQL writer keep the same rule."""

    __slots__ = ("_causes",)

    def __init__(self) -> None:
        self._causes: dict[str, StoreError] = {}

    def mark(self, chain_id: str, cause: StoreError) -> None:
        """Nothing more of ``chain_id`` is written, because of ``cause`` (the first one kept)."""
        self._causes.setdefault(chain_id, cause)

    def fail(self, request: _Request, error: StoreError) -> None:
        """``request`` failed with ``error``; its chains are broken unless the error leaves
        them intact (another writer holds those positions, or that name)."""
        request.error = error
        if isinstance(error, ChainConflictError | NameTakenError):
            return
        for row in request.rows:
            self.mark(row.session_id, error)

    def refused(self, request: _Request) -> bool:
        """Whether ``request`` touches a broken chain (then its error says which, and why)."""
        if not self._causes:
            return False
        for row in request.rows:
            cause = self._causes.get(row.session_id)
            if cause is not None:
                request.error = StoreError(
                    f"nothing more is written to {row.session_id}: an earlier commit of it "
                    f"failed ({cause}); reopen the store to recover and resume it"
                )
                return True
        return False


class Pending:
    """Rows handed to the writer: they will be committed (or fail) whatever happens next."""

    __slots__ = ("_request",)

    def __init__(self, request: _Request) -> None:
        self._request = request

    @property
    def done(self) -> bool:
        return self._request.done.is_set()

    @property
    def error(self) -> StoreError | None:
        """The failure, once :attr:`done` (``None`` when the rows were committed)."""
        return self._request.error

    async def committed(self) -> None:
        """Wait for the commit; raises :class:`StoreError` if it failed.

        Shielded: once rows are handed over, the caller always learns whether they are stored
        (a commit is bounded by the busy timeout).
        """
        if not self._request.done.is_set():
            with anyio.CancelScope(shield=True):
                await self._request.done.wait()
        if self._request.error is not None:
            raise self._request.error


async def hand_over(
    send: MemoryObjectSendStream[_Request],
    rows: Sequence[RecordRow],
    blobs: Mapping[str, bytes] | None,
) -> Pending:
    """Hand ``rows`` (and ``blobs``) to a writer's request stream: what ``submit`` does for
    every engine.

    A cancellation point still (a stop asked meanwhile is heard here, nothing handed over),
    but no pass of the loop while there is room: a producer with several batches at hand (a
    remote worker's driver) hands them all over before the writer takes any, so they share
    one commit. Blocks only while the request buffer is full.
    """
    request = _Request(rows, blobs or {})
    if not rows and not blobs:
        request.done.set()
        return Pending(request)
    await anyio.lowlevel.checkpoint_if_cancelled()
    try:
        try:
            send.send_nowait(request)
        except anyio.WouldBlock:
            await send.send(request)  # cancelled here, nothing was handed over
    except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
        raise StoreError("the store is closed; open it again to write") from exc
    return Pending(request)


class Journal:
    """Owns the write connection; one per open store."""

    def __init__(self, connection: sqlite3.Connection, directory: Path) -> None:
        self._connection = connection
        self._directory = directory
        # Its own worker thread: commits never queue behind agents' threads.
        self._thread = anyio.CapacityLimiter(1)
        self._broken = BrokenChains()
        send, receive = anyio.create_memory_object_stream[_Request](REQUEST_BUFFER)
        self._send: MemoryObjectSendStream[_Request] = send
        self._receive: MemoryObjectReceiveStream[_Request] = receive
        self._mark = MarkWriter(directory / DATABASE_NAME)
        self._wal = directory / f"{DATABASE_NAME}{WAL_SUFFIX}"
        self._wal_warning = WAL_WARNING_BYTES
        self._committed = anyio.Event()
        self._last_commit = 0.0

    async def append(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> None:
        """Write ``rows`` (and content-addressed ``blobs``) durably, in one transaction.

        Returns after the commit; raises :class:`StoreError` if it did not happen. A
        cancellation is honoured only before the rows are handed to the writer; after that the
        call waits for the commit, so the caller always knows whether its rows are stored.
        """
        await (await self.submit(rows, blobs)).committed()

    async def submit(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> Pending:
        """Hand ``rows`` to the writer and return at once; :meth:`Pending.committed` waits.

        Lets a producer go on computing while its rows are committed — consecutive submits
        then share a transaction. Blocks only while the request buffer is full.
        """
        return await hand_over(self._send, rows, blobs)

    def close(self) -> None:
        """No more appends; the writer drains what was sent and stops."""
        self._send.close()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The writer loop. Shielded: it ends when :meth:`close` is called, not on cancel.

        A cancelled run must still be able to write its final ``stopped`` status, so the
        writer outlives the cancellation of its task group until the stream is closed.
        """
        with anyio.CancelScope(shield=True):
            task_status.started()
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._checkpoint_when_idle)
                    await self._write()
                    group.cancel_scope.cancel()
            finally:
                self._mark.close()

    async def _write(self) -> None:
        await commit_in_groups(self._receive, self._commit, self._thread, self._committed_now)

    def _committed_now(self) -> None:
        self._last_commit = anyio.current_time()
        self._committed.set()

    async def _checkpoint_when_idle(self) -> None:
        """Once no commit came for :data:`IDLE_CHECKPOINT_S`, checkpoint (in the writer's own
        thread, so never during a commit). Sleeps only while there is something to do."""
        while True:
            await self._committed.wait()
            await anyio.sleep_until(self._last_commit + IDLE_CHECKPOINT_S)
            if anyio.current_time() < self._last_commit + IDLE_CHECKPOINT_S:
                continue  # committed meanwhile: idle from then on
            self._committed = anyio.Event()  # commits from now on call for the next one
            await anyio.to_thread.run_sync(self._checkpoint, limiter=self._thread)

    # -- runs in a worker thread ---------------------------------------------------------------

    def _checkpoint(self) -> None:
        """Copy the log into the database and empty it, without waiting: a reader in the middle
        of a read, or another process's writer, makes it copy what it can and return (SQLite's
        own checkpoints go on as before). Costs two fsyncs, once per idle moment."""
        connection = self._connection
        try:
            connection.execute("PRAGMA busy_timeout = 0")
            try:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        except (sqlite3.Error, OSError):
            pass  # best effort: the next idle moment tries again
        self._watch_wal()

    def _watch_wal(self) -> None:
        """Warn when the log keeps growing: a long read transaction (another process's, an
        open ``sqlite3`` shell) stops every checkpoint, and all commits since live only there."""
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            return
        if size < self._wal_warning:
            if size < WAL_WARNING_BYTES:
                self._wal_warning = WAL_WARNING_BYTES
            return
        self._wal_warning = size * 2
        _log.warning(
            "the write-ahead log of the store at %r has grown to %.1f MiB: a read transaction "
            "that stays open (a paused export or viewer, another process, an sqlite3 shell) "
            "keeps SQLite from checkpointing it, and everything committed since lives only in "
            "that file; end the long read and the log is emptied when the journal is next idle",
            str(self._directory),
            size / (1 << 20),
        )

    def _commit(self, batch: list[_Request]) -> None:
        live = [request for request in batch if not self._broken.refused(request)]
        if not live:
            return
        try:
            self._transaction(live)
        except StoreError as exc:
            if len(live) == 1 or isinstance(exc, StoreBusyError):
                # A lock another process kept past the busy timeout fails the whole batch:
                # retrying request by request would wait out the timeout once per request.
                for request in live:
                    self._broken.fail(request, exc)
                return
            # One bad request must not fail its neighbours: retry each on its own.
            for request in live:
                if self._broken.refused(request):
                    continue
                try:
                    self._transaction([request])
                except StoreError as single:
                    self._broken.fail(request, single)

    def _transaction(self, batch: Sequence[_Request]) -> None:
        connection = self._connection
        rows = [row for request in batch for row in request.rows]
        blobs = {digest: data for request in batch for digest, data in request.blobs.items()}
        # Compressed here, in the writer's thread, and before the write lock is taken.
        kept = _blob_values(blobs)
        values = _record_values(rows)
        try:
            connection.execute("BEGIN IMMEDIATE")
            if kept:
                insert_rows(connection, _insert_blobs, 3, kept)
            insert_rows(connection, _insert_records, 9, values)
            heads = _update_index(connection, rows, insert_sessions=insert_sessions_standing_in)
            (position,) = connection.execute(_LAST_POSITION).fetchone()
            connection.execute("COMMIT")
        except (sqlite3.Error, msgspec.MsgspecError) as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise self._translate(exc) from exc
        if heads:
            at = max(row.at for row in heads.values())
            self._mark.note(position, at, {chain: row.seq for chain, row in heads.items()})
        self._watch_wal()

    def _translate(self, exc: sqlite3.Error | msgspec.MsgspecError) -> StoreError:
        if isinstance(exc, msgspec.MsgspecError):
            return StoreError(f"a record's payload is malformed and was not written: {exc}")
        if isinstance(exc, sqlite3.IntegrityError) and "harness_versions.version" in str(exc):
            return NameTakenError(
                "a harness version of that name is already in the store: another optimizer run "
                "accepted one at the same time (seal the record again under the next name)"
            )
        if isinstance(exc, sqlite3.IntegrityError) and "records.session_id" in str(exc):
            return ChainConflictError(
                "a record's position in its session chain is already taken: another writer "
                "is appending to the same session (only one runner may drive a session)"
            )
        return translate_sqlite_error(exc, self._directory)


def _record_values(rows: Sequence[RecordRow]) -> list[object]:
    """The values that insert ``rows``, row after row: each NULL as its stand-in, each payload
    a ``bytearray`` (bound without the adapter's detour, stored the same: a BLOB)."""
    values: list[object] = []
    for row in rows:
        turn, participant, prev = row.turn, row.participant, row.prev
        values += (
            row.session_id,
            row.seq,
            row.kind,
            NULL_INTEGER if turn is None else turn,
            NULL_TEXT if participant is None else participant,
            row.at,
            bytearray(row.payload),
            NULL_TEXT if prev is None else prev,
            row.digest,
        )
    return values


def _blob_values(blobs: Mapping[str, bytes]) -> list[object]:
    """The values that insert ``blobs``, each packed (:func:`pack`), its bytes a
    ``bytearray``."""
    values: list[object] = []
    for digest, data in blobs.items():
        codec, stored = pack(data)
        values += (digest, codec, bytearray(stored))
    return values


@functools.cache
def _insert_records(count: int) -> str:
    """The statement that inserts ``count`` records' :func:`_record_values`."""
    return _INSERT_RECORDS + ", ".join([_RECORD_VALUES] * count)


@functools.cache
def _insert_blobs(count: int) -> str:
    """The statement that inserts ``count`` blobs' :func:`_blob_values`."""
    return _INSERT_BLOBS + ", ".join([_BLOB_VALUES] * count)


async def commit_in_groups(
    receive: MemoryObjectReceiveStream[_Request],
    commit: Callable[[list[_Request]], None],
    thread: anyio.CapacityLimiter,
    after: Callable[[], None] = lambda: None,
) -> None:
    """The writer loop every engine shares (group commit): take the requests waiting, linger a
    moment when several producers are writing, commit them as one transaction in the writer's
    thread, and wake every producer of the group, each with its error if the commit failed —
    never leaving one waiting. ``after`` runs once each group is done."""
    async with receive:
        async for first in receive:
            group = [first]
            size = _gather(receive, group, len(first.rows))
            if len(group) > 1 and size < MAX_BATCH_ROWS and LINGER_S > 0:
                # Several producers are writing: a moment's wait lets more of them share
                # this commit (fewer, fuller transactions); a lone producer never waits.
                await anyio.sleep(LINGER_S)
                size = _gather(receive, group, size)
            try:
                await anyio.to_thread.run_sync(commit, group, limiter=thread)
            except Exception as exc:  # noqa: BLE001 - never leave a producer waiting
                for request in group:
                    request.error = request.error or StoreError(
                        f"the journal failed to commit: {exc!r}"
                    )
            finally:
                for request in group:
                    request.done.set()
                after()


def _gather(receive: MemoryObjectReceiveStream[_Request], group: list[_Request], size: int) -> int:
    """Add the requests already waiting to ``group``, up to :data:`MAX_BATCH_ROWS` rows;
    returns the rows in it."""
    while size < MAX_BATCH_ROWS:
        try:
            request = receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            break
        group.append(request)
        size += len(request.rows)
    return size
