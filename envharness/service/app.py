"""The Starlette application: every endpoint table, the guard, the viewer's static assets.

:func:`create_app` takes a ready :class:`~envharness.service.state.Service` and builds nothing
else that holds state: the same function serves ``envharness serve`` (under uvicorn) and the
tests (under httpx's ASGI transport, on asyncio and trio).
"""

from __future__ import annotations

from importlib import resources

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from envharness.service.api import API_ENDPOINTS
from envharness.service.compare_pages import COMPARE_PAGES
from envharness.service.dataset_api import DATASET_API_ENDPOINTS
from envharness.service.experiment_api import EXPERIMENT_API_ENDPOINTS
from envharness.service.experiment_pages import EXPERIMENT_PAGES
from envharness.service.guard import Guard
from envharness.service.harness_api import HARNESS_API_ENDPOINTS
from envharness.service.harness_pages import HARNESS_PAGES
from envharness.service.login import LOGIN_ENDPOINTS
from envharness.service.openapi import META_ENDPOINTS, openapi_document
from envharness.service.pages import STORE_PAGES, problem_page
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.progression import PROGRESSION_PAGES
from envharness.service.routing import Call, Endpoint, build_route, problem_response
from envharness.service.session_pages import SESSION_PAGES
from envharness.service.snapshot_api import SNAPSHOT_API_ENDPOINTS
from envharness.service.snapshot_pages import SNAPSHOT_PAGES
from envharness.service.source_api import SOURCE_API_ENDPOINTS
from envharness.service.state import Service
from envharness.service.trajectory_api import TRAJECTORY_API_ENDPOINTS
from envharness.service.trajectory_pages import TRAJECTORY_PAGES

__all__ = ["ENDPOINTS", "create_app"]

_MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """The files of ``static/``, read once: the only files this server ever sends."""
    folder = resources.files("envharness.service") / "static"
    assets = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _MEDIA_TYPES:
            assets[entry.name] = (entry.read_bytes(), _MEDIA_TYPES[suffix])
    return assets


_ASSETS = _load_assets()
_ASSET_TYPES = sorted({media_type.split(";")[0] for media_type in _MEDIA_TYPES.values()})


async def static_asset(call: Call[NoParameters]) -> Response:
    found = _ASSETS.get(call.path("name"))
    if found is None:
        raise HTTPProblem(404, "no such asset")
    data, media_type = found
    return Response(data, media_type=media_type, headers={"Cache-Control": "no-cache"})


ASSET_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/static/{name}", handler=static_asset, operation="asset",
        tag="viewer", summary="The viewer's stylesheet, scripts and icon", roles=None,
        media_type=_ASSET_TYPES[0], other_media_types=tuple(_ASSET_TYPES[1:]), errors=(404,),
    ),
)  # fmt: skip

ENDPOINTS: tuple[Endpoint, ...] = (
    *API_ENDPOINTS,
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
