"""The evidence store: SQLite journal (one group-committing writer), readers, artifacts, verify.

:mod:`.database` (tables, forward-only migrations, how a connection is opened),
:mod:`.connections`, :mod:`.journal` (the one writer), :mod:`.reader` (paged reads),
:mod:`.store` (``open_store`` / ``read_store``), :mod:`.artifacts`, :mod:`.lineage`,
:mod:`.snapshots` (frozen selections), :mod:`.tokens` (hashed service credentials),
:mod:`.optimizer_index`, :mod:`.owners` and :mod:`.recovery` (which process runs what, and
crash recovery), :mod:`.wal` (the write-ahead log checked before SQLite recovers it, and the
acknowledged high-water mark), :mod:`.damage` (a damaged database file told from a newer or
foreign one), :mod:`.verify`, and :mod:`.sources` (imported source chains).
"""

from envharness.store.database import SCHEMA_VERSION
from envharness.store.lineage import BranchRef, Lineage
from envharness.store.optimizer_index import HarnessVersionInfo, OptimizerRunInfo
from envharness.store.reader import (
    ExperimentInfo,
    ExperimentMember,
    RecordFilter,
    SessionCounts,
    SessionInfo,
)
from envharness.store.store import Store, open_store, read_store
from envharness.store.verify import ChainBreak, VerifyReport

__all__ = [
    "BranchRef",
    "Lineage",
    "SCHEMA_VERSION",
    "ChainBreak",
    "ExperimentInfo",
    "ExperimentMember",
    "HarnessVersionInfo",
    "OptimizerRunInfo",
    "RecordFilter",
    "SessionCounts",
    "SessionInfo",
    "Store",
    "VerifyReport",
    "open_store",
    "read_store",
]
