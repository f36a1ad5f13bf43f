"""The JSON API of snapshots: list, freeze, read a page of one, export one.

Each handler calls what ``envharness snapshot …`` and ``envharness export snapshot`` call
(``freeze``, ``list_snapshots``, ``snapshot_trajectories``, ``export_snapshot``). URLs name one
snapshot exactly, never a prefix. The export is checked whole before its first byte
(:mod:`.exports`).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated, Any

import msgspec
from starlette.responses import Response

from envharness.errors import ConfigurationError, EnvharnessError, NotFoundError
from envharness.service.http.bodies import MAX_JSON_BODY, decode_body, read_body
from envharness.service.http.exports import export_response
from envharness.service.http.paging import ListQuery, page_of
from envharness.service.params import MAX_INTEGER, NoParameters
from envharness.service.problems import (
    HTTPProblem,
    not_found,
    trajectory_problem,
    trajectory_problems,
)
from envharness.service.routing import ADMIN, READERS, Call, Endpoint, json_response
from envharness.service.trajectory_access import TrajectoryAccess, check_snapshot, sources_backend
from envharness.service.wire.trajectories import (
    ExportLineOut,
    SnapshotDetail,
    SnapshotPage,
    SnapshotRequest,
    TrajectorySummary,
)
from envharness.store.sources import SourceStore
from envharness.trajectories import (
    SnapshotMetadata,
    TrajectoryError,
    export_snapshot,
    freeze,
    list_datasets,
    list_snapshots,
    load_snapshot,
    snapshot_trajectories,
)
from envharness.trajectories.sources import split_trajectory_id

__all__ = ["SNAPSHOT_API_ENDPOINTS", "SnapshotQuery", "exact_snapshot", "frozen_summaries"]

_snapshot_request = msgspec.json.Decoder(SnapshotRequest)


class SnapshotQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    check: Annotated[
        bool,
        msgspec.Meta(
            description="Verify it first: its content address and every trajectory's digest "
            "binding (reads all its evidence)."
        ),
    ] = False
    after: Annotated[
        int,
        msgspec.Meta(ge=-1, le=MAX_INTEGER, description="Only trajectories after this position."),
    ] = -1
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Trajectories per page.")] = 100


async def exact_snapshot(call: Call[Any], snapshot_id: str) -> SnapshotMetadata:
    """The snapshot with exactly this id (URLs name one snapshot, never a prefix); 404."""
    try:
        metadata = await load_snapshot(call.service.store, snapshot_id)
    except (NotFoundError, ConfigurationError):
        raise not_found(f"snapshot {snapshot_id!r}") from None
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    if metadata.id != snapshot_id:
        raise not_found(f"snapshot {snapshot_id!r}")
    return metadata


async def _require_trajectory(call: Call[Any], wanted: str) -> None:
    """404 unless ``wanted`` names a session exactly, or an imported episode, as
    ``/api/trajectories/{id}`` reads ids: freezing must not answer with the store's own
    message (its directory and a command to run) for a trajectory that is not there."""
    imported = split_trajectory_id(wanted)
    if imported is None:
        await call.access.session(wanted)
        return
    try:
        await SourceStore(sources_backend(call.service)).episode(*imported)
    except NotFoundError:
        raise not_found(f"trajectory {wanted!r}") from None


async def frozen_summaries(
    call: Call[Any], snapshot_id: str, start: int, limit: int
) -> tuple[list[TrajectorySummary], bool]:
    """The summaries of the snapshot's trajectories from position ``start`` on, at most
    ``limit`` of them, as this reader may see them; and whether more follow."""
    trajectories = TrajectoryAccess(call.access)
    found: list[TrajectorySummary] = []
    with trajectory_problems():
        async with aclosing(snapshot_trajectories(call.service.store, snapshot_id)) as frozen:
            position = -1
            async for trajectory in frozen:
                position += 1
                if position < start:
                    continue
                if len(found) == limit:
                    return found, True
                found.append(await trajectories.summary(trajectory))
    return found, False


async def list_snapshots_endpoint(call: Call[ListQuery]) -> Response:
    with trajectory_problems():
        found = await list_snapshots(call.service.store)
    page, next_after = page_of(found, lambda m: m.id, call.query.after, call.query.limit)
    return json_response(SnapshotPage(snapshots=page, next_after=next_after))


async def get_snapshot(call: Call[SnapshotQuery]) -> Response:
    query = call.query
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    check = await check_snapshot(call.access, metadata.id) if query.check else None
    page, more = await frozen_summaries(call, metadata.id, query.after + 1, query.limit)
    datasets = [
        d.name for d in await list_datasets(call.service.store) if metadata.id in d.snapshots
    ]
    return json_response(
        SnapshotDetail(
            snapshot=metadata,
            trajectories=page,
            next_after=query.after + len(page) if more else None,
            datasets=datasets,
            check=check,
        )
    )


async def create_snapshot(call: Call[NoParameters]) -> Response:
    body = await read_body(call, limit=MAX_JSON_BODY)
    request = decode_body(body, _snapshot_request, "snapshot")
    if request.entitlement is not None and not request.entitlement.basis.strip():
        raise HTTPProblem(
            422, "entitlement.basis must say why these trajectories may train models, e.g. "
            "'own evaluation data'", parameter="body",
        )  # fmt: skip
    access = call.access
    selection = list(dict.fromkeys(request.sessions))
    for wanted in selection:
        await _require_trajectory(call, wanted)
    if request.experiment is not None:
        info = await access.experiment(request.experiment)
        selection += [member.session.id for member in await access.experiment_sessions(info.id)]
    if not selection:
        raise HTTPProblem(
            422, "give `sessions` (session ids or imported SOURCE:EPISODE ids) or `experiment`",
            parameter="body",
        )  # fmt: skip
    with trajectory_problems(EnvharnessError):
        snapshot = await freeze(
            call.service.store, list(dict.fromkeys(selection)), label=request.label,
            entitlement=request.entitlement,
        )  # fmt: skip
    return json_response(snapshot.metadata, status=201)


async def export_snapshot_endpoint(call: Call[NoParameters]) -> Response:
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    lines = export_snapshot(call.service.store, metadata.id)
    return await export_response(lines, filename=f"{metadata.id}.jsonl")


_SN = "/api/snapshots"

SNAPSHOT_API_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path=_SN, handler=list_snapshots_endpoint, operation="listSnapshots",
        tag="snapshots", summary="Snapshots, oldest first", roles=READERS, query=ListQuery,
        response=SnapshotPage, errors=(409, 422),
    ),
    Endpoint(
        method="POST", path=_SN, handler=create_snapshot, operation="createSnapshot",
        tag="snapshots",
        summary="Freeze trajectories as a content-addressed snapshot (or find it frozen)",
        description=(
            "Projects the named sessions (exact ids), imported `SOURCE:EPISODE` ids and every "
            "session of `experiment` now and keeps them as one snapshot, named by the sha256 "
            "of its content: the same selection again answers with the same snapshot. "
            "`entitlement` declares the trajectories may train models (datasets require it)."
        ),
        roles=ADMIN, body=SnapshotRequest, response=SnapshotMetadata, status=201,
        errors=(404, 409, 413, 415, 422),
    ),
    Endpoint(
        method="GET", path=f"{_SN}/{{snapshot_id}}/export", handler=export_snapshot_endpoint,
        operation="exportSnapshot", tag="snapshots",
        summary="A snapshot as JSON lines, checked first, streamed",
        description=(
            "The lines of `envharness export snapshot`: the snapshot, then each trajectory "
            "followed by its records, each embedded as the exact bytes that were hashed. The "
            "content address and every trajectory's digest binding are checked before the "
            "first line: altered evidence is refused (409) with the record named, and nothing "
            "is sent. Records are read a page at a time as the client takes them."
        ),
        roles=READERS, response=ExportLineOut, media_type="application/x-ndjson",
        errors=(404, 409),
    ),
    Endpoint(
        method="GET", path=f"{_SN}/{{snapshot_id}}", handler=get_snapshot,
        operation="getSnapshot", tag="snapshots",
        summary="One snapshot: what it holds, a page of its trajectories, its datasets",
        roles=READERS, query=SnapshotQuery, response=SnapshotDetail, errors=(404, 409),
    ),
)  # fmt: skip
"""Ordered so that a more specific path comes before the one it would also match."""
