"""The JSON API of experiments: the list, one experiment with its sessions and what they spent,
its live stream.

Like every other handler these read through :class:`~envharness.service.access.Access`: a
participant token gets the experiments it has sessions in, and in them only its own sessions.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.records import ExperimentConfig, ExperimentCreated, Status, decode_payload
from envharness.service.access import Access
from envharness.service.http.events import ExperimentEventsQuery, experiment_stream
from envharness.service.http.paging import page_of
from envharness.service.params import NoParameters
from envharness.service.routing import ANYONE, Call, Endpoint, json_response
from envharness.service.spending import experiment_spent
from envharness.service.wire.sessions import (
    ExperimentDetail,
    ExperimentEnd,
    ExperimentPage,
    ExperimentStatusEvent,
    SessionCreatedEvent,
    SessionStatusEvent,
)
from envharness.store import RecordFilter

__all__ = ["EXPERIMENT_API_ENDPOINTS", "ExperimentsQuery", "experiment_config"]


class ExperimentsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    status: Annotated[
        Status | None, msgspec.Meta(description="Only experiments with this status.")
    ] = None
    after: Annotated[
        str | None, msgspec.Meta(description="The `next_after` of the previous page.")
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Experiments per page.")] = 100


async def list_experiments(call: Call[ExperimentsQuery]) -> Response:
    query = call.query
    access = call.access
    found = [info for info in await access.experiments() if query.status in (None, info.status)]
    page, next_after = page_of(
        found, lambda info: info.id, query.after, query.limit,
        member="an experiment of this listing",
    )  # fmt: skip
    return json_response(
        ExperimentPage(
            experiments=[access.experiment_summary(info) for info in page], next_after=next_after
        )
    )


async def get_experiment(call: Call[NoParameters]) -> Response:
    access = call.access
    info = await access.experiment(call.path("experiment_id"))
    members = await access.experiment_sessions(info.id)
    spent = await experiment_spent(access, info.id, [member.session for member in members])
    return json_response(
        ExperimentDetail(
            experiment=access.experiment_summary(info),
            config=await experiment_config(access, info.id),
            sessions=[
                msgspec.structs.replace(
                    access.experiment_session(member), costs=spent.sessions[member.session.id]
                )
                for member in members
            ],
            costs=spent.total,
        )
    )


async def experiment_config(access: Access, experiment_id: str) -> ExperimentConfig | None:
    """The configuration frozen in the experiment's first record; ``None`` for a principal
    that may not see it (it holds every scenario's reference answer)."""
    if not access.sees_everything:
        return None
    selection = RecordFilter(kinds=("experiment.created",), limit=1)
    async with aclosing(access.service.store.rows(experiment_id, selection)) as rows:
        async for row in rows:
            created = decode_payload(row.payload)
            if isinstance(created, ExperimentCreated):
                return created.config
    return None


_EXPERIMENT = "/api/experiments/{experiment_id}"

EXPERIMENT_API_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/api/experiments", handler=list_experiments,
        operation="listExperiments", tag="experiments",
        summary="Experiments, oldest first, paged, with their sessions counted by status",
        description=(
            "A participant token lists only the experiments it has sessions in, and counts "
            "only those sessions; `reason` and `total` are null for it."
        ),
        roles=ANYONE, query=ExperimentsQuery, response=ExperimentPage, errors=(422,),
    ),
    Endpoint(
        method="GET", path=_EXPERIMENT, handler=get_experiment, operation="getExperiment",
        tag="experiments",
        summary="One experiment: status, counts, frozen configuration, its sessions",
        description=(
            "`config` is the configuration frozen in the experiment's `experiment.created` "
            "record, shared by every session; `sessions` places each by scenario, trial and "
            "seed, with what it spent (`costs`); `costs` is what the experiment spent, as "
            "`envharness experiments show` sums it. A participant token gets `config` null, "
            "only its own sessions, and costs of its own calls only, without wall time."
        ),
        roles=ANYONE, response=ExperimentDetail, errors=(404,),
    ),
    Endpoint(
        method="GET", path=f"{_EXPERIMENT}/events", handler=experiment_stream,
        operation="experimentEvents", tag="experiments",
        summary="Live: the experiment's sessions as they start and change status",
        description=(
            "Server-sent events named after the record they report: `session.created`, "
            "`session.status` and `experiment.status` (data in `x-events`). Each `id` is the "
            "record's store-wide position, which grows in commit order: reconnect with "
            "`Last-Event-ID` to resume with no gap and no duplicate. Without it the stream "
            "starts after `after` (default: from the beginning). When the experiment has a "
            "terminal status and everything was sent, an `end` event closes the stream. A "
            "participant token gets only its own sessions' events."
        ),
        roles=ANYONE, query=ExperimentEventsQuery, media_type="text/event-stream",
        errors=(404, 422),
        request_headers={"Last-Event-ID": "Resume after this event id (sent by EventSource)."},
        events={
            "session.created": SessionCreatedEvent,
            "session.status": SessionStatusEvent,
            "experiment.status": ExperimentStatusEvent,
            "end": ExperimentEnd,
        },
    ),
)  # fmt: skip
