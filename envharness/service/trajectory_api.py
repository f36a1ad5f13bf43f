"""The JSON API of trajectories, snapshots, datasets and imported sources.

Every handler calls the functions the command line calls (``envharness.trajectories``:
``project``, ``freeze``, ``verify_snapshot``, ``export_snapshot``, ``create_dataset``,
``dataset_rows``; ``envharness.sources.AsyncSources`` for imports and health) and reads
through :class:`~envharness.service.trajectory_access.TrajectoryAccess`, which applies the
caller's policy. Exports stream: the whole snapshot (or dataset) is checked before the first
byte — a tampered one is refused with 409, nothing sent — and then lines go out a chunk at a
time as they are read, so memory does not grow with the export.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import msgspec
from starlette.responses import Response

from envharness.errors import ConfigurationError, EnvharnessError, NotFoundError
from envharness.service.events import ClosingStream
from envharness.service.params import MAX_INTEGER, NoParameters
from envharness.service.problems import HTTPProblem, from_error, not_found
from envharness.service.routing import ADMIN, ANYONE, READERS, Call, Endpoint, json_response
from envharness.service.trajectory_access import (
    TrajectoryAccess,
    TrajectoryFilter,
    check_snapshot,
)
from envharness.service.trajectory_schemas import (
    DatasetDetail,
    DatasetPage,
    DatasetRequest,
    DatasetRow,
    ExportLineOut,
    ImportReceipt,
    SnapshotDetail,
    SnapshotPage,
    SnapshotRequest,
    SourcePage,
    TrajectoryDetail,
    TrajectoryPage,
    TrajectorySummary,
)
from envharness.sources import AsyncSources
from envharness.store.sources import SourceConflictError, SourceImportError
from envharness.trajectories import (
    AdmissionError,
    Dataset,
    SnapshotMetadata,
    Trajectory,
    TrajectoryError,
    create_dataset,
    dataset_rows,
    export_snapshot,
    freeze,
    list_datasets,
    list_snapshots,
    load_dataset,
    load_snapshot,
    snapshot_trajectories,
    verify_snapshot,
)
from envharness.trajectories.files import jsonl_line
from envharness.trajectories.model import (
    CollectionState,
    ExecutionState,
    Origin,
    TerminationCause,
    VerificationState,
)

__all__ = [
    "CHUNK",
    "IMPORT_LIMIT",
    "TRAJECTORY_API_ENDPOINTS",
    "ImportQuery",
    "ListQuery",
    "SnapshotQuery",
    "SourcesQuery",
    "TrajectoriesQuery",
    "TrajectoryQuery",
    "exact_dataset",
    "exact_snapshot",
    "trajectory_problem",
]

CHUNK = 64 * 1024
"""Bytes of export lines gathered into one write: large enough to be cheap, small enough that
memory stays flat however long the export."""
IMPORT_LIMIT = 64 * 1024 * 1024
"""Largest import body accepted. An import is one all-or-nothing batch, checked whole before
it is stored (docs/imports.md); split a longer history into consecutive imports."""
SOURCE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)+$"
_IMPORT_TYPES = ("application/x-ndjson", "application/jsonl", "application/json")

_T = TypeVar("_T")
_snapshot_request = msgspec.json.Decoder(SnapshotRequest)
_dataset_request = msgspec.json.Decoder(DatasetRequest)


# -- query parameters ------------------------------------------------------------------------


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


class ListQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[
        str | None, msgspec.Meta(description="The `next_after` of the previous page.")
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Items per page.")] = 100


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


class SourcesQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: (
        Annotated[
            str,
            msgspec.Meta(pattern=SOURCE_PATTERN, max_length=200, description="Only this source."),
        ]
        | None
    ) = None


class ImportQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: Annotated[
        str,
        msgspec.Meta(
            pattern=SOURCE_PATTERN, max_length=200,
            description="The source to import into, NAMESPACE/NAME (e.g. acme/nightly-evals).",
        ),
    ]  # fmt: skip
    format: Annotated[
        Literal["envharness", "otel-genai"],
        msgspec.Meta(description="The body's format: import lines, or OTLP JSON GenAI spans."),
    ] = "envharness"
    training: Annotated[
        bool, msgspec.Meta(description="Declare that these records may train models.")
    ] = False


# -- errors ----------------------------------------------------------------------------------


def trajectory_problem(error: EnvharnessError) -> HTTPProblem:
    """The answer to an error of the trajectory layer or of an import.

    Evidence that no longer matches its binding, or a snapshot stored under another schema, is
    a conflict with what is stored (409); a refused dataset or import is a bad body (422), an
    import that contradicts what a source holds is a conflict (409).
    """
    if isinstance(error, AdmissionError | ConfigurationError):
        return HTTPProblem(422, str(error), parameter="body")
    if isinstance(error, SourceConflictError):
        return HTTPProblem(409, str(error), parameter="body")
    if isinstance(error, SourceImportError):
        return HTTPProblem(422, str(error), parameter="body")
    if isinstance(error, TrajectoryError):
        return HTTPProblem(409, str(error))
    return from_error(error)


def _refuse(error: EnvharnessError) -> NoReturn:
    raise trajectory_problem(error) from None


# -- trajectories ----------------------------------------------------------------------------


async def list_trajectories(call: Call[TrajectoriesQuery]) -> Response:
    query = call.query
    trajectories = TrajectoryAccess(call.access)
    wanted = query.wanted()
    candidates = await trajectories.candidates(wanted)
    if query.after is not None:
        ids = [candidate.id for candidate in candidates]
        if query.after not in ids:
            raise HTTPProblem(
                422, f"query parameter 'after': {query.after!r} is not a trajectory of this "
                "listing", parameter="after",
            )  # fmt: skip
        candidates = candidates[ids.index(query.after) + 1 :]
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
    try:
        trajectory = await trajectories.one(call.path("trajectory_id"))
    except TrajectoryError as error:
        _refuse(error)
    full = trajectories.full
    return json_response(
        TrajectoryDetail(
            summary=await trajectories.summary(trajectory),
            segments=trajectories.segments(trajectory),
            trajectory=trajectory if full else None,
            check=await trajectories.check(trajectory) if full and call.query.check else None,
        )
    )


# -- snapshots -------------------------------------------------------------------------------


async def exact_snapshot(call: Call[Any], snapshot_id: str) -> SnapshotMetadata:
    """The snapshot with exactly this id (URLs name one snapshot, never a prefix); 404."""
    try:
        metadata = await load_snapshot(call.service.store, snapshot_id)
    except (NotFoundError, ConfigurationError):
        raise not_found(f"snapshot {snapshot_id!r}") from None
    except TrajectoryError as error:
        _refuse(error)
    if metadata.id != snapshot_id:
        raise not_found(f"snapshot {snapshot_id!r}")
    return metadata


async def list_snapshots_endpoint(call: Call[ListQuery]) -> Response:
    try:
        found = await list_snapshots(call.service.store)
    except TrajectoryError as error:
        _refuse(error)
    page, next_after = _page(found, [m.id for m in found], call.query.after, call.query.limit)
    return json_response(SnapshotPage(snapshots=page, next_after=next_after))


async def get_snapshot(call: Call[SnapshotQuery]) -> Response:
    query = call.query
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    check = await check_snapshot(call.access, metadata.id) if query.check else None
    trajectories = TrajectoryAccess(call.access)
    page: list[TrajectorySummary] = []
    next_after: int | None = None
    position = -1
    try:
        async with aclosing(snapshot_trajectories(call.service.store, metadata.id)) as frozen:
            async for trajectory in frozen:
                position += 1
                if position <= query.after:
                    continue
                if len(page) == query.limit:
                    next_after = position - 1
                    break
                page.append(await trajectories.summary(trajectory))
    except TrajectoryError as error:
        _refuse(error)
    datasets = [
        d.name for d in await list_datasets(call.service.store) if metadata.id in d.snapshots
    ]
    return json_response(
        SnapshotDetail(
            snapshot=metadata,
            trajectories=page,
            next_after=next_after,
            datasets=datasets,
            check=check,
        )
    )


async def create_snapshot(call: Call[NoParameters]) -> Response:
    request = _decode(await read_body(call, limit=MAX_JSON_BODY), _snapshot_request, "snapshot")
    if request.entitlement is not None and not request.entitlement.basis.strip():
        raise HTTPProblem(
            422, "entitlement.basis must say why these trajectories may train models, e.g. "
            "'own evaluation data'", parameter="body",
        )  # fmt: skip
    access = call.access
    selection = list(dict.fromkeys(request.sessions))
    for wanted in selection:
        if ":" not in wanted:  # a session: named exactly, as everywhere in the API
            await access.session(wanted)
    if request.experiment is not None:
        info = await access.experiment(request.experiment)
        selection += [member.session.id for member in await access.experiment_sessions(info.id)]
    if not selection:
        raise HTTPProblem(
            422, "give `sessions` (session ids or imported SOURCE:EPISODE ids) or `experiment`",
            parameter="body",
        )  # fmt: skip
    try:
        snapshot = await freeze(
            call.service.store, list(dict.fromkeys(selection)), label=request.label,
            entitlement=request.entitlement,
        )  # fmt: skip
    except EnvharnessError as error:
        _refuse(error)
    return json_response(snapshot.metadata, status=201)


async def export_snapshot_endpoint(call: Call[NoParameters]) -> Response:
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    lines = export_snapshot(call.service.store, metadata.id)
    try:
        first = await anext(lines)  # the whole snapshot is checked before its first line
    except TrajectoryError as error:
        await lines.aclose()
        _refuse(error)
    return ClosingStream(
        _chunked(first, lines), media_type="application/x-ndjson", filename=f"{metadata.id}.jsonl"
    )


async def _chunked(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """``first`` and then every line of ``rest``, gathered into writes of about :data:`CHUNK`
    bytes; ``rest`` is closed however the stream ends."""
    async with aclosing(rest) as lines:
        buffer = [first]
        size = len(first)
        async for line in lines:
            buffer.append(line)
            size += len(line)
            if size >= CHUNK:
                yield b"".join(buffer)
                buffer, size = [], 0
        if buffer:
            yield b"".join(buffer)


# -- datasets --------------------------------------------------------------------------------


async def exact_dataset(call: Call[Any], name: str) -> Dataset:
    """The dataset with exactly this name or id; 404 otherwise."""
    try:
        dataset = await load_dataset(call.service.store, name)
    except NotFoundError:
        raise not_found(f"dataset {name!r}") from None
    except TrajectoryError as error:
        _refuse(error)
    if name not in (dataset.name, dataset.id):
        raise not_found(f"dataset {name!r}")
    return dataset


async def list_datasets_endpoint(call: Call[ListQuery]) -> Response:
    try:
        found = await list_datasets(call.service.store)
    except TrajectoryError as error:
        _refuse(error)
    page, next_after = _page(found, [d.name for d in found], call.query.after, call.query.limit)
    return json_response(DatasetPage(datasets=page, next_after=next_after))


async def get_dataset(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    snapshots = [await exact_snapshot(call, snapshot_id) for snapshot_id in dataset.snapshots]
    return json_response(DatasetDetail(dataset=dataset, snapshots=snapshots))


async def create_dataset_endpoint(call: Call[NoParameters]) -> Response:
    request = _decode(await read_body(call, limit=MAX_JSON_BODY), _dataset_request, "dataset")
    for snapshot_id in request.snapshots:
        await exact_snapshot(call, snapshot_id)
    try:
        dataset = await create_dataset(
            call.service.store, request.name, request.snapshots, reward=request.reward
        )
    except EnvharnessError as error:
        _refuse(error)
    return json_response(dataset, status=201)


async def export_dataset(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    store = call.service.store
    try:
        for snapshot_id in dataset.snapshots:  # refuse altered evidence before the first byte
            await verify_snapshot(store, snapshot_id)
    except TrajectoryError as error:
        _refuse(error)
    rows = dataset_rows(store, dataset.id)
    lines = _row_lines(rows)
    try:
        first = await anext(lines)
    except StopAsyncIteration:
        first = b""
    except TrajectoryError as error:
        await lines.aclose()
        _refuse(error)
    return ClosingStream(
        _chunked(first, lines), media_type="application/x-ndjson", filename=f"{dataset.id}.jsonl"
    )


async def _row_lines(rows: AsyncGenerator[DatasetRow, None]) -> AsyncGenerator[bytes, None]:
    async with aclosing(rows) as found:
        async for row in found:
            yield jsonl_line(row)


# -- sources ---------------------------------------------------------------------------------


async def list_sources(call: Call[SourcesQuery]) -> Response:
    try:
        found = await AsyncSources(call.service.store.directory).health(call.query.source)
    except NotFoundError:
        raise not_found(f"source {call.query.source!r}") from None
    return json_response(SourcePage(sources=found))


async def import_source(call: Call[ImportQuery]) -> Response:
    query = call.query
    body = await read_body(call, limit=IMPORT_LIMIT, content_types=_IMPORT_TYPES)
    sources = AsyncSources(call.service.store.directory)
    try:
        receipt = await sources.import_lines(
            query.source, body.splitlines(keepends=True), format=query.format,
            origin="the request body", training=query.training,
        )  # fmt: skip
    except EnvharnessError as error:
        _refuse(error)
    return json_response(receipt, status=201)


# -- plumbing --------------------------------------------------------------------------------

MAX_JSON_BODY = 1024 * 1024
"""Largest JSON request body for a snapshot or dataset (10,000 session ids fit)."""


async def read_body(
    call: Call[Any], *, limit: int, content_types: tuple[str, ...] = ("application/json",)
) -> bytes:
    """The request body, refused when it is of another type (415) or over ``limit`` (413)."""
    if call.request.headers.get("content-type", "").split(";")[0].strip() not in content_types:
        raise HTTPProblem(415, f"send the body as {' or '.join(content_types)}")
    chunks: list[bytes] = []
    size = 0
    async with aclosing(call.request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise HTTPProblem(413, f"the body is larger than {limit:,} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def _decode(body: bytes, decoder: msgspec.json.Decoder[_T], what: str) -> _T:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise HTTPProblem(422, f"the {what} request is invalid: {exc}", parameter="body") from None
    except msgspec.DecodeError as exc:
        raise HTTPProblem(422, f"the body is not JSON: {exc}", parameter="body") from None


def _page(
    items: list[_T], keys: list[str], after: str | None, limit: int
) -> tuple[list[_T], str | None]:
    start = 0
    if after is not None:
        if after not in keys:
            raise HTTPProblem(
                422, f"query parameter 'after': {after!r} is not in this listing",
                parameter="after",
            )  # fmt: skip
        start = keys.index(after) + 1
    page = items[start : start + limit]
    more = start + limit < len(items)
    return page, keys[start + len(page) - 1] if more and page else None


_TR = "/api/trajectories"
_SN = "/api/snapshots"
_DS = "/api/datasets"

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
    Endpoint(
        method="GET", path=_DS, handler=list_datasets_endpoint, operation="listDatasets",
        tag="datasets", summary="Datasets, oldest first", roles=READERS, query=ListQuery,
        response=DatasetPage, errors=(409, 422),
    ),
    Endpoint(
        method="POST", path=_DS, handler=create_dataset_endpoint, operation="createDataset",
        tag="datasets", summary="Create an immutable training dataset from snapshots",
        description=(
            "Every trajectory of the snapshots (exact ids, in order) must be complete, "
            "terminal, training-entitled and rewarded; otherwise nothing is created and the "
            "422 names each refused trajectory and the condition it misses. The same content "
            "again answers with the same dataset; other content under a taken name is a 422."
        ),
        roles=ADMIN, body=DatasetRequest, response=Dataset, status=201,
        errors=(404, 409, 413, 415, 422),
    ),
    Endpoint(
        method="GET", path=f"{_DS}/{{dataset}}/export", handler=export_dataset,
        operation="exportDataset", tag="datasets",
        summary="A dataset's rows as JSON lines (TRL's conversational format), streamed",
        description=(
            "One DatasetRow per line: a participant's messages in one trajectory and its "
            "reward, with where the reward comes from. Every snapshot is verified before the "
            "first line (409 for altered evidence)."
        ),
        roles=READERS, response=DatasetRow, media_type="application/x-ndjson",
        errors=(404, 409),
    ),
    Endpoint(
        method="GET", path=f"{_DS}/{{dataset}}", handler=get_dataset, operation="getDataset",
        tag="datasets", summary="One dataset (by name or id) and its snapshots",
        roles=READERS, response=DatasetDetail, errors=(404, 409),
    ),
    Endpoint(
        method="GET", path="/api/sources", handler=list_sources, operation="listSources",
        tag="sources",
        summary="Imported sources' health: head, backlog, gaps, capture failures, refusals",
        roles=READERS, query=SourcesQuery, response=SourcePage, errors=(404,),
    ),
    Endpoint(
        method="POST", path="/api/imports", handler=import_source, operation="importSource",
        tag="sources", summary="Import records into a source as one all-or-nothing batch",
        description=(
            "The body is the file `envharness import` reads: import lines (docs/imports.md) "
            "or, with `format=otel-genai`, OTLP JSON GenAI spans. An identical retry stores "
            "nothing (counted in `duplicates`); a record that does not chain or leaves a gap "
            "refuses the whole batch (422), one that contradicts what the source holds is a "
            "409, and nothing is stored either way."
        ),
        roles=ADMIN, query=ImportQuery, body=str, body_media_type="application/x-ndjson",
        response=ImportReceipt, status=201, errors=(409, 413, 415, 422),
    ),
)  # fmt: skip
"""Ordered so that a more specific path comes before the one it would also match."""
