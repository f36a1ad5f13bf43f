"""After a crash, on any host: mark ``interrupted`` the chains whose runner is gone.

A chain still marked running (its index names an owner) is orphaned exactly when its owner lock
is free (:mod:`envharness.store.postgres.ownership`): the writer's connection tries each lock;
a taken lock means the runner's connection is gone, so the chain's interruption is appended —
by the same connection, which releases the lock once it has committed. A refused lock means the
runner lives, on this host or another, and its chain is left alone.

The records appended are the SQLite store's (:mod:`envharness.store.recovery`): a session gets
``session.status: interrupted`` and ``segment.ended``, an experiment or optimizer run its
status ``interrupted``; the reason names the runner as recorded.
"""

from __future__ import annotations

import functools

import msgspec

from envharness.errors import ChainConflictError
from envharness.records import RunnerRef
from envharness.store.owners import ENDED
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.driver import Connection
from envharness.store.postgres.writer import PostgresJournal
from envharness.store.recovery import Orphan, interruption_rows, orphan_of

__all__ = ["recover"]

_runner = msgspec.json.Decoder(RunnerRef)

_ENDED = ", ".join(f"'{name}'" for name in sorted(ENDED))
_OWNED = (
    "SELECT 'session', id, head_seq, head_digest, owner FROM sessions"
    f" WHERE owner IS NOT NULL AND status NOT IN ({_ENDED})"
    " UNION ALL SELECT 'experiment', id, head_seq, head_digest, owner FROM experiments"
    " WHERE owner IS NOT NULL AND status = 'running'"
    " UNION ALL SELECT 'optimizer', id, head_seq, head_digest, owner FROM optimizer_runs"
    " WHERE owner IS NOT NULL AND status = 'running'"
)
_LAST_PAYLOAD = (
    "SELECT payload FROM records WHERE session_id = %s AND kind = %s ORDER BY seq DESC LIMIT 1"
)


async def recover(journal: PostgresJournal, backend: PostgresBackend) -> int:
    """Mark every orphan interrupted; returns how many."""
    owned = await backend.read_native(lambda c: c.execute(_OWNED).fetchall())
    if not owned:
        return 0
    taken = await journal.claim({str(row[1]) for row in owned})
    marked = 0
    for kind, chain_id, head_seq, head_digest, owner in owned:
        if chain_id not in taken:
            continue  # its runner lives: never taken over
        found = (str(kind), str(chain_id), int(head_seq), str(head_digest), str(owner))
        orphan = await backend.read_native(functools.partial(_orphan, found=found))
        try:
            await journal.append(interruption_rows(orphan))
        except ChainConflictError:
            await journal.release({chain_id})
            continue  # its chain moved on meanwhile (another recovery, or its runner's end)
        marked += 1
    return marked


def _orphan(connection: Connection, *, found: tuple[str, str, int, str, str]) -> Orphan:
    kind, chain_id, head_seq, head_digest, owner = found

    def last_payload(chain_id: str, kind: str) -> bytes | None:
        last = connection.execute(_LAST_PAYLOAD, (chain_id, kind)).fetchone()
        return bytes(last[0]) if last else None

    return orphan_of(kind, chain_id, head_seq, head_digest, _runner.decode(owner), last_payload)
