"""Checkpoints, branches and comparisons.

A checkpoint is a record in a session's chain naming the state after a complete turn (by
digest: the state itself is already stored once). A branch is a new session that starts from a
checkpoint with a declared intervention, applied through ``Environment.intervene``; it records
its lineage (parent session, checkpoint seq and digest) instead of copying the parent's
history, so branching a 10,000-event session costs what branching a 10-event one does. Both
sessions then continue independently.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from envharness.contracts.environment import Environment
from envharness.errors import ConfigurationError
from envharness.records import (
    Branch,
    Checkpoint,
    Intervention,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    SessionCreated,
    SessionStatus,
    canonical,
    new_id,
)
from envharness.runtime.resume import find_resume_point, restore_state
from envharness.store import RecordFilter, Store
from envharness.store.locate import AnyStore

__all__ = ["CHECKPOINTABLE", "CheckpointRef", "branch", "list_checkpoints", "take_checkpoint"]

CHECKPOINTABLE = frozenset({"completed", "failed", "stopped", "interrupted", "paused"})


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """Where a checkpoint is: its store, session, record seq and digest, and its turn."""

    store: Path | str
    """A SQLite store's directory, or a PostgreSQL store's URL without its password."""
    session_id: str
    seq: int
    digest: str
    turn: int
    label: str


async def take_checkpoint(store: AnyStore, session_id: str, label: str | None) -> CheckpointRef:
    """Record a checkpoint at the session's last complete turn (not while it runs)."""
    point = await find_resume_point(store, session_id, CHECKPOINTABLE)
    info = await store.session(session_id)
    chain = SessionChain(info.id, next_seq=point.head_seq + 1, prev=point.head_digest)
    name = label or f"turn {point.turn}"
    hooked = point.config.harness_version is not None or point.memory.notebook_digest is not None
    row = chain.seal(
        Checkpoint(
            label=name,
            state=point.state_digest,
            notebook=point.notebook if hooked else None,
            turn=point.turn,
        )
    )
    await store.append([row])
    return CheckpointRef(_named(store), info.id, row.seq, row.digest, point.turn, name)


async def list_checkpoints(store: AnyStore, session_id: str) -> list[CheckpointRef]:
    """Every checkpoint recorded in the session, taken by hand or every N turns."""
    info = await store.session(session_id)
    return [
        CheckpointRef(
            _named(store), info.id, record.seq, record.digest, record.payload.turn,
            record.payload.label,
        )
        async for record in store.records(info.id, RecordFilter(kinds=("checkpoint",)))
        if isinstance(record.payload, Checkpoint)
    ]  # fmt: skip


async def branch(
    store: AnyStore,
    checkpoint: CheckpointRef,
    environment: Environment[Any, Any],
    intervention: Any,
    reason: str,
) -> str:
    """Create the branch session (``paused``, ready to continue); returns its id.

    An intervention the environment rejects is recorded on the parent's chain, and no branch
    is created.
    """
    if not isinstance(checkpoint, CheckpointRef):
        raise ConfigurationError(
            f"branch needs a checkpoint, not {type(checkpoint).__name__} {checkpoint!r}: take "
            "one with harness.checkpoint(session), or pick one of harness.checkpoints(session)"
        )
    found = [
        record
        async for record in store.records(
            checkpoint.session_id, RecordFilter(after=checkpoint.seq - 1, limit=1)
        )
    ]
    # The digest binds the checkpoint to this evidence: one from another store cannot match.
    if (
        not found
        or found[0].digest != checkpoint.digest
        or not isinstance(found[0].payload, Checkpoint)
    ):
        raise ConfigurationError(
            f"checkpoint {checkpoint.session_id}#{checkpoint.seq} is not in the store at "
            f"{store.backend.location!r}; branch from a checkpoint of this store"
        )
    taken: Checkpoint = found[0].payload
    created = [
        record
        async for record in store.records(
            checkpoint.session_id, RecordFilter(kinds=("session.created",), limit=1)
        )
    ]
    assert isinstance(created[0].payload, SessionCreated)
    config = created[0].payload.config
    state = restore_state(await store.blob(taken.state), environment.spec.state_type)
    try:
        changed = environment.intervene(state, intervention)
        if inspect.isawaitable(changed):  # an environment in another process
            changed = await changed
        data = canonical(changed)
    except Exception as exc:
        recorded = await _record_rejection(store, checkpoint.session_id, intervention, reason, exc)
        where = (
            f"recorded on {checkpoint.session_id}"
            if recorded
            else f"not recorded: {checkpoint.session_id} is running"
        )
        raise ConfigurationError(
            f"the environment rejected the intervention {intervention!r}: "
            f"{type(exc).__name__}: {exc} ({where}; no branch made)"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    child = SessionChain(new_id("ses"))
    branch_config = msgspec.structs.replace(config, experiment_id=None, trial=None)
    rows = [
        child.seal(SessionCreated(config=branch_config)),
        child.seal(
            Branch(
                parent_session=checkpoint.session_id,
                checkpoint_seq=checkpoint.seq,
                intervention=msgspec.to_builtins(intervention),
                reason=reason,
                checkpoint_digest=checkpoint.digest,
            )
        ),
        child.seal(
            Intervention(
                intervention=msgspec.to_builtins(intervention), reason=reason, state=digest
            )
        ),
        child.seal(SegmentStarted(segment=0, cause="branch", state=digest, turn=taken.turn)),
        child.seal(SessionStatus(status="paused", reason="branched: continue it to run turns")),
        child.seal(SegmentEnded(segment=0, status="paused")),
    ]
    await store.append(rows, {digest: data})
    return child.session_id


def _named(store: AnyStore) -> Path | str:
    """How a checkpoint names its store: a directory, or a database by a URL that holds no
    password (a reference is shown and kept; a password must not be)."""
    return store.directory if isinstance(store, Store) else str(store.where)


async def _record_rejection(
    store: AnyStore, session_id: str, intervention: Any, reason: str, exc: Exception
) -> bool:
    """Append the rejection to the parent's chain — unless a runner is extending that chain
    right now: only one writer may ever extend a chain."""
    info = await store.session(session_id)
    if info.status not in CHECKPOINTABLE:
        return False
    head = [r async for r in store.rows(info.id, RecordFilter(after=info.records - 2))]
    chain = SessionChain(info.id, next_seq=head[-1].seq + 1, prev=head[-1].digest)
    try:
        shown = msgspec.to_builtins(intervention)
    except TypeError:
        shown = repr(intervention)
    rejection = Intervention(
        intervention=shown, reason=reason, rejected=f"{type(exc).__name__}: {exc}"
    )
    await store.append([chain.seal(rejection)])
    return True
