"""Who runs a chain, across hosts: a session-level advisory lock held by the runner's writer
connection for as long as the chain's index names an owner.

A pid and start time tell a dead runner only on its own host. Here the runner's one writer
connection holds ``pg_try_advisory_lock(owner_key(chain))`` from the batch that gives the chain
an owner (``segment.started`` with a runner, an experiment's or optimizer run's status with
one) until the batch that takes it away (``segment.ended``, a status without a runner) has
committed. Another runner's try is refused while that connection lives and succeeds once it is
gone — killed, crashed, or cut off for longer than TCP keepalive — with no lease and no clock.
Crash recovery marks ``interrupted`` only the chains whose lock it can take, so a live
runner's chain is never taken over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from envharness.records import ExperimentStatus, OptimizerStatus, RecordRow, SegmentStarted

__all__ = ["owner_changes", "owner_key"]

_segment = msgspec.json.Decoder(SegmentStarted)
_experiment_status = msgspec.json.Decoder(ExperimentStatus)
_optimizer_status = msgspec.json.Decoder(OptimizerStatus)


def owner_key(chain_id: str) -> int:
    """The chain's lock key: the first 64 bits of the sha256 of its id, as a signed bigint."""
    return int.from_bytes(hashlib.sha256(chain_id.encode()).digest()[:8], "big", signed=True)


def owner_changes(rows: Iterable[RecordRow]) -> tuple[set[str], dict[str, bool]]:
    """The chains these rows give an owner (each needs its lock before they are written), and
    each chain's owner state after them: ``True`` owned, ``False`` released — as the index
    update reads the same rows."""
    claimed: set[str] = set()
    after: dict[str, bool] = {}
    for row in rows:
        kind = row.kind
        if kind == "segment.started":
            if _segment.decode(row.payload).runner is None:
                continue  # the index keeps the owner it had
            owned = True
        elif kind == "segment.ended":
            owned = False
        elif kind == "experiment.status":
            owned = _experiment_status.decode(row.payload).runner is not None
        elif kind == "optimizer.status":
            owned = _optimizer_status.decode(row.payload).runner is not None
        else:
            continue
        if owned:
            claimed.add(row.session_id)
        after[row.session_id] = owned
    return claimed, after
