"""Trajectories: portable, digest-bound projections of journals, snapshots and datasets.

``model`` is the contract (``docs/trajectories.md``); the projection reads the journal and never
writes to it. Imported sources (``envharness.trajectories.sources``) project into the same
contract, marked by their provenance.

In layer order (``tests/test_layers.py``): :mod:`.errors` and :mod:`.model` (the contract);
:mod:`.binding` (a trajectory bound to its evidence, checked as it is read), :mod:`.codec`
(snapshot files) and :mod:`.projection` (journal to trajectory); :mod:`.sources` (imported
feeds); :mod:`.readers` (the default evidence reader, joining native and imported);
:mod:`.snapshots`; :mod:`.datasets` and :mod:`.json_schema` (the published JSON Schema);
:mod:`.files` (Parquet and ``datasets.Dataset`` output) and :mod:`.trainer`.
"""

from envharness.trajectories.binding import (
    ChainReader,
    Evidence,
    EvidenceReader,
    EvidenceRow,
    JournalEvidence,
    RangeCheck,
    StoreChains,
    check_evidence,
)
from envharness.trajectories.codec import SnapshotContent, decode_trajectory
from envharness.trajectories.datasets import (
    Dataset,
    DatasetRow,
    Message,
    admission_refusals,
    create_dataset,
    dataset_rows,
    list_datasets,
    load_dataset,
    reward_of,
)
from envharness.trajectories.errors import (
    AdmissionError,
    EvidenceMismatchError,
    Refusal,
    SchemaVersionError,
    TrajectoryError,
)
from envharness.trajectories.model import (
    DIGEST_ALGORITHM,
    SCHEMA_VERSION,
    CollectionState,
    CollectionStatus,
    Entitlement,
    ExecutionState,
    ExecutionStatus,
    Gap,
    JournalRange,
    Origin,
    Provenance,
    RewardChain,
    Segment,
    SegmentCause,
    Snapshot,
    SnapshotMetadata,
    Termination,
    TerminationCause,
    Trajectory,
    VerificationState,
    VerifiedOutcome,
)
from envharness.trajectories.projection import Projector, project_rows, project_stream
from envharness.trajectories.readers import evidence_for
from envharness.trajectories.snapshots import (
    ExportLine,
    export_snapshot,
    freeze,
    freeze_trajectories,
    list_snapshots,
    load_snapshot,
    project,
    project_session,
    snapshot_trajectories,
    verify_snapshot,
)
from envharness.trajectories.sources import (
    ImportReceipt,
    SourceChain,
    SourceChainError,
    SourceConflictError,
    SourceEvidence,
    SourceFormatError,
    SourceHealth,
    SourceImportError,
    import_file,
    import_records,
    project_episode,
    source_trajectories,
    verify_imported,
)
from envharness.trajectories.trainer import Trainer

__all__ = [
    "DIGEST_ALGORITHM",
    "SCHEMA_VERSION",
    "AdmissionError",
    "ChainReader",
    "Evidence",
    "EvidenceReader",
    "EvidenceRow",
    "JournalEvidence",
    "CollectionState",
    "CollectionStatus",
    "Dataset",
    "DatasetRow",
    "Entitlement",
    "EvidenceMismatchError",
    "ExecutionState",
    "ExecutionStatus",
    "ExportLine",
    "Gap",
    "JournalRange",
    "Message",
    "Origin",
    "Projector",
    "Provenance",
    "RangeCheck",
    "Refusal",
    "RewardChain",
    "SchemaVersionError",
    "Segment",
    "SegmentCause",
    "Snapshot",
    "SnapshotContent",
    "SnapshotMetadata",
    "StoreChains",
    "Termination",
    "TerminationCause",
    "Trainer",
    "Trajectory",
    "TrajectoryError",
    "VerificationState",
    "VerifiedOutcome",
    "admission_refusals",
    "check_evidence",
    "create_dataset",
    "dataset_rows",
    "evidence_for",
    "decode_trajectory",
    "export_snapshot",
    "freeze",
    "freeze_trajectories",
    "list_datasets",
    "list_snapshots",
    "load_dataset",
    "load_snapshot",
    "project",
    "project_rows",
    "project_session",
    "project_stream",
    "reward_of",
    "snapshot_trajectories",
    "verify_snapshot",
    # imported sources (envharness.trajectories.sources, docs/imports.md)
    "ImportReceipt",
    "SourceChain",
    "SourceChainError",
    "SourceConflictError",
    "SourceEvidence",
    "SourceFormatError",
    "SourceHealth",
    "SourceImportError",
    "import_file",
    "import_records",
    "project_episode",
    "source_trajectories",
    "verify_imported",
]
