"""Whether a chain's runner still lives, as a reader sees it: its owner lock is held.

The SQLite store shows a chain still marked running as ``interrupted`` once its runner's pid is
gone (:func:`envharness.store.owners.shown_status`), which only a reader on the runner's own host
can tell. Here the owner lock answers for every host: a reader looks at the server's lock table
(``pg_locks``, readable by any role) without taking any lock or writing anything, and a chain
whose lock no connection holds is shown as crash recovery will record it.
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.store.postgres.driver import Connection
from envharness.store.postgres.ownership import owner_key

__all__ = ["HELD_KEYS", "owners_gone"]

HELD_KEYS = (
    "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks"
    " WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""The keys of the owner locks held in this database, each as a signed bigint."""


def owners_gone(connection: Connection, rows: Sequence[Sequence[object]]) -> list[dict[str, bool]]:
    """For each of ``rows`` (a chain's id first, its owner's JSON last): the ``gone`` map that
    :func:`~envharness.store.reader.session_info` takes, saying whether that chain's runner is
    gone — its owner lock is not held. Per chain, not per runner: one process may write through
    several connections (two open stores), each holding the locks of its own chains."""
    if not any(isinstance(row[-1], str) for row in rows):
        return [{} for _ in rows]
    held = {_signed(int(key)) for (key,) in connection.execute(HELD_KEYS).fetchall()}
    return [
        {row[-1]: owner_key(str(row[0])) not in held} if isinstance(row[-1], str) else {}
        for row in rows
    ]


def _signed(key: int) -> int:
    """The lock table's two unsigned 32-bit halves as the signed key ``owner_key`` gives."""
    return key - (1 << 64) if key >= 1 << 63 else key
