"""Endpoints as data: one table drives the routes, their checks, and the OpenAPI document.

Every route is an :class:`Endpoint`. :func:`build_route` wraps its handler with the same steps
in the same order — authenticate, check the role, parse the query — so no handler can forget
one, and :mod:`.http.openapi` describes exactly what the table declares.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from envharness.errors import EnvharnessError
from envharness.service.access import Access
from envharness.service.auth import (
    SAFE_METHODS,
    Principal,
    authenticate,
    confirm,
    confirmed_failure,
    require,
)
from envharness.service.params import NoParameters, parse_query
from envharness.service.problems import HTTPProblem, from_error
from envharness.service.state import Service
from envharness.service.wire.sessions import Problem
from envharness.store.tokens import Role

__all__ = [
    "ADMIN",
    "ANYONE",
    "READERS",
    "Call",
    "Endpoint",
    "ProblemView",
    "build_route",
    "json_response",
    "openapi_path",
    "viewer_page",
]

_Q = TypeVar("_Q", bound=msgspec.Struct)

ADMIN: frozenset[Role] = frozenset({"admin"})
READERS: frozenset[Role] = frozenset({"admin", "viewer"})
ANYONE: frozenset[Role] = frozenset({"admin", "viewer", "participant"})

_encoder = msgspec.json.Encoder()
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")


@dataclass(frozen=True, slots=True)
class Call(Generic[_Q]):
    """One request as a handler sees it: already authenticated, its query parsed."""

    request: Request
    service: Service
    principal: Principal | None
    query: _Q

    def path(self, name: str) -> Any:
        return self.request.path_params[name]

    @property
    def access(self) -> Access:
        """The caller's view of the store; only for endpoints that require a role."""
        if self.principal is None:
            raise HTTPProblem(401, "this needs a credential")
        return Access(self.service, self.principal)


Handler = Callable[[Call[Any]], Awaitable[Response]]
ProblemView = Callable[[Request, Service, Principal | None, HTTPProblem], Response]


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """One route and everything the OpenAPI document says about it."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    handler: Handler
    operation: str
    summary: str
    tag: str
    roles: frozenset[Role] | None
    """Who may call it; ``None``: no credential needed."""
    description: str = ""
    query: type[msgspec.Struct] = NoParameters
    body: Any = None
    """The msgspec type of the request body."""
    body_media_type: str = "application/json"
    response: Any = None
    """The msgspec type of a JSON answer (``media_type`` application/json)."""
    media_type: str = "application/json"
    other_media_types: tuple[str, ...] = ()
    """Further media types a success may have (the viewer's assets: CSS, scripts, SVG)."""
    status: int = 200
    errors: tuple[int, ...] = ()
    request_headers: Mapping[str, str] = field(default_factory=dict)
    """Header parameters the endpoint reads, with their descriptions."""
    events: Mapping[str, Any] = field(default_factory=dict)
    """A server-sent event stream's event names and the msgspec type of each one's data."""
    page: bool = False
    """A viewer page: errors render as HTML, and the sign-in page stands in for a 401."""
    cached_token: bool = False
    """Take the token from those already resolved and check it in the handler's own read
    through :class:`Access` (one worker-thread hop less; :mod:`.auth`). GET only: a handler
    that makes no such read has the check made after it returns, before anything is sent."""


def viewer_page(
    path: str,
    handler: Handler,
    operation: str,
    summary: str,
    *,
    roles: frozenset[Role],
    query: type[msgspec.Struct] = NoParameters,
    errors: tuple[int, ...] = (),
    description: str = "",
) -> Endpoint:
    """A page of the viewer: a GET answered with HTML, whose errors are pages too."""
    return Endpoint(
        method="GET", path=path, handler=handler, operation=operation, summary=summary,
        description=description, tag="viewer", roles=roles, query=query, media_type="text/html",
        errors=errors, page=True,
    )  # fmt: skip


def build_route(endpoint: Endpoint, service: Service, problem_page: ProblemView) -> Route:
    cached = endpoint.cached_token and endpoint.method == "GET"

    async def run(request: Request) -> Response:
        principal: Principal | None = None
        try:
            cookie_ok = request.method in SAFE_METHODS
            principal = await authenticate(request, service, cookie=cookie_ok, cached=cached)
            if endpoint.roles is not None:
                require(principal, endpoint.roles)
            query = parse_query(request.query_params, endpoint.query)
            response = await endpoint.handler(Call(request, service, principal, query))
            await confirm(principal, service)
            return response
        except HTTPProblem as problem:
            failure = problem
        except EnvharnessError as error:
            failure = from_error(error)
        if cached:
            failure = await confirmed_failure(principal, service, failure)
        if endpoint.page:
            return problem_page(request, service, principal, failure)
        return problem_response(failure)

    return Route(endpoint.path, run, methods=[endpoint.method], name=endpoint.operation)


def problem_response(problem: HTTPProblem) -> Response:
    body = Problem(status=problem.status, message=problem.message, parameter=problem.parameter)
    return json_response(body, status=problem.status, headers=problem.headers)


def json_response(
    value: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        _encoder.encode(value), status_code=status, headers=headers, media_type="application/json"
    )


def openapi_path(path: str) -> str:
    """``/sessions/{seq:int}`` as OpenAPI writes it: ``/sessions/{seq}``."""
    return _CONVERTOR.sub(r"{\1}", path)
