"""The JSON API of datasets: list, create, read one, export its rows.

Each handler calls what ``envharness dataset …`` calls (``create_dataset``, ``list_datasets``,
``load_dataset``, ``dataset_rows``). Every snapshot of a dataset is verified before the first
byte of its export (:mod:`.exports`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import msgspec
from starlette.responses import Response

from envharness.errors import EnvharnessError, NotFoundError
from envharness.service.http.bodies import MAX_JSON_BODY, decode_body, read_body
from envharness.service.http.exports import export_response
from envharness.service.http.paging import ListQuery, page_of
from envharness.service.http.snapshots import exact_snapshot
from envharness.service.params import NoParameters
from envharness.service.problems import not_found, trajectory_problem, trajectory_problems
from envharness.service.routing import ADMIN, READERS, Call, Endpoint, json_response
from envharness.service.wire.trajectories import DatasetDetail, DatasetPage, DatasetRequest
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    TrajectoryError,
    create_dataset,
    dataset_rows,
    list_datasets,
    load_dataset,
    verify_snapshot,
)
from envharness.trajectories.files import jsonl_line

__all__ = ["DATASET_API_ENDPOINTS", "exact_dataset"]

_dataset_request = msgspec.json.Decoder(DatasetRequest)


async def exact_dataset(call: Call[Any], name: str) -> Dataset:
    """The dataset with exactly this name or id; 404 otherwise."""
    try:
        dataset = await load_dataset(call.service.store, name)
    except NotFoundError:
        raise not_found(f"dataset {name!r}") from None
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    if name not in (dataset.name, dataset.id):
        raise not_found(f"dataset {name!r}")
    return dataset


async def list_datasets_endpoint(call: Call[ListQuery]) -> Response:
    with trajectory_problems():
        found = await list_datasets(call.service.store)
    page, next_after = page_of(found, lambda d: d.name, call.query.after, call.query.limit)
    return json_response(DatasetPage(datasets=page, next_after=next_after))


async def get_dataset(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    snapshots = [await exact_snapshot(call, snapshot_id) for snapshot_id in dataset.snapshots]
    return json_response(DatasetDetail(dataset=dataset, snapshots=snapshots))


async def create_dataset_endpoint(call: Call[NoParameters]) -> Response:
    body = await read_body(call, limit=MAX_JSON_BODY)
    request = decode_body(body, _dataset_request, "dataset")
    for snapshot_id in request.snapshots:
        await exact_snapshot(call, snapshot_id)
    with trajectory_problems(EnvharnessError):
        dataset = await create_dataset(
            call.service.store,
            request.name,
            request.snapshots,
            reward=request.reward,
            participants=request.participants,
            shared_reward=request.shared_reward,
        )
    return json_response(dataset, status=201)


async def export_dataset(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    store = call.service.store
    with trajectory_problems():
        for snapshot_id in dataset.snapshots:  # refuse altered evidence before the first byte
            await verify_snapshot(store, snapshot_id)
    lines = _row_lines(dataset_rows(store, dataset.id))
    return await export_response(lines, filename=f"{dataset.id}.jsonl")


async def _row_lines(rows: AsyncGenerator[DatasetRow, None]) -> AsyncGenerator[bytes, None]:
    async with aclosing(rows) as found:
        async for row in found:
            yield jsonl_line(row)


_DS = "/api/datasets"

DATASET_API_ENDPOINTS: tuple[Endpoint, ...] = (
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
)  # fmt: skip
"""Ordered so that a more specific path comes before the one it would also match."""
