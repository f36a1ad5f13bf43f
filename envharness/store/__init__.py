"""The evidence store: SQLite journal (one group-committing writer), readers, artifacts, verify."""

from envharness.store.reader import RecordFilter, SessionInfo
from envharness.store.schema import SCHEMA_VERSION
from envharness.store.store import Store, open_store, read_store
from envharness.store.verify import ChainBreak, VerifyReport

__all__ = [
    "SCHEMA_VERSION",
    "ChainBreak",
    "RecordFilter",
    "SessionInfo",
    "Store",
    "VerifyReport",
    "open_store",
    "read_store",
]
