"""The evidence store: SQLite journal (one group-committing writer), readers, artifacts, verify."""

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
