"""The JSON API of trajectories: the listing with its filters, and one trajectory.

Every handler calls the functions the command line calls (``envharness.trajectories``) and
reads through :class:`~envharness.service.trajectory_access.TrajectoryAccess`, which applies
the caller's policy. Snapshots, datasets and imported sources have their own modules
(:mod:`.snapshots`, :mod:`.datasets`, :mod:`.imports`); their endpoints follow these
in the route table.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.service.http.paging import start_after
from envharness.service.problems import trajectory_problems
from envharness.service.routing import ANYONE, Call, Endpoint, json_response
from envharness.service.trajectory_access import TrajectoryAccess, TrajectoryFilter
from envharness.service.wire.trajectories import TrajectoryDetail, TrajectoryPage
from envharness.trajectories import Trajectory
from envharness.trajectories.model import (
    CollectionState,
    ExecutionState,
    Origin,
    TerminationCause,
    VerificationState,
)

__all__ = ["TRAJECTORY_API_ENDPOINTS", "TrajectoriesQuery", "TrajectoryQuery"]


class TrajectoriesQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    origin: Annotated[
        Origin | None, msgspec.Meta(description="Only native or only imported trajectories.")
    ] = None
    execution: Annotated[
        ExecutionState | None, msgspec.Meta(description="Only this execution state.")
    ] = None
    collection: Annotated[
        CollectionState | None, msgspec.Meta(description="Only this collection state.")
    ] = None
    termination: Annotated[
        TerminationCause | None, msgspec.Meta(description="Only trajectories that ended so.")
    ] = None
    outcome: Annotated[
        VerificationState | None,
        msgspec.Meta(description="Only this verified outcome (admin and viewer tokens)."),
    ] = None
    experiment: Annotated[
        str | None, msgspec.Meta(description="Only the sessions of this experiment id.")
    ] = None
    source: Annotated[
        str | None, msgspec.Meta(description="Only the episodes of this source (NAMESPACE/NAME).")
    ] = None
    after: Annotated[
        str | None, msgspec.Meta(description="The `next_after` of the previous page.")
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Trajectories per page.")] = 100

    def wanted(self) -> TrajectoryFilter:
        return TrajectoryFilter(
            origin=self.origin, execution=self.execution, collection=self.collection,
            termination=self.termination, outcome=self.outcome, experiment=self.experiment,
            source=self.source,
        )  # fmt: skip


class TrajectoryQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    check: Annotated[
        bool,
        msgspec.Meta(
            description="Re-read the evidence and compare it with the digest binding (admin "
            "and viewer tokens; false skips it)."
        ),
    ] = True


async def list_trajectories(call: Call[TrajectoriesQuery]) -> Response:
    query = call.query
    trajectories = TrajectoryAccess(call.access)
    wanted = query.wanted()
    candidates = await trajectories.candidates(wanted)
    ids = [candidate.id for candidate in candidates]
    candidates = candidates[start_after(ids, query.after, member="a trajectory of this listing") :]
    page: list[Trajectory] = []
    more = False
    async with aclosing(trajectories.select(candidates, wanted)) as kept:
        async for _, trajectory in kept:
            if len(page) == query.limit:
                more = True
                break
            page.append(trajectory)
    summaries = [await trajectories.summary(trajectory) for trajectory in page]
    return json_response(
        TrajectoryPage(
            trajectories=summaries, next_after=summaries[-1].id if more and summaries else None
        )
    )


async def get_trajectory(call: Call[TrajectoryQuery]) -> Response:
    trajectories = TrajectoryAccess(call.access)
    with trajectory_problems():
        trajectory = await trajectories.one(call.path("trajectory_id"))
    full = trajectories.full
    return json_response(
        TrajectoryDetail(
            summary=await trajectories.summary(trajectory),
            segments=trajectories.segments(trajectory),
            trajectory=trajectory if full else None,
            check=await trajectories.check(trajectory) if full and call.query.check else None,
        )
    )


_TR = "/api/trajectories"

TRAJECTORY_API_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path=_TR, handler=list_trajectories, operation="listTrajectories",
        tag="trajectories",
        summary="Trajectories: every session's and every imported episode's, with their states",
        description=(
            "Sessions oldest first, then each source's episodes. Each summary gives the four "
            "states (collection, execution, termination, verified outcome), provenance and "
            "the snapshots holding it. A participant token lists only the trajectories of its "
            "own sessions, without outcome, records, environment or snapshots, and may not "
            "filter by `outcome` (403)."
        ),
        roles=ANYONE, query=TrajectoriesQuery, response=TrajectoryPage, errors=(403, 422),
    ),
    Endpoint(
        method="GET", path=f"{_TR}/{{trajectory_id:path}}", handler=get_trajectory,
        operation="getTrajectory", tag="trajectories",
        summary="One trajectory: segments, the projection and its digest check",
        description=(
            "The trajectory of a session (`ses_…`, exact) or of an imported episode "
            "(`SOURCE:EPISODE`). `check` re-reads every record of its range, recomputes each "
            "digest and compares the chain with the bound head. A participant token gets only "
            "its own sessions' trajectories, reduced: summary and segments (without seqs), no "
            "projection and no check."
        ),
        roles=ANYONE, query=TrajectoryQuery, response=TrajectoryDetail, errors=(404, 409),
    ),
)  # fmt: skip
