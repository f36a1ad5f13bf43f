"""Snapshots and datasets: content-addressed, append-only rows beside the journal.

They are not per-session chains, so nothing links them by ``prev``; instead each is named by
the sha256 of its own bytes (:func:`content_address`). The bytes are stored exactly as hashed,
so anyone can recompute the id from what is stored (or exported) and a changed byte shows.
Writing the same content again finds the same id and changes nothing; a different content under
an existing id cannot happen without a sha256 collision, and is refused. Triggers refuse every
``UPDATE`` and ``DELETE`` (migration 6).

This module knows bytes, not trajectories: ``envharness.trajectories`` encodes what is stored
here. Every call is one short transaction in a worker thread, through the store's backend
(SQLite's, or PostgreSQL's, whose callbacks take the same ``?`` statements): the SQL here is
what both engines run unchanged. Snapshot members are read a page at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from envharness.errors import ConfigurationError, NotFoundError, StoreError
from envharness.store.backend import SqliteBackend, backend_of
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.reader import PAGE_SIZE

__all__ = [
    "DATASET_PREFIX",
    "ContentAddress",
    "SNAPSHOT_PREFIX",
    "SnapshotRow",
    "SnapshotStore",
    "StoredDataset",
    "StoredMember",
    "content_address",
]

SNAPSHOT_PREFIX = "snp_"
DATASET_PREFIX = "dst_"

_SHORTEST_PREFIX = 8
"""The fewest characters of a snapshot id accepted as a prefix: ``snp_`` and four more."""

_T = TypeVar("_T")


def content_address(prefix: str, header: bytes, parts: Iterable[bytes] = ()) -> str:
    """``prefix`` + the sha256 of ``header``, then each part, each preceded by a newline.

    The same bytes always give the same address (:class:`ContentAddress` hashes as they
    stream).
    """
    address = ContentAddress(prefix, header)
    for part in parts:
        address.add(part)
    return address.address()


class ContentAddress:
    """:func:`content_address`, fed one part at a time (a snapshot checked as it is read)."""

    def __init__(self, prefix: str, header: bytes) -> None:
        self._prefix = prefix
        self._hasher = hashlib.sha256(header)

    def add(self, part: bytes) -> None:
        self._hasher.update(b"\n")
        self._hasher.update(part)

    def address(self) -> str:
        return self._prefix + self._hasher.hexdigest()


class SnapshotRow(NamedTuple):
    id: str
    header: bytes
    created_at: str


class StoredMember(NamedTuple):
    position: int
    session_id: str
    trajectory: bytes


class StoredDataset(NamedTuple):
    name: str
    id: str
    content: bytes
    created_at: str


class SnapshotStore:
    """The snapshots and datasets tables of one store."""

    def __init__(self, database: SqliteBackend | PostgresBackend | Path) -> None:
        self.backend: SqliteBackend | PostgresBackend = (
            database if isinstance(database, PostgresBackend) else backend_of(database)
        )

    # -- snapshots -----------------------------------------------------------------------------

    async def put_snapshot(
        self, snapshot_id: str, header: bytes, members: Sequence[tuple[str, bytes]], created_at: str
    ) -> SnapshotRow:
        """Keep a snapshot under its content address, or find it kept already.

        Refuses an id that is not the address of ``header`` and ``members``' bytes. Returns the
        stored row: when the snapshot existed, with its first ``created_at``.
        """
        expected = content_address(SNAPSHOT_PREFIX, header, (data for _, data in members))
        if snapshot_id != expected:
            raise StoreError(
                f"snapshot id {snapshot_id} is not the sha256 of its content ({expected}); "
                "a snapshot is named by its content"
            )

        def insert(connection: Any) -> SnapshotRow:
            # Inserted, or nothing when it is there: two runners freezing the same selection at
            # once on PostgreSQL then both find the first one's row, not a key violation.
            added = connection.execute(
                "INSERT INTO snapshots (id, header, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (snapshot_id, header, created_at),
            ).rowcount
            if added:  # one executemany: PostgreSQL pipelines it (1.6-1.8x at 1,000 members)
                connection.executemany(
                    "INSERT INTO snapshot_trajectories (snapshot_id, position, session_id,"
                    " trajectory) VALUES (?, ?, ?, ?)",
                    [
                        (snapshot_id, position, session_id, data)
                        for position, (session_id, data) in enumerate(members)
                    ],
                )
                return SnapshotRow(snapshot_id, header, created_at)
            found = connection.execute(
                "SELECT id, header, created_at FROM snapshots WHERE id = ?", (snapshot_id,)
            ).fetchone()
            if _bytes(found[1]) != header:
                raise StoreError(
                    f"snapshot {snapshot_id} exists with other content; snapshots are "
                    "immutable (the store may have been tampered with: run verify)"
                )
            return SnapshotRow(str(found[0]), _bytes(found[1]), str(found[2]))

        return await self._write(insert)

    async def snapshot(self, snapshot_id: str) -> SnapshotRow:
        """The snapshot with this id or a unique prefix of it; :class:`NotFoundError` if none."""
        if not snapshot_id.startswith(SNAPSHOT_PREFIX):
            raise ConfigurationError(
                f"{snapshot_id!r} is not a snapshot id: they start with {SNAPSHOT_PREFIX!r} "
                "(`envharness snapshot list` shows them; give at least 8 characters)"
            )
        if len(snapshot_id) < _SHORTEST_PREFIX:
            raise ConfigurationError(
                f"snapshot id prefix {snapshot_id!r} is too short: give at least "
                f"{_SHORTEST_PREFIX} characters ({SNAPSHOT_PREFIX!r} and "
                f"{_SHORTEST_PREFIX - len(SNAPSHOT_PREFIX)} more; `envharness snapshot list` "
                "shows the ids)"
            )
        query = (
            "SELECT id, header, created_at FROM snapshots"
            " WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 2"
        )  # the prefix's length as an argument: PostgreSQL cannot type length() of one
        arguments = (len(snapshot_id), snapshot_id)
        rows = await self._read(lambda c: c.execute(query, arguments).fetchall())
        if len(rows) > 1 and not any(row[0] == snapshot_id for row in rows):
            raise NotFoundError(f"snapshot id prefix {snapshot_id!r} is ambiguous; give more of it")
        if not rows:
            raise NotFoundError(
                f"no snapshot {snapshot_id!r} in the store at {self.backend.location!r}; "
                "`envharness snapshot list` shows them"
            )
        row = next((r for r in rows if r[0] == snapshot_id), rows[0])
        return SnapshotRow(str(row[0]), _bytes(row[1]), str(row[2]))

    async def snapshots(self) -> list[SnapshotRow]:
        """Every snapshot, oldest first."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT id, header, created_at FROM snapshots ORDER BY created_at, id"
            ).fetchall()
        )
        return [SnapshotRow(str(row[0]), _bytes(row[1]), str(row[2])) for row in rows]

    async def members(
        self, snapshot_id: str, page_size: int = PAGE_SIZE
    ) -> AsyncGenerator[StoredMember, None]:
        """The snapshot's trajectories in order, one short read transaction per page."""
        query = (
            "SELECT position, session_id, trajectory FROM snapshot_trajectories"
            " WHERE snapshot_id = ? AND position > ? ORDER BY position LIMIT ?"
        )
        after = -1
        while True:
            arguments = (snapshot_id, after, page_size)

            def fetch(c: Any, a: tuple[object, ...] = arguments) -> list[Any]:
                return list(c.execute(query, a).fetchall())

            page = await self._read(fetch)
            for row in page:
                yield StoredMember(int(row[0]), str(row[1]), _bytes(row[2]))
            if len(page) < page_size:
                return
            after = int(page[-1][0])

    async def snapshots_of(self, session_id: str) -> list[str]:
        """Ids of the snapshots that hold a trajectory of this session."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT DISTINCT snapshot_id FROM snapshot_trajectories WHERE session_id = ?"
                " ORDER BY snapshot_id",
                (session_id,),
            ).fetchall()
        )
        return [str(row[0]) for row in rows]

    async def snapshots_of_experiment(self, experiment_id: str) -> dict[str, int]:
        """The snapshots that hold a trajectory of one of this experiment's sessions, each with
        how many of them it holds: what was frozen from the experiment (one indexed query)."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT t.snapshot_id, COUNT(*) FROM snapshot_trajectories AS t"
                " JOIN sessions AS s ON s.id = t.session_id WHERE s.experiment_id = ?"
                " GROUP BY t.snapshot_id ORDER BY t.snapshot_id",
                (experiment_id,),
            ).fetchall()
        )
        return {str(row[0]): int(row[1]) for row in rows}

    # -- datasets ------------------------------------------------------------------------------

    async def put_dataset(
        self, name: str, dataset_id: str, content: bytes, created_at: str
    ) -> StoredDataset:
        """Keep a dataset under its name; the same content again changes nothing, other
        content under a taken name is refused."""
        expected = content_address(DATASET_PREFIX, content)
        if dataset_id != expected:
            raise StoreError(f"dataset id {dataset_id} is not the sha256 of its content")

        def insert(connection: Any) -> StoredDataset:
            added = connection.execute(
                "INSERT INTO datasets (name, id, content, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (name, dataset_id, content, created_at),
            ).rowcount
            if added:
                return StoredDataset(name, dataset_id, content, created_at)
            found = connection.execute(
                "SELECT name, id, content, created_at FROM datasets WHERE name = ?", (name,)
            ).fetchone()
            if found is None or found[1] != dataset_id:
                raise ConfigurationError(
                    f"dataset {name!r} already exists with other snapshots or settings "
                    f"({found[1] if found else dataset_id}); datasets are immutable: choose "
                    "another name"
                )
            return StoredDataset(str(found[0]), str(found[1]), _bytes(found[2]), str(found[3]))

        return await self._write(insert)

    async def dataset(self, name: str) -> StoredDataset:
        """The dataset with this id or name. An id (content-addressed, unique) wins over a
        name that happens to equal it (names starting ``dst_`` are refused since)."""
        rows = await self._read(
            lambda c: c.execute(
                "SELECT name, id, content, created_at FROM datasets WHERE name = ? OR id = ?"
                " ORDER BY id = ? DESC LIMIT 1",
                (name, name, name),
            ).fetchall()
        )
        if not rows:
            raise NotFoundError(
                f"no dataset {name!r} in the store at {self.backend.location!r}; "
                "`envharness dataset list` shows them"
            )
        row = rows[0]
        return StoredDataset(str(row[0]), str(row[1]), _bytes(row[2]), str(row[3]))

    async def datasets(self) -> list[StoredDataset]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT name, id, content, created_at FROM datasets ORDER BY created_at, name"
            ).fetchall()
        )
        return [StoredDataset(str(r[0]), str(r[1]), _bytes(r[2]), str(r[3])) for r in rows]

    # -- connections ---------------------------------------------------------------------------

    async def _read(self, work: Callable[[Any], _T]) -> _T:
        return await self.backend.read(work)

    async def _write(self, work: Callable[[Any], _T]) -> _T:
        return await self.backend.write(work)


def _bytes(value: object) -> bytes:
    """A stored BLOB; anything else (a tampered column) still hashes, and so fails the check."""
    if isinstance(value, bytes):
        return value
    return str(value).encode()
