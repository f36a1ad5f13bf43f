"""``/openapi.json``, built from the endpoint table and the msgspec wire types.

Nothing here is written by hand twice: paths, methods, parameters (from each endpoint's query
Struct), bodies and answers (from its msgspec types via ``schema_components``), and who may
call it (``x-roles``) all come from the :class:`~envharness.service.routing.Endpoint` that
also builds the route. The viewer's ``/docs`` page renders this document
(:mod:`envharness.service.pages.reference`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
from starlette.responses import Response

from envharness._version import __version__
from envharness.service.params import MAX_INTEGER, NoParameters
from envharness.service.routing import Call, Endpoint, json_response, openapi_path
from envharness.service.wire.sessions import Problem

__all__ = ["META_ENDPOINTS", "openapi_document"]

_REF = "#/components/schemas/{name}"
_PATH_PARAMETER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_PATH_DESCRIPTIONS = {
    "session_id": "A session id (ses_…), exact.",
    "experiment_id": "An experiment id (exp_…), exact.",
    "token_id": "A token id (tok_…), from GET /api/tokens.",
    "seq": "A record's position in its session, from 0.",
    "name": "A file of the viewer's assets.",
    "trajectory_id": "A session id (ses_…) or an imported SOURCE:EPISODE, exact.",
    "snapshot_id": "A snapshot id (snp_…), exact.",
    "dataset": "A dataset's name or id (dst_…), exact.",
    "version": "A harness version's name (harness-vN), exact.",
    "run_id": "An optimizer run id (opt_…), exact.",
}
_HEADER_SCHEMAS = {"Last-Event-ID": {"type": "integer", "minimum": -1, "maximum": MAX_INTEGER}}
"""Request headers that are not free text: an event id is the integer the stream sent."""
_STATUS_TEXT = {
    200: "OK",
    201: "Created",
    303: "See Other",
    400: "Bad request",
    401: "No credential, or an unknown, revoked or expired one",
    403: "The credential's role may not do this",
    404: "Not found, or not visible to this credential",
    413: "Body too large",
    415: "Wrong content type",
    422: "A parameter or the body is invalid; `parameter` names it",
}
_TEXT_KINDS = {
    "text/html": "An HTML page of the viewer.",
    "text/event-stream": "Server-sent events; see the description; `x-events` gives the "
    "schema of each event's data.",
    "application/x-ndjson": "JSON lines: one RecordOut per line.",
}


def openapi_document(endpoints: Sequence[Endpoint], *, cookie_name: str) -> dict[str, Any]:
    types: list[Any] = [Problem]
    for endpoint in endpoints:
        for kind in (endpoint.response, endpoint.body, *endpoint.events.values()):
            if kind is not None and kind not in types:
                types.append(kind)
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    schema_of = dict(zip(map(_key, types), schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        operation = _operation(endpoint, schema_of, components)
        paths.setdefault(openapi_path(endpoint.path), {})[endpoint.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "envharness local service",
            "version": __version__,
            "description": (
                "Read the evidence in one envharness store. Listens on loopback only; a "
                "request whose Host header is not this server's address is refused (400). "
                "Every endpoint that needs a credential takes `Authorization: Bearer <token>` "
                "(from `envharness token`); safe methods also accept the browser's read-only "
                "sign-in cookie. `x-roles` lists the token roles an operation admits."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "viewerCookie": {"type": "apiKey", "in": "cookie", "name": cookie_name},
            },
        },
    }


def _key(kind: Any) -> str:
    return repr(kind)


def _operation(
    endpoint: Endpoint, schema_of: dict[str, Any], components: dict[str, Any]
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": endpoint.operation,
        "summary": endpoint.summary,
        "tags": [endpoint.tag],
        "parameters": [*_path_parameters(endpoint.path), *_query_parameters(endpoint)],
        "responses": _responses(endpoint, schema_of),
    }
    for name, text in endpoint.request_headers.items():
        operation["parameters"].append(
            {"name": name, "in": "header", "required": False, "description": text,
             "schema": _HEADER_SCHEMAS.get(name, {"type": "string"})}
        )  # fmt: skip
    if endpoint.description:
        operation["description"] = endpoint.description
    if endpoint.roles is None:
        operation["security"] = []
        operation["x-roles"] = []
    else:
        operation["x-roles"] = sorted(endpoint.roles)
        schemes: list[dict[str, list[str]]] = [{"bearer": []}]
        if endpoint.method == "GET":
            schemes.append({"viewerCookie": []})
        operation["security"] = schemes
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {endpoint.body_media_type: {"schema": schema_of[_key(endpoint.body)]}},
        }
    return operation


def _path_parameters(path: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": _PATH_DESCRIPTIONS.get(name, name),
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_INTEGER}
            if convertor == "int"
            else {"type": "string"},
        }
        for name, convertor in _PATH_PARAMETER.findall(path)
    ]


def _query_parameters(endpoint: Endpoint) -> list[dict[str, Any]]:
    if endpoint.query is NoParameters:
        return []
    _, found = msgspec.json.schema_components([endpoint.query], ref_template=_REF)
    struct = found[endpoint.query.__name__]
    required = set(struct.get("required", ()))
    parameters = []
    for name, schema in struct["properties"].items():
        schema = dict(schema)
        description = schema.pop("description", None)
        for member in schema.get("anyOf", ()):
            description = description or member.pop("description", None)
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": schema,
        }
        if description:
            parameter["description"] = description
        if schema.get("type") == "array":
            parameter["style"] = "form"
            parameter["explode"] = True
        parameters.append(parameter)
    return parameters


def _responses(endpoint: Endpoint, schema_of: dict[str, Any]) -> dict[str, Any]:
    success: dict[str, Any] = {"description": _STATUS_TEXT.get(endpoint.status, "OK")}
    if endpoint.status == 303:
        success["headers"] = {"Location": {"schema": {"type": "string"}}}
    elif endpoint.media_type == "application/x-ndjson" and endpoint.response is not None:
        # JSON lines: the body is text; each line is one object of the `x-lines` schema.
        success["content"] = {endpoint.media_type: {"schema": {"type": "string"}}}
        success["description"] = "JSON lines: each line one object of the `x-lines` schema."
        success["x-lines"] = schema_of[_key(endpoint.response)]
    elif endpoint.response is not None:
        success["content"] = {endpoint.media_type: {"schema": schema_of[_key(endpoint.response)]}}
    elif endpoint.media_type == "application/json":
        success["content"] = {endpoint.media_type: {"schema": {"type": "object"}}}
    elif endpoint.events:
        success["content"] = {endpoint.media_type: {"schema": _event_schema(endpoint, schema_of)}}
        success["description"] = _TEXT_KINDS[endpoint.media_type]
        success["x-events"] = {
            name: schema_of[_key(kind)] for name, kind in endpoint.events.items()
        }
    else:
        text = _TEXT_KINDS.get(endpoint.media_type, "")
        success["content"] = {
            media_type: {"schema": {"type": "string"}}
            for media_type in (endpoint.media_type, *endpoint.other_media_types)
        }
        success["description"] = text or success["description"]
    responses: dict[str, Any] = {str(endpoint.status): success}
    statuses = set(endpoint.errors)
    if endpoint.roles is not None:
        statuses.add(401)
        if len(endpoint.roles) < 3:
            statuses.add(403)
    if endpoint.query is not NoParameters:
        statuses.add(422)
    for status in sorted(statuses):
        media = "text/html" if endpoint.page else "application/json"
        schema = {"type": "string"} if endpoint.page else schema_of[_key(Problem)]
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": {media: {"schema": schema}},
        }
    return responses


def _event_schema(endpoint: Endpoint, schema_of: dict[str, Any]) -> dict[str, Any]:
    """One event of a stream, as OpenAPI 3.2's ``itemSchema`` describes server-sent events
    (``event``, ``id``, ``retry`` and ``data``, here JSON with a schema per event name); 3.1
    has no such keyword, so ``schema`` says it, and tools that read streams (schemathesis)
    take it as each event's schema."""
    return {
        "description": "One event of the stream; `x-events` lists the data schema by name.",
        "oneOf": [
            {
                "title": f"event {name}",
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": name},
                    "id": {"type": "string"},
                    "retry": {"type": "integer"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": schema_of[_key(kind)],
                    },
                },
            }
            for name, kind in endpoint.events.items()
        ],
    }


async def openapi_json(call: Call[NoParameters]) -> Response:
    document: dict[str, Any] = call.request.app.state.openapi
    return json_response(document)


META_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/openapi.json", handler=openapi_json, operation="openapi",
        tag="meta", summary="This document", roles=None,
    ),
)  # fmt: skip
