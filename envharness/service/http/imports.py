"""The JSON API of imported sources: their health, and imports into them.

Both do what :class:`~envharness.api.sources.AsyncSources` does for ``envharness sources``
and ``envharness import``, on the database of the store the service holds
(``Store.backend``). An import is one all-or-nothing batch (docs/imports.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from starlette.responses import Response

from envharness.errors import EnvharnessError, NotFoundError
from envharness.service.http.bodies import spool_body, spooled_lines
from envharness.service.problems import not_found, trajectory_problems
from envharness.service.routing import ADMIN, READERS, Call, Endpoint, json_response
from envharness.service.trajectory_access import sources_backend
from envharness.service.wire.trajectories import ImportReceipt, SourcePage
from envharness.store.sources import SourceStore
from envharness.trajectories.sources import import_lines

__all__ = ["IMPORT_LIMIT", "SOURCE_API_ENDPOINTS", "ImportQuery", "SourcesQuery"]

IMPORT_LIMIT = 64 * 1024 * 1024
"""Largest import body accepted. An import is one all-or-nothing batch, checked whole before
it is stored (docs/imports.md); split a longer history into consecutive imports. The body is
spooled to a temporary file as it arrives and imported from there, so the server holds about a
megabyte of it at a time, not the limit."""
SOURCE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)+$"
_IMPORT_TYPES = ("application/x-ndjson", "application/jsonl", "application/json")


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


async def list_sources(call: Call[SourcesQuery]) -> Response:
    try:
        found = await SourceStore(sources_backend(call.service)).health(call.query.source)
    except NotFoundError:
        raise not_found(f"source {call.query.source!r}") from None
    return json_response(SourcePage(sources=found))


async def import_source(call: Call[ImportQuery]) -> Response:
    query = call.query
    backend = sources_backend(call.service)
    # Spooled, never held: the import reads its lines in a worker thread, in bounded memory.
    async with spool_body(call, limit=IMPORT_LIMIT, content_types=_IMPORT_TYPES) as body:
        with trajectory_problems(EnvharnessError):
            receipt = await import_lines(
                backend, query.source, spooled_lines(body), format=query.format,
                origin="the request body", training=query.training,
            )  # fmt: skip
    return json_response(receipt, status=201)


SOURCE_API_ENDPOINTS: tuple[Endpoint, ...] = (
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
            "409, and nothing is stored either way. A PostgreSQL store takes no import yet "
            "(409)."
        ),
        roles=ADMIN, query=ImportQuery, body=str, body_media_type="application/x-ndjson",
        response=ImportReceipt, status=201, errors=(409, 413, 415, 422),
    ),
)  # fmt: skip
