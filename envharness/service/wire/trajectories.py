"""Wire types of trajectories, snapshots, datasets and sources in the service's API.

Like :mod:`.sessions`, these Structs are the single source of the OpenAPI schemas and what the
client decodes with. The trajectory contract itself (:class:`~envharness.trajectories.
Trajectory`, :class:`~envharness.trajectories.SnapshotMetadata`, :class:`~envharness.
trajectories.Dataset`) and the sources' health and receipts travel as they are; what is new
here is the summary a listing needs, the result of a digest check, and a participant's reduced
view (fields it may not see are ``null``, never left out, so one schema fits every role).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from envharness.store.sources import ImportReceipt, SourceHealth
from envharness.trajectories import Dataset, DatasetRow, Entitlement, SnapshotMetadata, Trajectory
from envharness.trajectories.model import (
    CollectionState,
    ExecutionState,
    Origin,
    SegmentCause,
    TerminationCause,
    VerificationState,
)
from envharness.trajectories.snapshots import RecordLine, SnapshotLine, TrajectoryLine
from envharness.trajectories.sources import SourceRecord

__all__ = [
    "DatasetDetail",
    "DatasetPage",
    "DatasetRequest",
    "DatasetRow",
    "EvidenceCheck",
    "ExportLineOut",
    "ImportReceipt",
    "SegmentOut",
    "SnapshotDetail",
    "SnapshotPage",
    "SnapshotRequest",
    "SourceHealth",
    "SourcePage",
    "SourceRecordLine",
    "TrajectoryDetail",
    "TrajectoryPage",
    "TrajectorySummary",
]


class TrajectorySummary(msgspec.Struct, frozen=True, kw_only=True):
    """One trajectory as a listing shows it: where it came from and its four states.

    For a participant token ``environment``, ``outcome``, ``passed``, ``verifier_version``,
    ``records`` and ``snapshots`` are null: they speak of every participant.
    """

    id: str
    """The trajectory's id: its session id (``ses_…``), or ``SOURCE:EPISODE`` when imported."""
    origin: Origin
    source: str | None
    """The source (``NAMESPACE/NAME``) of an imported trajectory."""
    session_id: str | None
    """The session of a native trajectory."""
    experiment_id: str | None
    scenario_id: str | None
    environment: str | None
    collection: CollectionState
    execution: ExecutionState
    status: str
    """The session (or episode) status the execution state was read from."""
    termination: TerminationCause
    outcome: VerificationState | None
    passed: bool | None
    verifier_version: str | None
    segments: int
    turns: int
    records: int | None
    started_at: str | None
    ended_at: str | None
    snapshots: list[str] | None
    """The snapshots that hold a trajectory of this session or episode."""


class TrajectoryPage(msgspec.Struct, frozen=True, kw_only=True):
    trajectories: list[TrajectorySummary]
    next_after: str | None
    """Pass as `after` for the next page; null on the last page."""


class SegmentOut(msgspec.Struct, frozen=True, kw_only=True):
    """A segment as this token may see it: a participant gets no seqs and no declared
    changes (they count and describe everyone's records)."""

    index: int
    cause: SegmentCause
    previous: int | None
    start_turn: int
    end_turn: int | None
    started_at: str
    ended_at: str | None
    status: str | None
    first_seq: int | None
    last_seq: int | None
    changes: list[str] | None


class EvidenceCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The digest check: the stored evidence re-read and compared with its binding.

    ``ok`` false names the first record at fault (``trajectory`` and ``seq``; ``seq`` is null
    when the fault is a snapshot's own content address) and the problem.
    """

    ok: bool
    records: int | None
    """Records re-read and recomputed (null for a snapshot's check)."""
    problem: str | None
    trajectory: str | None
    seq: int | None


class TrajectoryDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One trajectory: its summary, its segments, the whole projection and the digest check.

    ``trajectory`` and ``check`` are null for a participant token (the projection holds the
    scores, reasons and every participant's implementation), and ``check`` is null when the
    request asked for no check.
    """

    summary: TrajectorySummary
    segments: list[SegmentOut]
    trajectory: Trajectory | None
    check: EvidenceCheck | None


class SnapshotPage(msgspec.Struct, frozen=True, kw_only=True):
    snapshots: list[SnapshotMetadata]
    next_after: str | None


class SnapshotDetail(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot and a page of its trajectories, as frozen, in order.

    ``check`` is the snapshot's verification (content address, then each trajectory's digest
    binding) when asked for; ``next_after`` is the position to pass as `after`.
    """

    snapshot: SnapshotMetadata
    trajectories: list[TrajectorySummary]
    next_after: int | None
    datasets: list[str]
    """Names of the datasets made from it."""
    check: EvidenceCheck | None


class SnapshotRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to freeze: session ids (exact) and imported ``SOURCE:EPISODE`` ids, and/or every
    session of an experiment; a label and, optionally, the training entitlement."""

    sessions: Annotated[list[str], msgspec.Meta(max_length=10_000)] = []
    experiment: str | None = None
    label: Annotated[str, msgspec.Meta(max_length=200)] = ""
    entitlement: Entitlement | None = None


class DatasetPage(msgspec.Struct, frozen=True, kw_only=True):
    datasets: list[Dataset]
    next_after: str | None


class DatasetDetail(msgspec.Struct, frozen=True, kw_only=True):
    dataset: Dataset
    snapshots: list[SnapshotMetadata]


class DatasetRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    snapshots: Annotated[list[str], msgspec.Meta(min_length=1, max_length=1000)]
    """Snapshot ids, exact, in order."""
    reward: str | None = None
    """The score metric used as reward; null: a participant's only own metric, pass/fail, or
    the only metric."""
    participants: Annotated[list[str], msgspec.Meta(min_length=1, max_length=1000)] | None = None
    """Only these participants' rows; null: every participant's."""
    shared_reward: bool = False
    """One shared metric may be the reward of several participants' rows (a cooperative game)."""


class SourcePage(msgspec.Struct, frozen=True, kw_only=True):
    sources: list[SourceHealth]


class SourceRecordLine(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="source_record"
):
    """An imported record in a snapshot export: the import line exactly as the source's hash
    covers it (docs/imports.md), so the exported records import again."""

    record: SourceRecord


ExportLineOut = SnapshotLine | TrajectoryLine | RecordLine | SourceRecordLine
"""One line of a snapshot export."""
