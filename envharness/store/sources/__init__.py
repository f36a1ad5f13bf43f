"""Imported records: each external source's own hash chain, checked, stored whole or not at all.

A *source* is a namespaced feed (``acme/nightly-evals``) of records another tool produced. Each
source is one hash chain (:mod:`~envharness.store.sources.chain`), checked on the way in and
again by ``verify`` (:mod:`~envharness.store.sources.verify`); our session chains do not re-wrap
imported records (docs/architecture.md, "Imported records keep their own chain").

An import is a batch, stored whole in one transaction or refused whole
(:mod:`~envharness.store.sources.store`), checked on its way there in bounded memory
(:mod:`~envharness.store.sources.spool`); a refusal raises one of the errors of
:mod:`~envharness.store.sources.errors` and is noted in the import log, which health reads
(:mod:`~envharness.store.sources.reads`). Imported records and the import log are append-only,
like the journal. What imports, health and listings report is in
:mod:`~envharness.store.sources.reports`.
"""

from envharness.store.sources.chain import (
    CAPTURE_FAILED,
    KNOWN_SCHEMA_VERSIONS,
    SOURCE_SCHEMA_VERSION,
    BatchCheck,
    SourceRow,
    chain_problem,
    check_batch,
    check_source_id,
    source_hash_of,
)
from envharness.store.sources.errors import (
    ProblemKind,
    SourceChainError,
    SourceConflictError,
    SourceFormatError,
    SourceImportError,
)
from envharness.store.sources.reports import (
    EpisodeInfo,
    ImportBatch,
    ImportReceipt,
    SourceGap,
    SourceHealth,
    health_problems,
)
from envharness.store.sources.spool import RowSpool
from envharness.store.sources.store import SourcesAt, SourceStore, positions_of
from envharness.store.sources.verify import SourceBreak, verify_sources

__all__ = [
    "CAPTURE_FAILED",
    "KNOWN_SCHEMA_VERSIONS",
    "SOURCE_SCHEMA_VERSION",
    "BatchCheck",
    "EpisodeInfo",
    "ImportBatch",
    "ImportReceipt",
    "ProblemKind",
    "RowSpool",
    "SourceBreak",
    "SourceChainError",
    "SourceConflictError",
    "SourceFormatError",
    "SourceGap",
    "SourceHealth",
    "SourceImportError",
    "SourceRow",
    "SourceStore",
    "SourcesAt",
    "chain_problem",
    "check_batch",
    "check_source_id",
    "health_problems",
    "positions_of",
    "source_hash_of",
    "verify_sources",
]
