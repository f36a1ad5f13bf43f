"""The viewer's static files — stylesheet, scripts, icon — read once from ``static/``.

They are the only files of its own this server sends (a store's artifacts are the store's:
:mod:`envharness.service.http.artifacts`), served from memory at ``/static/{name}``; pages link
them by name (:mod:`.layout`, :mod:`.login`, :mod:`.reference`).
"""

from __future__ import annotations

from importlib import resources

from starlette.responses import Response

from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import Call, Endpoint

__all__ = ["ASSET_ENDPOINTS"]

_MEDIA_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """The files of ``static/``, read once."""
    folder = resources.files("envharness.service.pages") / "static"
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
