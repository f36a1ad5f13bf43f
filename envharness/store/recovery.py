"""After a crash: mark what a dead process left running as ``interrupted``, at once.

Called by every writer when it opens the store. A session, experiment or optimizer run still
marked running whose runner is certainly gone (:func:`envharness.store.owners.is_gone`) gets a
``session.status: interrupted`` and a ``segment.ended`` appended to its chain, so it can be
resumed. Every record that had been acknowledged stays as it was. Two processes recovering
the same session at once are safe: the second append conflicts and is ignored.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

from envharness.errors import ChainConflictError
from envharness.records import (
    ExperimentStatus,
    OptimizerStatus,
    RecordRow,
    RunnerRef,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionStatus,
)
from envharness.store.owners import interrupted_reason, is_gone
from envharness.store.reader import open_reader

__all__ = [
    "Orphan",
    "find_orphans",
    "interrupted_reason",
    "interruption_rows",
    "orphan_of",
    "recover",
]

_runner = msgspec.json.Decoder(RunnerRef)
_segment = msgspec.json.Decoder(SegmentStarted)
_experiment_status = msgspec.json.Decoder(ExperimentStatus)


@dataclass(frozen=True, slots=True)
class Orphan:
    """A chain left running by a process that is gone, with what is needed to extend it."""

    chain_id: str
    kind: str  # "session", "experiment" or "optimizer"
    head_seq: int
    head_digest: str
    runner: RunnerRef
    segment: int
    last_status: ExperimentStatus | None = None


def find_orphans(directory: Path) -> list[Orphan]:
    """Chains whose recorded runner certainly no longer runs (blocking; run in a thread)."""
    connection = open_reader(directory)
    try:
        last_payload = functools.partial(_last_payload, connection)
        return [
            orphan_of(kind, *owned, last_payload)
            for kind in ("session", "experiment", "optimizer")
            for owned in _owned_by_the_dead(connection, _OWNED[kind])
        ]
    finally:
        connection.close()


Append = Callable[[Sequence[RecordRow]], Awaitable[None]]


async def recover(append: Append, directory: Path) -> int:
    """Mark every orphan interrupted through the journal's ``append``; returns how many."""
    orphans = await anyio.to_thread.run_sync(find_orphans, directory)
    marked = 0
    for orphan in orphans:
        try:
            await append(interruption_rows(orphan))
        except ChainConflictError:
            continue  # another process recovered it first
        marked += 1
    return marked


def interruption_rows(orphan: Orphan) -> list[RecordRow]:
    """The records that end an orphan's chain: one rule for every engine's recovery."""
    chain = SessionChain(orphan.chain_id, next_seq=orphan.head_seq + 1, prev=orphan.head_digest)
    reason = interrupted_reason(orphan.runner)
    if orphan.kind == "session":
        return [
            chain.seal(SessionStatus(status="interrupted", reason=reason)),
            chain.seal(SegmentEnded(segment=orphan.segment, status="interrupted")),
        ]
    if orphan.kind == "optimizer":
        return [chain.seal(OptimizerStatus(status="interrupted", reason=reason))]
    last = orphan.last_status
    return [
        chain.seal(
            ExperimentStatus(
                status="interrupted",
                total=last.total if last else 0,
                completed=last.completed if last else 0,
                failed=last.failed if last else 0,
                stopped=last.stopped if last else 0,
                reason=reason,
            )
        )
    ]


LastPayload = Callable[[str, str], bytes | None]
"""The payload of a chain's newest record of a kind: ``last_payload(chain_id, kind)``."""


def orphan_of(
    kind: str,
    chain_id: str,
    head_seq: int,
    head_digest: str,
    runner: RunnerRef,
    last_payload: LastPayload,
) -> Orphan:
    """An orphaned chain with what its interruption needs: a session's segment, an
    experiment's last counts, read from its own records by ``last_payload``."""
    if kind == "session":
        last = last_payload(chain_id, "segment.started")
        segment = _segment.decode(last).segment if last else 0
        return Orphan(chain_id, kind, head_seq, head_digest, runner, segment)
    if kind == "experiment":
        last = last_payload(chain_id, "experiment.status")
        status = _experiment_status.decode(last) if last else None
        return Orphan(chain_id, kind, head_seq, head_digest, runner, 0, last_status=status)
    return Orphan(chain_id, kind, head_seq, head_digest, runner, 0)


_OWNED = {
    "experiment": "SELECT id, head_seq, head_digest, owner FROM experiments"
    " WHERE owner IS NOT NULL AND status = 'running'",
    "optimizer": "SELECT id, head_seq, head_digest, owner FROM optimizer_runs"
    " WHERE owner IS NOT NULL AND status = 'running'",
    "session": "SELECT id, head_seq, head_digest, owner FROM sessions WHERE owner IS NOT NULL"
    " AND status NOT IN ('completed', 'failed', 'stopped', 'interrupted')",
}


def _owned_by_the_dead(
    connection: sqlite3.Connection, query: str
) -> list[tuple[str, int, str, RunnerRef]]:
    """The index rows ``query`` selects whose recorded runner is certainly gone."""
    found = []
    for chain_id, head_seq, head_digest, owner in connection.execute(query).fetchall():
        runner = _runner.decode(owner)
        if is_gone(runner):
            found.append((chain_id, head_seq, head_digest, runner))
    return found


def _last_payload(connection: sqlite3.Connection, chain_id: str, kind: str) -> bytes | None:
    row = connection.execute(
        "SELECT payload FROM records WHERE session_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        (chain_id, kind),
    ).fetchone()
    return bytes(row[0]) if row else None
