"""Project sessions, freeze them into snapshots, and stream a snapshot out as JSON lines.

A snapshot is named by the sha256 of its content (:func:`envharness.store.snapshots.
content_address`): its header (:class:`SnapshotContent`: schema version, label, counts,
entitlement) and each trajectory's canonical bytes, in order. Trajectories are ordered by
session id and each session appears once, so the same selection frozen twice gets the same id.

The export is a stream of lines (``docs/trajectories.md``)::

    {"type":"snapshot","id":...,"created_at":...,"content":{...the hashed header...}}
    {"type":"trajectory","position":0,"trajectory":{...its hashed bytes...}}
    {"type":"record","record":{...the envelope, payload verbatim...}}
    ...

Header and trajectories are embedded as the exact bytes that were hashed, and records with
their payload bytes as digested, so a reader can recompute the snapshot id and every record's
digest from the file alone. Before the first line is written the whole snapshot is checked —
its content address and every trajectory's digest binding — so a tampered snapshot is refused
with the record named, and nothing is written. The records are read once, a page at a time,
and the checked lines wait in a spool (:mod:`~envharness.trajectories.spool`) until the last
check passes: memory stays constant.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing

import msgspec

from envharness.errors import ConfigurationError
from envharness.records import utc_now_text
from envharness.store.locate import AnyStore
from envharness.store.snapshots import (
    SNAPSHOT_PREFIX,
    ContentAddress,
    SnapshotStore,
    content_address,
)
from envharness.trajectories.binding import (
    EvidenceReader,
    EvidenceRow,
    check_evidence,
)
from envharness.trajectories.codec import (
    SnapshotContent,
    decode_content,
    decode_trajectory,
    encode,
    metadata_of,
)
from envharness.trajectories.errors import EvidenceMismatchError
from envharness.trajectories.model import (
    Entitlement,
    Snapshot,
    SnapshotMetadata,
    Trajectory,
)
from envharness.trajectories.projection import project_stream
from envharness.trajectories.readers import evidence_for
from envharness.trajectories.spool import LineSpool

__all__ = [
    "ExportLine",
    "ExportedRecord",
    "RecordLine",
    "SnapshotLine",
    "TrajectoryLine",
    "export_snapshot",
    "freeze",
    "freeze_trajectories",
    "list_snapshots",
    "load_snapshot",
    "project",
    "project_session",
    "snapshot_trajectories",
    "verify_snapshot",
]


# -- the export lines, as types (for the JSON Schema and for readers) ----------------------------


class ExportedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record as exported (docs/evidence.md): recompute ``digest`` from the other fields."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None
    digest: str


class SnapshotLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="snapshot"):
    id: str
    created_at: str
    content: SnapshotContent


class TrajectoryLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="trajectory"):
    position: int
    trajectory: Trajectory


class RecordLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="record"):
    record: ExportedRecord


ExportLine = SnapshotLine | TrajectoryLine | RecordLine

_plain = msgspec.json.Encoder()
_MAX_DECLARATION = 1000


# -- projecting and freezing ---------------------------------------------------------------------


async def project_session(store: AnyStore, session_id: str) -> Trajectory:
    """The trajectory of a session (``session_id`` may be a unique prefix), up to its head now."""
    info = await store.session(session_id)
    rows = store.rows(info.id)
    try:
        return await project_stream(info.id, rows)
    finally:
        await rows.aclose()


async def project(store: AnyStore, trajectory_id: str) -> Trajectory:
    """The trajectory of a session (id or unique prefix) or of an imported episode
    (``SOURCE:EPISODE``), up to its head now."""
    # Imported here, not at the top: the sources package builds on this module's neighbours.
    from envharness.trajectories.sources.projection import project_episode, split_trajectory_id

    if (imported := split_trajectory_id(trajectory_id)) is not None:
        return await project_episode(store.backend, *imported)
    return await project_session(store, trajectory_id)


async def freeze(
    store: AnyStore,
    selection: Iterable[str | Trajectory],
    *,
    label: str = "",
    entitlement: Entitlement | None = None,
) -> Snapshot:
    """Project the selected trajectories now and keep them as one snapshot (or find it kept).

    ``selection`` holds session ids (or unique prefixes), imported trajectory ids
    (``SOURCE:EPISODE``) and already projected :class:`Trajectory` values. Each appears once,
    ordered by id; a session still running is frozen as it is now (``partial``/``running``).
    """
    trajectories: dict[str, Trajectory] = {}
    for item in selection:
        trajectory = item if isinstance(item, Trajectory) else await project(store, item)
        trajectories[trajectory.session_id] = trajectory
    if not trajectories:
        raise ConfigurationError(
            "a snapshot needs at least one session (give session ids, or --experiment)"
        )
    return await freeze_trajectories(
        store, trajectories.values(), label=label, entitlement=entitlement
    )


async def freeze_trajectories(
    store: AnyStore,
    trajectories: Iterable[Trajectory],
    *,
    label: str = "",
    entitlement: Entitlement | None = None,
) -> Snapshot:
    """Keep already projected trajectories (native or imported) as one snapshot.

    Ordered by session id, one per session; an importer freezes its projections through this.
    """
    by_session: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        if trajectory.session_id in by_session:
            raise ConfigurationError(
                f"trajectory {trajectory.session_id} is given twice; a snapshot holds each once"
            )
        by_session[trajectory.session_id] = trajectory
    if not by_session:
        raise ConfigurationError("a snapshot needs at least one trajectory")
    if not isinstance(label, str) or not label.isprintable() or len(label) > 200:
        raise ConfigurationError(
            f"snapshot label {label!r} must be printable text of at most 200 characters"
        )
    if entitlement is not None:
        _check_entitlement(entitlement)
    ordered = [by_session[key] for key in sorted(by_session)]
    await _check_before_freezing(store, ordered)
    members = [(trajectory.session_id, encode(trajectory)) for trajectory in ordered]
    content = SnapshotContent(
        label=label,
        trajectories=len(ordered),
        records=sum(trajectory.journal.records for trajectory in ordered),
        entitlement=entitlement,
    )
    header = encode(content)
    snapshot_id = content_address(SNAPSHOT_PREFIX, header, (data for _, data in members))
    stored = await SnapshotStore(store.backend).put_snapshot(
        snapshot_id, header, members, utc_now_text()
    )
    return Snapshot(
        metadata=metadata_of(snapshot_id, content, stored.created_at),
        trajectories=tuple(ordered),
    )


async def _check_before_freezing(store: AnyStore, trajectories: Iterable[Trajectory]) -> None:
    """Refuse to freeze evidence that no longer matches its digests.

    A snapshot of altered records could be kept, but never exported, shown or trained on:
    every reader refuses it. Refusing here names the record while nothing is written yet.
    """
    reader = evidence_for(store)
    for trajectory in trajectories:
        try:
            await check_evidence(reader, trajectory)
        except EvidenceMismatchError as exc:
            raise EvidenceMismatchError(
                f"nothing was frozen: {exc}", session_id=exc.session_id, seq=exc.seq
            ) from None


def _check_entitlement(entitlement: Entitlement) -> None:
    """A declaration must say why: the command line and the API refuse a blank basis, and so
    does the Python API, which all three reach through here."""
    basis, declared_by = entitlement.basis, entitlement.declared_by
    if not isinstance(basis, str) or not basis.strip() or not basis.isprintable():
        raise ConfigurationError(
            f"entitlement basis {basis!r} must say, in printable text, why these trajectories "
            "may train models, e.g. 'own evaluation data'"
        )
    if not isinstance(declared_by, str) or not declared_by.isprintable():
        raise ConfigurationError(f"entitlement declared_by {declared_by!r} must be printable text")
    if len(basis) > _MAX_DECLARATION or len(declared_by) > _MAX_DECLARATION:
        raise ConfigurationError(
            f"an entitlement's basis and declared_by are at most {_MAX_DECLARATION} characters"
        )


# -- reading -------------------------------------------------------------------------------------


async def load_snapshot(store: AnyStore, snapshot_id: str) -> SnapshotMetadata:
    """A snapshot's metadata (``snapshot_id`` may be a unique prefix); not yet verified."""
    row = await SnapshotStore(store.backend).snapshot(snapshot_id)
    content = decode_content(row.header, what=f"snapshot {row.id}")
    return metadata_of(row.id, content, row.created_at)


async def list_snapshots(store: AnyStore) -> list[SnapshotMetadata]:
    rows = await SnapshotStore(store.backend).snapshots()
    return [
        metadata_of(row.id, decode_content(row.header, what=f"snapshot {row.id}"), row.created_at)
        for row in rows
    ]


async def snapshot_trajectories(
    store: AnyStore, snapshot_id: str
) -> AsyncGenerator[Trajectory, None]:
    """The snapshot's trajectories in order, decoded a page at a time (not verified)."""
    snapshots = SnapshotStore(store.backend)
    row = await snapshots.snapshot(snapshot_id)
    members = snapshots.members(row.id)
    try:
        async for member in members:
            yield decode_trajectory(
                member.trajectory, what=f"trajectory {member.session_id} of snapshot {row.id}"
            )
    finally:
        await members.aclose()


async def verify_snapshot(
    store: AnyStore, snapshot_id: str, reader: EvidenceReader | None = None
) -> SnapshotMetadata:
    """Check a snapshot: its id is the address of its stored bytes, each trajectory decodes,
    and each trajectory's journal range still matches its digest binding.

    Raises :class:`EvidenceMismatchError` naming the trajectory and record at fault.
    """
    reader = reader or evidence_for(store)
    snapshots = SnapshotStore(store.backend)
    row = await snapshots.snapshot(snapshot_id)
    content = decode_content(row.header, what=f"snapshot {row.id}")
    # First the content address (cheap: the trajectories' bytes), so an altered snapshot is
    # named as such; then each trajectory's evidence.
    await _check_content_address(snapshots, row.id, row.header, content.trajectories)
    async with aclosing(snapshots.members(row.id)) as members:
        async for member in members:
            trajectory = decode_trajectory(
                member.trajectory, what=f"trajectory {member.session_id} of snapshot {row.id}"
            )
            await check_evidence(reader, trajectory)
    return metadata_of(row.id, content, row.created_at)


async def _check_content_address(
    snapshots: SnapshotStore, snapshot_id: str, header: bytes, expected: int
) -> None:
    hasher = ContentAddress(SNAPSHOT_PREFIX, header)
    count = 0
    async with aclosing(snapshots.members(snapshot_id)) as members:
        async for member in members:
            count += 1
            hasher.add(member.trajectory)
    _check_address(snapshot_id, hasher, count, expected)


def _check_address(snapshot_id: str, hasher: ContentAddress, count: int, expected: int) -> None:
    if hasher.address() != snapshot_id or count != expected:
        raise EvidenceMismatchError(
            f"snapshot {snapshot_id}: its stored content no longer has its id (sha256 "
            f"{hasher.address()}, {count} of {expected} trajectories): it was altered",
            session_id="",
            seq=None,
        )


async def export_snapshot(
    store: AnyStore, snapshot_id: str, reader: EvidenceReader | None = None
) -> AsyncGenerator[bytes, None]:
    """The snapshot as JSON lines (each ending in ``\\n``), once the whole of it is checked.

    The checks are :func:`verify_snapshot`'s: the content address first (a pass over the
    trajectories alone), then every record's digest and chain up to each trajectory's bound
    head. The records are read once: each checked line is held in a :class:`LineSpool`
    (memory, then a temporary file) and the lines are written only after the last check, so
    a refusal writes nothing, and what is written is exactly what was checked.
    """
    reader = reader or evidence_for(store)
    snapshots = SnapshotStore(store.backend)
    row = await snapshots.snapshot(snapshot_id)
    content = decode_content(row.header, what=f"snapshot {row.id}")
    await _check_content_address(snapshots, row.id, row.header, content.trajectories)
    spool = LineSpool()
    try:
        # The trajectories held are hashed again: the address covers exactly what is written.
        hasher = ContentAddress(SNAPSHOT_PREFIX, row.header)
        count = 0
        async with aclosing(snapshots.members(row.id)) as members:
            async for member in members:
                count += 1
                hasher.add(member.trajectory)
                trajectory = decode_trajectory(
                    member.trajectory, what=f"trajectory {member.session_id} of snapshot {row.id}"
                )
                await spool.add(
                    b'{"type":"trajectory","position":%d,"trajectory":' % member.position
                    + member.trajectory
                    + b"}\n"
                )
                async with aclosing(_generator(reader, trajectory)) as rows:
                    async for record in rows:
                        await spool.add(record.line + b"\n")
        _check_address(row.id, hasher, count, content.trajectories)
        yield (
            b'{"type":"snapshot","id":'
            + _plain.encode(row.id)
            + b',"created_at":'
            + _plain.encode(row.created_at)
            + b',"content":'
            + row.header
            + b"}\n"
        )
        async with aclosing(spool.lines()) as lines:
            async for line in lines:
                yield line
    finally:
        spool.close()


async def _generator(
    reader: EvidenceReader, trajectory: Trajectory
) -> AsyncGenerator[EvidenceRow, None]:
    rows = reader.rows(trajectory)
    try:
        async for row in rows:
            yield row
    finally:
        aclose = getattr(rows, "aclose", None)
        if aclose is not None:
            await aclose()
