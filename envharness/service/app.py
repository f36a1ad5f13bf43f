"""The Starlette application: every endpoint table, in order, behind the guard.

:func:`create_app` takes a ready :class:`~envharness.service.state.Service` and builds nothing
else that holds state: the same function serves ``envharness serve`` (under uvicorn) and the
tests (under httpx's ASGI transport, on asyncio and trio).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from envharness.service.guard import Guard
from envharness.service.http.artifacts import ARTIFACT_ENDPOINTS
from envharness.service.http.datasets import DATASET_API_ENDPOINTS
from envharness.service.http.experiments import EXPERIMENT_API_ENDPOINTS
from envharness.service.http.imports import SOURCE_API_ENDPOINTS
from envharness.service.http.openapi import META_ENDPOINTS, openapi_document
from envharness.service.http.optimizer import HARNESS_API_ENDPOINTS
from envharness.service.http.sessions import API_ENDPOINTS
from envharness.service.http.snapshots import SNAPSHOT_API_ENDPOINTS
from envharness.service.http.trajectories import TRAJECTORY_API_ENDPOINTS
from envharness.service.pages.assets import ASSET_ENDPOINTS
from envharness.service.pages.compare import COMPARE_PAGES
from envharness.service.pages.experiments import EXPERIMENT_PAGES
from envharness.service.pages.login import LOGIN_ENDPOINTS
from envharness.service.pages.optimizer import HARNESS_PAGES
from envharness.service.pages.progression import PROGRESSION_PAGES
from envharness.service.pages.reference import REFERENCE_PAGES
from envharness.service.pages.sessions import SESSION_PAGES
from envharness.service.pages.snapshots import SNAPSHOT_PAGES
from envharness.service.pages.store import STORE_PAGES, problem_page
from envharness.service.pages.trajectories import TRAJECTORY_PAGES
from envharness.service.problems import HTTPProblem
from envharness.service.routing import Endpoint, build_route, problem_response
from envharness.service.state import Service

__all__ = ["ENDPOINTS", "create_app"]

ENDPOINTS: tuple[Endpoint, ...] = (
    *API_ENDPOINTS,
    *ARTIFACT_ENDPOINTS,
    *EXPERIMENT_API_ENDPOINTS,
    *TRAJECTORY_API_ENDPOINTS,
    *SNAPSHOT_API_ENDPOINTS,
    *DATASET_API_ENDPOINTS,
    *SOURCE_API_ENDPOINTS,
    *HARNESS_API_ENDPOINTS,
    *STORE_PAGES,
    *EXPERIMENT_PAGES,
    *SESSION_PAGES,
    *PROGRESSION_PAGES,
    *TRAJECTORY_PAGES,
    *SNAPSHOT_PAGES,
    *HARNESS_PAGES,
    *COMPARE_PAGES,
    *LOGIN_ENDPOINTS,
    *META_ENDPOINTS,
    *REFERENCE_PAGES,
    *ASSET_ENDPOINTS,
)
"""Every route the service has; the OpenAPI document lists exactly these."""


def create_app(service: Service) -> Starlette:
    routes = [build_route(endpoint, service, problem_page) for endpoint in ENDPOINTS]

    async def unrouted(request: Request, exc: Exception) -> Response:
        """No route (404) or no such method on one (405), answered like every other error."""
        assert isinstance(exc, HTTPException)
        message = (
            "no such page or endpoint" if exc.status_code == 404 else "method not allowed here"
        )
        problem = HTTPProblem(exc.status_code, message, headers=dict(exc.headers or {}))
        if request.url.path.startswith("/api/"):
            return problem_response(problem)
        return problem_page(request, service, None, problem)

    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                Guard,
                allowed_hosts=service.address.allowed_hosts,
                allowed_origins=service.address.allowed_origins,
            )
        ],
        exception_handlers={404: unrouted, 405: unrouted},
    )
    app.state.service = service
    app.state.openapi = openapi_document(ENDPOINTS, cookie_name=service.cookie_name)
    return app
