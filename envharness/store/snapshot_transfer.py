"""Snapshots and datasets moved from one store into another (``copy-store``), checked on the way.

A snapshot or dataset is named by the sha256 of its stored bytes, not linked by ``prev``, so
the copy checks what a reader would: each snapshot's address is recomputed over its header and
every trajectory in order, each dataset's over its content, before either is written. Two
columns sit outside the hash and are checked against the bytes they are derived from: a
member's ``session_id`` (what ``snapshots_of`` answers from) and a dataset's ``name``. A
dataset's snapshots must have been copied before it, so a dataset never names a snapshot the
destination lacks. The rows are written unchanged, ``created_at`` included, so listings and
exports on the destination are byte for byte those of the source.

Each snapshot is written in one transaction with all its trajectories, as freezing wrote it,
so a copy that stops leaves every snapshot whole or absent. That holds one snapshot in memory
at a time — what freezing it held. The evidence a trajectory binds (its session's records, or
an imported source's) is copied, and checked record by record, before any snapshot.

Both ends are a store's backend, SQLite or PostgreSQL, through :class:`SnapshotStore`, whose
SQL both engines run.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, NoReturn

import msgspec

from envharness.errors import StoreError
from envharness.store.backend import SqliteBackend
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.snapshots import (
    DATASET_PREFIX,
    SNAPSHOT_PREFIX,
    ContentAddress,
    SnapshotRow,
    SnapshotStore,
    StoredDataset,
    content_address,
)

__all__ = ["copy_snapshots", "refuse_held_snapshots"]

Backend = SqliteBackend | PostgresBackend


class _Member(msgspec.Struct):
    """The one field of a stored trajectory that a column repeats outside the hash."""

    session_id: str


class _DatasetNames(msgspec.Struct):
    """What a dataset's content names: itself (a column repeats it) and its snapshots."""

    name: str
    snapshots: tuple[str, ...]


_member = msgspec.json.Decoder(_Member)
_dataset = msgspec.json.Decoder(_DatasetNames)


async def copy_snapshots(source: Backend, destination: Backend) -> tuple[int, int]:
    """Copy every snapshot, then every dataset, of ``source`` into ``destination``, which must
    hold none, oldest first; returns how many of each. A :class:`StoreError` names the first
    that does not hold its address; what was written before it is whole."""
    await refuse_held_snapshots(destination)
    reading, writing = SnapshotStore(source), SnapshotStore(destination)
    copied: set[str] = set()
    for row in await reading.snapshots():
        members = await _checked_members(reading, row, copied=len(copied))
        await writing.put_snapshot(row.id, row.header, members, row.created_at)
        copied.add(row.id)
    datasets = await reading.datasets()
    for number, dataset in enumerate(datasets):
        _check_dataset(dataset, copied, number)
        await writing.put_dataset(dataset.name, dataset.id, dataset.content, dataset.created_at)
    return len(copied), len(datasets)


async def refuse_held_snapshots(destination: Backend) -> None:
    """Refuse a destination that already holds snapshots or datasets (before anything is
    copied: a dataset of the same name with other content could not be copied beside it)."""
    held = await destination.read(_counts)
    if held != (0, 0):
        raise StoreError(
            f"the destination store already holds {held[0]} snapshots and {held[1]} datasets; "
            "copy into a new, empty store (nothing was written to it)"
        )


def _counts(connection: Any) -> tuple[int, int]:
    found = connection.execute(
        "SELECT (SELECT COUNT(*) FROM snapshots), (SELECT COUNT(*) FROM datasets)"
    ).fetchone()
    return int(found[0]), int(found[1])


async def _checked_members(
    snapshots: SnapshotStore, row: SnapshotRow, *, copied: int
) -> list[tuple[str, bytes]]:
    """``row``'s trajectories in order, once they hash to its id and each one's ``session_id``
    column is the one in its bytes."""
    address = ContentAddress(SNAPSHOT_PREFIX, row.header)
    members: list[tuple[str, bytes]] = []
    async with aclosing(snapshots.members(row.id)) as stored:
        async for member in stored:
            address.add(member.trajectory)
            if member.position != len(members):
                _refuse(row.id, f"its trajectory at position {len(members)} is missing", copied)
            named = _session_of(member.trajectory)
            if named is not None and named != member.session_id:
                problem = (
                    f"its trajectory at position {member.position} is of {named!r} but is "
                    f"filed under {member.session_id!r}"
                )
                _refuse(row.id, problem, copied)
            members.append((member.session_id, member.trajectory))
    if address.address() != row.id:
        problem = f"its stored content no longer has its id (sha256 {address.address()})"
        _refuse(row.id, problem, copied)
    return members


def _session_of(trajectory: bytes) -> str | None:
    """The session id a trajectory's bytes name; ``None`` when they do not decode (then they
    cannot hash to the id either, and that is the error reported)."""
    try:
        return _member.decode(trajectory).session_id
    except msgspec.DecodeError:
        return None


def _check_dataset(dataset: StoredDataset, copied: set[str], number: int) -> None:
    if content_address(DATASET_PREFIX, dataset.content) != dataset.id:
        _refuse_dataset(dataset, "its stored content no longer has its id", number)
    try:
        names = _dataset.decode(dataset.content)
    except msgspec.DecodeError as exc:
        _refuse_dataset(dataset, f"its content does not decode ({exc})", number)
    if names.name != dataset.name:
        problem = f"it is filed under {dataset.name!r} but its content names {names.name!r}"
        _refuse_dataset(dataset, problem, number)
    missing = [snapshot_id for snapshot_id in names.snapshots if snapshot_id not in copied]
    if missing:
        problem = f"it names snapshot {missing[0]}, which the source does not hold"
        _refuse_dataset(dataset, problem, number)


def _refuse(snapshot_id: str, problem: str, copied: int) -> NoReturn:
    raise StoreError(
        f"the source store's snapshot {snapshot_id}: {problem}; it was altered after it was "
        "frozen: restore the source from a backup, then copy again (every chain and imported "
        f"source, and the {copied} snapshots before it, are whole in the destination)"
    )


def _refuse_dataset(dataset: StoredDataset, problem: str, copied: int) -> NoReturn:
    raise StoreError(
        f"the source store's dataset {dataset.name!r} ({dataset.id}): {problem}; it was "
        "altered after it was made: restore the source from a backup, then copy again (every "
        f"chain, imported source and snapshot, and the {copied} datasets before it, are whole "
        "in the destination)"
    )
