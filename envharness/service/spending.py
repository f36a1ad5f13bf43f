"""What was spent, as one principal may know it: the cost totals of the viewer and the API.

The figures are those ``envharness experiments show`` prints
(:func:`envharness.scoring.experiment_report`): the ``cost`` records summed by
:class:`~envharness.scoring.aggregates.CostTally`; a session's wall time from its segments (one
that recorded no end ran until the session last wrote); an experiment's from the spans its own
chain records it ``running``. The tests hold both to the same numbers.

A cost record carries the participant who spent it. For a participant token the totals are
its own calls, read with the participant filter in their SQL like every record it reads
(:meth:`~envharness.service.access.Access.records`); segments and the experiment's status
records are about everyone, so it gets no wall time. Nothing is cached: a page shows what was
spent when it was rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime

from envharness.contracts.budget import SegmentClock
from envharness.records import (
    Cost,
    ExperimentStatus,
    RecordRow,
    SegmentEnded,
    SegmentStarted,
    decode_payload,
)
from envharness.runtime.budgets import BUDGET_PREFIX
from envharness.scoring.aggregates import CostTally, CostTotals
from envharness.service.access import Access
from envharness.service.wire.sessions import CostsOut
from envharness.store import RecordFilter, SessionInfo

__all__ = [
    "ExperimentSpent",
    "SessionSpent",
    "costs_out",
    "experiment_spent",
    "session_spent",
    "stopped_by_budget",
]

_SESSION_KINDS = ("cost", "segment.started", "segment.ended")
_EXPERIMENT_KINDS = (*_SESSION_KINDS, "experiment.status")


def stopped_by_budget(status: str, reason: str | None) -> bool:
    """Whether a session or experiment ended because what it spent reached its budget."""
    return status == "stopped" and (reason or "").startswith(BUDGET_PREFIX)


def costs_out(totals: CostTotals, *, wall: bool) -> CostsOut:
    """``totals`` on the wire; without ``wall``, its wall time withheld (null)."""
    return CostsOut(
        calls=totals.calls,
        priced=totals.priced,
        input_tokens=totals.input_tokens,
        output_tokens=totals.output_tokens,
        usd=totals.usd,
        seconds=totals.seconds,
        wall_seconds=totals.wall_seconds if wall else None,
    )


@dataclass(frozen=True, slots=True)
class SessionSpent:
    """A session's totals, and each participant's part of them (in the order they first
    spent; a participant token's has only its own)."""

    total: CostsOut
    participants: dict[str, CostsOut]


@dataclass(frozen=True, slots=True)
class ExperimentSpent:
    """An experiment's totals, and each session's (by id, in the order they were given)."""

    total: CostsOut
    sessions: dict[str, CostsOut]

    def most_expensive(self) -> list[tuple[str, CostsOut]]:
        """The sessions by money spent, then tokens, as ``experiments show`` ranks them: those
        that cost the same keep the order they were given in."""

        def rank(item: tuple[str, CostsOut]) -> tuple[float, int]:
            return (-item[1].usd, -item[1].tokens)

        return sorted(self.sessions.items(), key=rank)


@dataclass(slots=True)
class _Meter:
    """One session's costs as its records are read, and when its open segment began."""

    tally: CostTally = field(default_factory=CostTally)
    participants: dict[str, CostTally] = field(default_factory=dict)
    clock: SegmentClock = field(default_factory=SegmentClock)

    def read(self, row: RecordRow) -> None:
        payload = decode_payload(row.payload)
        if isinstance(payload, Cost):
            self.tally.add(payload)
            if row.participant is not None:
                self.participants.setdefault(row.participant, CostTally()).add(payload)
        elif isinstance(payload, SegmentStarted | SegmentEnded):
            self.clock.saw(row.kind, datetime.fromisoformat(row.at))

    def close(self, at: str) -> None:
        """The session last wrote at ``at``: a segment still open ran until then."""
        self.tally.wall_seconds += self.clock.seconds(until=datetime.fromisoformat(at))


async def _metered(access: Access, info: SessionInfo) -> _Meter:
    """One session's records that count, as ``access`` may read them."""
    kinds = _SESSION_KINDS if access.sees_everything else ("cost",)
    meter = _Meter()
    selection = access.records(RecordFilter(kinds=kinds))
    async with aclosing(access.service.store.rows(info.id, selection)) as rows:
        async for row in rows:
            meter.read(row)
    meter.close(info.updated_at)  # a segment still running, or one that crashed
    return meter


async def session_spent(access: Access, info: SessionInfo) -> SessionSpent:
    """What the session ``info`` (one ``access`` may see) spent, as ``access`` may know it."""
    meter = await _metered(access, info)
    wall = access.sees_everything
    return SessionSpent(
        total=costs_out(meter.tally.totals(), wall=wall),
        participants={
            name: costs_out(tally.totals(), wall=False)
            for name, tally in meter.participants.items()
        },
    )


async def experiment_spent(
    access: Access, experiment_id: str, sessions: Sequence[SessionInfo]
) -> ExperimentSpent:
    """What the experiment and each of ``sessions`` (its sessions that ``access`` may see)
    spent, as ``access`` may know it."""
    if access.sees_everything:
        meters, ran = await _experiment_meters(access, experiment_id, sessions)
    else:
        meters = {info.id: await _metered(access, info) for info in sessions}
        ran = 0.0
    wall = access.sees_everything
    total = CostTally(wall_seconds=ran)
    for meter in meters.values():
        total.include(meter.tally.totals())
    return ExperimentSpent(
        total=costs_out(total.totals(), wall=wall),
        sessions={sid: costs_out(meter.tally.totals(), wall=wall) for sid, meter in meters.items()},
    )


async def _experiment_meters(
    access: Access, experiment_id: str, sessions: Sequence[SessionInfo]
) -> tuple[dict[str, _Meter], float]:
    """One pass in commit order over the experiment's chain and its sessions' costs and
    segments: each session's meter, and how long the experiment ran. Sessions that appeared
    after ``sessions`` was listed are left out, as the report leaves them out."""
    store = access.service.store
    meters = {info.id: _Meter() for info in sessions}
    ran = 0.0
    running_since: datetime | None = None
    rows = store.experiment_rows_so_far(experiment_id, kinds=_EXPERIMENT_KINDS)
    async with aclosing(rows):
        async for row in rows:
            if row.session_id != experiment_id:
                if (meter := meters.get(row.session_id)) is not None:
                    meter.read(row)
                continue
            status = decode_payload(row.payload)
            if isinstance(status, ExperimentStatus):
                at = datetime.fromisoformat(row.at)
                if running_since is not None:
                    ran += max(0.0, (at - running_since).total_seconds())
                running_since = at if status.status == "running" else None
    for info in sessions:
        meters[info.id].close(info.updated_at)
    if running_since is not None and sessions:
        last_seen = max(datetime.fromisoformat(info.updated_at) for info in sessions)
        ran += max(0.0, (last_seen - running_since).total_seconds())
    return meters, ran
