"""The store's single writer: group commit with acknowledgement after commit.

Producers (session runners, importers) call :meth:`Journal.append` with a batch of sealed rows;
the call returns only once the transaction holding them has committed. The writer task takes
whatever requests are waiting, up to :data:`MAX_BATCH_ROWS`, and commits them together: under
load, many sessions share one fsync. The request stream is bounded, so a slow disk slows the
producers instead of growing a queue.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import anyio
import msgspec
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.errors import ChainConflictError, NameTakenError, StoreBusyError, StoreError
from envharness.records import (
    Branch,
    ExperimentCreated,
    ExperimentStatus,
    OptimizerAccepted,
    OptimizerStarted,
    OptimizerStatus,
    RecordRow,
    SegmentStarted,
    SessionCreated,
    SessionStatus,
)
from envharness.store.database import translate_sqlite_error

__all__ = ["MAX_BATCH_ROWS", "REQUEST_BUFFER", "Journal", "Pending"]

MAX_BATCH_ROWS = 4096
"""Upper bound on rows in one transaction, so one commit never holds the lock for long."""
REQUEST_BUFFER = 64
"""Append requests that may wait for the writer before producers block (back-pressure)."""

_created_decoder = msgspec.json.Decoder(SessionCreated)
_status_decoder = msgspec.json.Decoder(SessionStatus)
_experiment_decoder = msgspec.json.Decoder(ExperimentCreated)
_experiment_status_decoder = msgspec.json.Decoder(ExperimentStatus)
_segment_decoder = msgspec.json.Decoder(SegmentStarted)
_branch_decoder = msgspec.json.Decoder(Branch)
_optimizer_decoder = msgspec.json.Decoder(OptimizerStarted)
_optimizer_status_decoder = msgspec.json.Decoder(OptimizerStatus)
_accepted_decoder = msgspec.json.Decoder(OptimizerAccepted)
_encode = msgspec.json.Encoder().encode

_INSERT_RECORD = (
    "INSERT INTO records (session_id, seq, kind, turn, participant, at, payload, prev, digest)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)"


class _Request:
    __slots__ = ("blobs", "done", "error", "rows")

    def __init__(self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes]) -> None:
        self.rows = rows
        self.blobs = blobs
        self.done = anyio.Event()
        self.error: StoreError | None = None


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
        with anyio.CancelScope(shield=True):
            await self._request.done.wait()
        if self._request.error is not None:
            raise self._request.error


class Journal:
    """Owns the write connection; one per open store."""

    def __init__(self, connection: sqlite3.Connection, directory: Path) -> None:
        self._connection = connection
        self._directory = directory
        # Its own worker thread: commits never queue behind agents' threads.
        self._thread = anyio.CapacityLimiter(1)
        self._broken: dict[str, StoreError] = {}
        send, receive = anyio.create_memory_object_stream[_Request](REQUEST_BUFFER)
        self._send: MemoryObjectSendStream[_Request] = send
        self._receive: MemoryObjectReceiveStream[_Request] = receive

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
        request = _Request(rows, blobs or {})
        if not rows and not blobs:
            request.done.set()
            return Pending(request)
        try:
            await self._send.send(request)  # cancelled here, nothing was handed over
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise StoreError("the store is closed; open it again to write") from exc
        return Pending(request)

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
            async with self._receive:
                async for first in self._receive:
                    batch = [first]
                    size = len(first.rows)
                    while size < MAX_BATCH_ROWS:
                        try:
                            request = self._receive.receive_nowait()
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                        batch.append(request)
                        size += len(request.rows)
                    try:
                        await anyio.to_thread.run_sync(self._commit, batch, limiter=self._thread)
                    except Exception as exc:  # noqa: BLE001 - never leave a producer waiting
                        for request in batch:
                            request.error = request.error or StoreError(
                                f"the journal failed to commit: {exc!r}"
                            )
                    finally:
                        for request in batch:
                            request.done.set()

    # -- runs in a worker thread ---------------------------------------------------------------

    def _commit(self, batch: list[_Request]) -> None:
        live = [request for request in batch if not self._refused(request)]
        if not live:
            return
        try:
            self._transaction(live)
        except StoreError as exc:
            if len(live) == 1 or isinstance(exc, StoreBusyError):
                # A lock another process kept past the busy timeout fails the whole batch:
                # retrying request by request would wait out the timeout once per request.
                for request in live:
                    self._fail(request, exc)
                return
            # One bad request must not fail its neighbours: retry each on its own.
            for request in live:
                if self._refused(request):
                    continue
                try:
                    self._transaction([request])
                except StoreError as single:
                    self._fail(request, single)

    def _fail(self, request: _Request, error: StoreError) -> None:
        """A chain whose rows failed to commit has a gap from there on: nothing later of it
        may be written (a producer may have submitted more before it learned of the error)."""
        request.error = error
        if isinstance(error, ChainConflictError | NameTakenError):
            return  # the chain is intact: another writer holds those positions (or that name)
        for row in request.rows:
            self._broken.setdefault(row.session_id, error)

    def _refused(self, request: _Request) -> bool:
        for row in request.rows:
            cause = self._broken.get(row.session_id)
            if cause is not None:
                request.error = StoreError(
                    f"nothing more is written to {row.session_id}: an earlier commit of it "
                    f"failed ({cause}); reopen the store to recover and resume it"
                )
                return True
        return False

    def _transaction(self, batch: Iterable[_Request]) -> None:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            for request in batch:
                if request.blobs:
                    connection.executemany(_INSERT_BLOB, request.blobs.items())
                connection.executemany(_INSERT_RECORD, request.rows)
                _update_index(connection, request.rows)
            connection.execute("COMMIT")
        except (sqlite3.Error, msgspec.MsgspecError) as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise self._translate(exc) from exc

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


def _update_index(connection: sqlite3.Connection, rows: Sequence[RecordRow]) -> None:
    """Keep the ``sessions`` table (a derived index) in step with the records just inserted."""
    heads: dict[str, RecordRow] = {}
    turns: dict[str, int] = {}
    for row in rows:
        heads[row.session_id] = row
        if row.kind == "session.created":
            config = _created_decoder.decode(row.payload).config
            connection.execute(
                "INSERT INTO sessions (id, experiment_id, scenario_id, status, created_at,"
                " updated_at, head_seq, head_digest) VALUES (?, ?, ?, 'created', ?, ?, ?, ?)",
                (
                    row.session_id,
                    config.experiment_id,
                    config.scenario.id,
                    row.at,
                    row.at,
                    row.seq,
                    row.digest,
                ),
            )
        elif row.kind == "session.status":
            status = _status_decoder.decode(row.payload)
            connection.execute(
                "UPDATE sessions SET status = ?, reason = ? WHERE id = ?",
                (status.status, status.reason, row.session_id),
            )
        elif row.kind == "experiment.created":
            experiment = _experiment_decoder.decode(row.payload).config
            total = len(experiment.scenarios) * experiment.trials
            connection.execute(
                "INSERT INTO experiments (id, name, status, total, created_at, updated_at,"
                " head_seq, head_digest) VALUES (?, ?, 'created', ?, ?, ?, ?, ?)",
                (row.session_id, experiment.name, total, row.at, row.at, row.seq, row.digest),
            )
        elif row.kind == "experiment.status":
            change = _experiment_status_decoder.decode(row.payload)
            owner = _encode(change.runner).decode() if change.runner is not None else None
            connection.execute(
                "UPDATE experiments SET status = ?, reason = ?, owner = ? WHERE id = ?",
                (change.status, change.reason, owner, row.session_id),
            )
        elif row.kind == "segment.started":
            runner = _segment_decoder.decode(row.payload).runner
            if runner is not None:
                connection.execute(
                    "UPDATE sessions SET owner = ? WHERE id = ?",
                    (_encode(runner).decode(), row.session_id),
                )
        elif row.kind == "branch":
            branch = _branch_decoder.decode(row.payload)
            connection.execute(
                "UPDATE sessions SET parent_id = ?, parent_seq = ? WHERE id = ?",
                (branch.parent_session, branch.checkpoint_seq, row.session_id),
            )
        elif row.kind == "segment.ended":
            connection.execute("UPDATE sessions SET owner = NULL WHERE id = ?", (row.session_id,))
        elif row.kind == "outcome" and row.turn is not None:
            turns[row.session_id] = max(turns.get(row.session_id, 0), row.turn)
        elif row.kind.startswith("optimizer."):
            _index_optimizer(connection, row)
    for chain_id, head in heads.items():
        updated = connection.execute(
            "UPDATE sessions SET head_seq = ?, head_digest = ?, updated_at = ?,"
            " turns_completed = MAX(turns_completed, ?) WHERE id = ?",
            (head.seq, head.digest, head.at, turns.get(chain_id, 0), chain_id),
        )
        if updated.rowcount == 0:  # not a session: an experiment's chain
            updated = connection.execute(
                "UPDATE experiments SET head_seq = ?, head_digest = ?, updated_at = ? WHERE id = ?",
                (head.seq, head.digest, head.at, chain_id),
            )
        if updated.rowcount == 0:  # nor an experiment: an optimizer run's chain
            connection.execute(
                "UPDATE optimizer_runs SET head_seq = ?, head_digest = ?, updated_at = ?"
                " WHERE id = ?",
                (head.seq, head.digest, head.at, chain_id),
            )


def _index_optimizer(connection: sqlite3.Connection, row: RecordRow) -> None:
    """An optimizer run's chain: its index entry, its status, and the versions it accepted."""
    if row.kind == "optimizer.started":
        config = _optimizer_decoder.decode(row.payload).config
        connection.execute(
            "INSERT INTO optimizer_runs (id, name, status, created_at, updated_at, head_seq,"
            " head_digest) VALUES (?, ?, 'created', ?, ?, ?, ?)",
            (row.session_id, config.name, row.at, row.at, row.seq, row.digest),
        )
    elif row.kind == "optimizer.status":
        change = _optimizer_status_decoder.decode(row.payload)
        owner = _encode(change.runner).decode() if change.runner is not None else None
        connection.execute(
            "UPDATE optimizer_runs SET status = ?, reason = ?, owner = ? WHERE id = ?",
            (change.status, change.reason, owner, row.session_id),
        )
    elif row.kind == "optimizer.accepted":
        accepted = _accepted_decoder.decode(row.payload)
        connection.execute(
            "INSERT INTO harness_versions (version, run_id, seq, parent, digest, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (accepted.version, row.session_id, row.seq, accepted.parent, accepted.digest, row.at),
        )
