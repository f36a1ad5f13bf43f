"""What the driver does when a worker dies with a session in it: retry it, or end it.

Every batch a worker sent either reached the driver whole (and is committed) or not at all, and
a batch holds whole turns, so the store holds the session up to a turn boundary. The driver
does what a resume after a crash does: it appends ``interrupted`` (naming the lost worker) and
sends the session to another worker, which goes on from the last committed turn in a new
segment — its number is the attempt's, its ``runner`` the new worker — or from the start when
nothing was committed. After :data:`MAX_ATTEMPTS` lost attempts the session ends ``failed``
with every reason. Nothing is written twice: the dead attempt's frames are never read again,
and a late batch of an attempt the driver has given up on is refused.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Sequence
from typing import cast

from envharness.errors import EnvharnessError, NotFoundError
from envharness.records import RunnerRef, SegmentEnded, SessionChain, SessionStatus, Status
from envharness.runtime.executors.frames import Resume, Run
from envharness.runtime.executors.seam import SessionWork
from envharness.runtime.plan import SessionResult
from envharness.runtime.resume import ResumePoint, find_resume_point
from envharness.store.locate import AnyStore

__all__ = [
    "MAX_ATTEMPTS",
    "NextAttempt",
    "WorkerError",
    "after_loss",
    "from_the_start",
    "resumed",
]

MAX_ATTEMPTS = 3
"""Attempts a session gets at most, each on a worker that was alive when it started."""

NextAttempt = Callable[[int], Run | Resume]
"""The frame that starts the next attempt, given its key."""

_UNENDED = frozenset({"running", "interrupted"})
"""A chain whose last status is ``running`` has not ended; the store shows it ``interrupted``
once the runner it names (the lost worker) is gone."""


class WorkerError(EnvharnessError):
    """A worker of a remote executor could not start, or died with sessions in it."""


def from_the_start(work: SessionWork, session_id: str | None = None) -> NextAttempt:
    """An attempt from the session's start (``session_id``: the id it had, if any)."""

    def attempt(key: int) -> Run:
        return Run(key, work.scenario, work.trial, work.seed, session_id)

    return attempt


async def after_loss(
    store: AnyStore,
    work: SessionWork,
    session_id: str | None,
    reasons: Sequence[str],
    changes: Sequence[str] = (),
    *,
    lost: RunnerRef | None = None,
) -> SessionResult | NextAttempt:
    """The session's result when the lost attempt was its last (or its end was committed
    already), else how to start the next attempt. ``reasons`` says why each attempt was lost;
    ``lost`` is the worker the driver lost it with, which the driver knows is gone even where
    nothing on this machine can tell (a worker on another host)."""
    final = len(reasons) >= MAX_ATTEMPTS
    why = f"its worker was lost {len(reasons)} times: {'; '.join(reasons)}"
    info = None
    if session_id is not None:
        try:
            info = await store.session(session_id)
        except NotFoundError:  # it committed nothing
            info = None
    if info is None:
        if final:
            raise WorkerError(f"session {session_id or '(not yet named)'}: {why}")
        return from_the_start(work, session_id)
    if info.status not in _UNENDED:  # it ended, and only the word of it was lost
        return SessionResult(
            id=info.id,
            status=cast(Status, info.status),
            turns_completed=info.turns_completed,
            reason=info.reason,
        )
    point = await find_resume_point(store, info.id, _UNENDED, gone=lost)
    chain = SessionChain(info.id, next_seq=point.head_seq + 1, prev=point.head_digest)
    status: Status = "failed" if final else "interrupted"
    reason = why if final else reasons[-1]
    rows = [
        chain.seal(SessionStatus(status=status, reason=reason)),
        chain.seal(SegmentEnded(segment=point.segment, status=status)),
    ]
    await store.append(rows)
    if final:
        return SessionResult(id=info.id, status="failed", turns_completed=point.turn, reason=reason)
    point = dataclasses.replace(point, head_seq=rows[-1].seq, head_digest=rows[-1].digest)
    return await resumed(store, work, info.id, point, changes)


async def resumed(
    store: AnyStore,
    work: SessionWork,
    session_id: str,
    point: ResumePoint,
    changes: Sequence[str] = (),
) -> NextAttempt:
    """An attempt that goes on from ``point`` (read from ``store``), in a new segment."""
    state = await store.blob(point.state_digest)
    data = pickle.dumps(point, protocol=pickle.HIGHEST_PROTOCOL)

    def attempt(key: int) -> Resume:
        return Resume(
            key, work.scenario, work.trial, work.seed, session_id, data, state, list(changes)
        )

    return attempt
