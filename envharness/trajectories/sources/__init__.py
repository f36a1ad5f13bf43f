"""Imported sources: other tools' hash-chained records, projected into the trajectory contract.

- :mod:`.format`: the import line (docs/imports.md) and :class:`SourceChain`, which seals one;
- :mod:`.kinds`: the record kinds that shape a trajectory (episode start and end, score,
  capture failure);
- :mod:`.otel`: the ``otel-genai`` importer (OpenTelemetry GenAI spans in OTLP JSON);
- :mod:`.importing`: importing a file or records as one all-or-nothing batch;
- :mod:`.projection`: one :class:`~envharness.trajectories.model.Trajectory` per episode;
- :mod:`.evidence`: reading an imported trajectory's records back, checked against its binding
  (the ``imported`` reader of :class:`~envharness.trajectories.binding.Evidence`).

The store side — the tables, the chain checks on the way in, health, ``verify`` — is
:mod:`envharness.store.sources`.
"""

from envharness.store.sources import (
    EpisodeInfo,
    ImportReceipt,
    SourceChainError,
    SourceConflictError,
    SourceFormatError,
    SourceGap,
    SourceHealth,
    SourceImportError,
    SourceRow,
)
from envharness.trajectories.sources.evidence import SourceEvidence, verify_imported
from envharness.trajectories.sources.format import (
    SourceChain,
    SourceRecord,
    encode_source_row,
    read_source_lines,
)
from envharness.trajectories.sources.importing import (
    FORMATS,
    Importer,
    import_file,
    import_lines,
    import_records,
    importer_for,
)
from envharness.trajectories.sources.projection import (
    SOURCE_DIGEST_ALGORITHM,
    project_episode,
    source_trajectories,
    split_trajectory_id,
    trajectory_id,
)

__all__ = [
    "FORMATS",
    "SOURCE_DIGEST_ALGORITHM",
    "EpisodeInfo",
    "ImportReceipt",
    "Importer",
    "SourceChain",
    "SourceChainError",
    "SourceEvidence",
    "SourceConflictError",
    "SourceFormatError",
    "SourceGap",
    "SourceHealth",
    "SourceImportError",
    "SourceRecord",
    "SourceRow",
    "encode_source_row",
    "import_file",
    "import_lines",
    "import_records",
    "importer_for",
    "project_episode",
    "read_source_lines",
    "source_trajectories",
    "split_trajectory_id",
    "trajectory_id",
    "verify_imported",
]
