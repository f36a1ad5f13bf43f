"""Snapshots and datasets moved from one store into another (``copy-store``), checked on the way.

A snapshot or dataset is named by the sha256 of its stored bytes, not linked by ``prev``, so
the copy checks what a reader would: each snapshot's address is recomputed over its header and
every trajectory in order, each dataset's over its content, before either is written. Two
columns sit outside the hash and are checked against the bytes they are derived from: a
member's ``session_id`` (what ``snapshots_of`` answers from) and a dataset's ``name``. The rows
are written unchanged, ``created_at`` included, so listings and exports on the destination are
byte for byte those of the source.

The copy is of the store as it was when the copy started. Runners may go on writing to the
source meanwhile, so what to copy is listed before anything else is read
(:func:`list_snapshots`): the datasets, then the snapshots — a dataset names only snapshots
made before it, so every listed dataset's snapshots are listed too — then, by the caller, the
chains, so every session a listed snapshot holds is among them. A snapshot or dataset made
after that is not copied. Each listed snapshot's trajectories must bind evidence the copy holds
(their session's chain, or their imported source): a snapshot is never copied without what it
binds, and one whose evidence the source lacks stops the copy.

Each snapshot is written in one transaction with all its trajectories, as freezing wrote it,
so a copy that stops leaves every snapshot whole or absent. That holds one snapshot in memory
at a time — what freezing it held.

Both ends are a store's backend, SQLite or PostgreSQL, through :class:`SnapshotStore`, whose
SQL both engines run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import aclosing
from typing import NamedTuple, NoReturn

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

__all__ = ["Bound", "Listed", "copy_snapshots", "list_snapshots"]

Backend = SqliteBackend | PostgresBackend


class Listed(NamedTuple):
    """What a copy moves of a store's snapshots and datasets: those there when it started."""

    snapshots: list[SnapshotRow]
    datasets: list[StoredDataset]


class Bound(NamedTuple):
    """The evidence already copied that a snapshot's trajectories may bind."""

    chains: Collection[str]
    """Ids of the copied chains (a native trajectory's ``journal.chain``)."""
    sources: Collection[str]
    """Names of the copied imported sources (an imported trajectory's ``journal.chain``)."""


class _Chain(msgspec.Struct):
    chain: str


class _Origin(msgspec.Struct):
    origin: str = "native"


class _Member(msgspec.Struct):
    """What a stored trajectory says about where it belongs: the session a column repeats
    outside the hash, and the evidence it binds."""

    session_id: str
    journal: _Chain | None = None
    provenance: _Origin | None = None


class _DatasetNames(msgspec.Struct):
    """What a dataset's content names: itself (a column repeats it) and its snapshots."""

    name: str
    snapshots: tuple[str, ...]


_member = msgspec.json.Decoder(_Member)
_dataset = msgspec.json.Decoder(_DatasetNames)


async def list_snapshots(source: Backend) -> Listed:
    """The snapshots and datasets of ``source`` now, oldest first; called before the chains
    are listed. Datasets first: a dataset made between the two reads would name a snapshot
    missing from the list, one made before them cannot."""
    reading = SnapshotStore(source)
    datasets = await reading.datasets()
    return Listed(await reading.snapshots(), datasets)


async def copy_snapshots(
    source: Backend,
    destination: Backend,
    listed: Listed,
    bound: Bound,
    on_snapshot: Callable[[str], None] | None = None,
) -> tuple[int, int]:
    """Copy the ``listed`` snapshots, then datasets, of ``source`` into ``destination``, which
    holds none (:func:`envharness.store.postgres.copy.refuse_non_empty` checked that before
    the chains were copied), after the evidence in ``bound``; returns how many of each. A
    :class:`StoreError` names the first that does not hold; what was written before it is
    whole."""
    reading, writing = SnapshotStore(source), SnapshotStore(destination)
    copied: set[str] = set()
    for row in listed.snapshots:
        members = await _checked_members(reading, row, bound, copied=len(copied))
        await writing.put_snapshot(row.id, row.header, members, row.created_at)
        copied.add(row.id)
        if on_snapshot is not None:
            on_snapshot(row.id)
    for number, dataset in enumerate(listed.datasets):
        await _check_dataset(reading, dataset, copied, number)
        await writing.put_dataset(dataset.name, dataset.id, dataset.content, dataset.created_at)
    return len(copied), len(listed.datasets)


async def _checked_members(
    snapshots: SnapshotStore, row: SnapshotRow, bound: Bound, *, copied: int
) -> list[tuple[str, bytes]]:
    """``row``'s trajectories in order, once they hash to its id, each one's ``session_id``
    column is the one in its bytes and the evidence each binds was copied."""
    address = ContentAddress(SNAPSHOT_PREFIX, row.header)
    members: list[tuple[str, bytes]] = []
    named_in_bytes: list[_Member | None] = []
    async with aclosing(snapshots.members(row.id)) as stored:
        async for member in stored:
            address.add(member.trajectory)
            if member.position != len(members):
                _refuse(row.id, f"its trajectory at position {len(members)} is missing", copied)
            named = _member_of(member.trajectory)
            if named is not None and named.session_id != member.session_id:
                problem = (
                    f"its trajectory at position {member.position} is of "
                    f"{named.session_id!r} but is filed under {member.session_id!r}"
                )
                _refuse(row.id, problem, copied)
            members.append((member.session_id, member.trajectory))
            named_in_bytes.append(named)
    if address.address() != row.id:
        problem = f"its stored content no longer has its id (sha256 {address.address()})"
        _refuse(row.id, problem, copied)
    for position, named in enumerate(named_in_bytes):
        _check_bound(row.id, position, named, bound, copied)
    return members


def _member_of(trajectory: bytes) -> _Member | None:
    """What a trajectory's bytes say about it; ``None`` when they do not decode (then they
    cannot hash to the id either, and that is the error reported)."""
    try:
        return _member.decode(trajectory)
    except msgspec.DecodeError:
        return None


def _check_bound(
    snapshot_id: str, position: int, member: _Member | None, bound: Bound, copied: int
) -> None:
    """The evidence a trajectory binds is in the destination: its session's chain, or its
    imported source (a trajectory without a journal range is taken as its session's)."""
    if member is None:
        return
    chain = member.journal.chain if member.journal is not None else member.session_id
    imported = member.provenance is not None and member.provenance.origin == "imported"
    kind, held = ("imported source", bound.sources) if imported else ("session", bound.chains)
    if chain not in held:
        raise StoreError(
            f"the source store's snapshot {snapshot_id}: its trajectory at position {position} "
            f"binds the {kind} {chain!r}, which the source does not hold; its evidence was "
            "removed after it was frozen: restore the source from a backup, then copy again "
            f"into a new, empty destination (every chain and imported source, and the {copied} "
            "snapshots before it, are whole in the destination)"
        )


async def _check_dataset(
    snapshots: SnapshotStore, dataset: StoredDataset, copied: set[str], number: int
) -> None:
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
    if not missing:
        return
    if not await _holds(snapshots, missing[0]):
        problem = f"it names snapshot {missing[0]}, which the source does not hold"
        _refuse_dataset(dataset, problem, number)
    raise StoreError(
        f"the source store's dataset {dataset.name!r} ({dataset.id}) names snapshot "
        f"{missing[0]}, made while copying: copy a store that nothing writes to (stop its "
        "runners first) into a new, empty destination (every chain, imported source and "
        f"snapshot, and the {number} datasets before it, are whole in the destination)"
    )


async def _holds(snapshots: SnapshotStore, snapshot_id: str) -> bool:
    """Whether the source holds this exact snapshot now (a prefix would not do)."""
    found = await snapshots.backend.read(
        lambda c: c.execute("SELECT 1 FROM snapshots WHERE id = ?", (snapshot_id,)).fetchone()
    )
    return found is not None


def _refuse(snapshot_id: str, problem: str, copied: int) -> NoReturn:
    raise StoreError(
        f"the source store's snapshot {snapshot_id}: {problem}; it was altered after it was "
        "frozen: restore the source from a backup, then copy again into a new, empty "
        f"destination (every chain and imported source, and the {copied} snapshots before "
        "it, are whole in the destination)"
    )


def _refuse_dataset(dataset: StoredDataset, problem: str, copied: int) -> NoReturn:
    raise StoreError(
        f"the source store's dataset {dataset.name!r} ({dataset.id}): {problem}; it was "
        "altered after it was made: restore the source from a backup, then copy again into a "
        "new, empty destination (every chain, imported source and snapshot, and the "
        f"{copied} datasets before it, are whole in the destination)"
    )
