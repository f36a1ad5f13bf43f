"""After a crash: mark what a dead process left running as ``interrupted``, at once.

Called by every writer when it opens the store. A session, experiment or optimizer run still
marked running whose runner is certainly gone (:func:`envharness.store.owners.is_gone`) gets a
``session.status: interrupted`` and a ``segment.ended`` appended to its chain, so it can be
resumed. Every record that had been acknowledged stays as it was. Two processes recovering
the same session at once are safe: the second append conflicts and is ignored.
"""

from __future__ import annotations

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

__all__ = ["Orphan", "find_orphans", "interrupted_reason", "recover"]

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
        return [*_sessions(connection), *_experiments(connection), *_optimizer_runs(connection)]
    finally:
        connection.close()


Append = Callable[[Sequence[RecordRow]], Awaitable[None]]


async def recover(append: Append, directory: Path) -> int:
    """Mark every orphan interrupted through the journal's ``append``; returns how many."""
    orphans = await anyio.to_thread.run_sync(find_orphans, directory)
    marked = 0
    for orphan in orphans:
        chain = SessionChain(orphan.chain_id, next_seq=orphan.head_seq + 1, prev=orphan.head_digest)
        reason = interrupted_reason(orphan.runner)
        if orphan.kind == "session":
            rows = [
                chain.seal(SessionStatus(status="interrupted", reason=reason)),
                chain.seal(SegmentEnded(segment=orphan.segment, status="interrupted")),
            ]
        elif orphan.kind == "optimizer":
            rows = [chain.seal(OptimizerStatus(status="interrupted", reason=reason))]
        else:
            last = orphan.last_status
            rows = [
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
        try:
            await append(rows)
        except ChainConflictError:
            continue  # another process recovered it first
        marked += 1
    return marked


def _sessions(connection: sqlite3.Connection) -> list[Orphan]:
    found = []
    for chain_id, head_seq, head_digest, runner in _owned_by_the_dead(
        connection,
        "SELECT id, head_seq, head_digest, owner FROM sessions WHERE owner IS NOT NULL"
        " AND status NOT IN ('completed', 'failed', 'stopped', 'interrupted')",
    ):
        last = _last_payload(connection, chain_id, "segment.started")
        segment = _segment.decode(last).segment if last else 0
        found.append(Orphan(chain_id, "session", head_seq, head_digest, runner, segment))
    return found


def _experiments(connection: sqlite3.Connection) -> list[Orphan]:
    found = []
    for chain_id, head_seq, head_digest, runner in _owned_by_the_dead(
        connection,
        "SELECT id, head_seq, head_digest, owner FROM experiments"
        " WHERE owner IS NOT NULL AND status = 'running'",
    ):
        last = _last_payload(connection, chain_id, "experiment.status")
        status = _experiment_status.decode(last) if last else None
        found.append(
            Orphan(chain_id, "experiment", head_seq, head_digest, runner, 0, last_status=status)
        )
    return found


def _optimizer_runs(connection: sqlite3.Connection) -> list[Orphan]:
    return [
        Orphan(chain_id, "optimizer", head_seq, head_digest, runner, 0)
        for chain_id, head_seq, head_digest, runner in _owned_by_the_dead(
            connection,
            "SELECT id, head_seq, head_digest, owner FROM optimizer_runs"
            " WHERE owner IS NOT NULL AND status = 'running'",
        )
    ]


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
