"""``/docs``: the interactive API reference, drawn in the browser from ``/openapi.json``.

The page is a self-contained frame (``static/docs.js``) that renders the document
:mod:`envharness.service.http.openapi` builds and can try GET requests; it loads nothing from
anywhere but this server.
"""

from __future__ import annotations

from starlette.responses import Response

from envharness.service.pages.html import Html
from envharness.service.pages.layout import page
from envharness.service.params import NoParameters
from envharness.service.routing import Call, Endpoint

__all__ = ["REFERENCE_PAGES"]


async def docs_page(call: Call[NoParameters]) -> Response:
    body = Html(
        '<div class="page-head"><h1>API reference</h1><p class="sub">Every endpoint of this '
        'server, from <a href="/openapi.json">/openapi.json</a>. Try GET requests here: with '
        "a bearer token from <code>envharness token</code>, or with this browser's read-only "
        'sign-in.</p></div><div id="api-docs" class="docs"><p class="muted">Loading…</p></div>'
        '<script src="/static/docs.js"></script>'
    )
    return page(call.service, call.principal, title="API reference", body=body)


REFERENCE_PAGES: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/docs", handler=docs_page, operation="docsPage", tag="meta",
        summary="An interactive reference that renders this document", roles=None,
        media_type="text/html", page=True,
    ),
)  # fmt: skip
