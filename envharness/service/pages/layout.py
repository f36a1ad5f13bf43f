"""The frame every viewer page shares: head, global navigation, who is signed in, footer.

Global destinations are data (:data:`DESTINATIONS`): Overview, Experiments, Sessions,
Trajectories (which also holds snapshots, datasets and sources) and Harnesses (the versions the
optimizer accepted, and its runs).
"""

from __future__ import annotations

from starlette.responses import HTMLResponse

from envharness._version import __version__
from envharness.records import TERMINAL_STATUSES
from envharness.service.auth import Principal
from envharness.service.pages.html import Html, html
from envharness.service.pages.widgets import nav_links
from envharness.service.state import Service

__all__ = ["DESTINATIONS", "READER_DESTINATIONS", "is_terminal", "page", "status_badge", "when"]

DESTINATIONS: tuple[tuple[str, str, str], ...] = (
    ("overview", "Overview", "/"),
    ("experiments", "Experiments", "/experiments"),
    ("sessions", "Sessions", "/sessions"),
    ("trajectories", "Trajectories", "/trajectories"),
    ("harnesses", "Harnesses", "/harnesses"),
)
"""(key, label, path) of each global destination, in navigation order."""
READER_DESTINATIONS = frozenset({"harnesses"})
"""Destinations only admin and viewer tokens may open: a participant is not shown them."""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{title} · envharness</title>
<link rel="stylesheet" href="/static/viewer.css">
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
</head>
<body>
<header class="top">
  <a class="brand" href="/"><span class="mark">◆</span> envharness</a>
  <nav class="global">{nav}</nav>
  <div class="who">{who}<a class="api" href="/docs">API</a></div>
</header>
<main>
{body}
</main>
<footer>envharness {version} · store <code>{store}</code></footer>
<script src="/static/viewer.js" defer></script>
</body>
</html>
"""


def page(
    service: Service,
    principal: Principal | None,
    *,
    title: str,
    body: Html,
    active: str = "",
    status: int = 200,
) -> HTMLResponse:
    shown = [
        (key, label, path)
        for key, label, path in DESTINATIONS
        if key not in READER_DESTINATIONS or principal is None or principal.role != "participant"
    ]
    nav = nav_links(shown, active)
    document = html(
        _PAGE,
        title=title,
        nav=nav,
        who=_who(principal),
        body=body,
        version=__version__,
        store=service.store.backend.location,
    )
    return HTMLResponse(document, status_code=status)


def _who(principal: Principal | None) -> Html:
    if principal is None:
        return Html("")
    if principal.role == "participant":
        label = html("participant <b>{name}</b>", name=principal.participant or "")
    elif principal.role == "viewer":
        label = Html("viewer · read-only")
    else:
        label = Html("admin")
    sign_out = Html("")
    if principal.via == "cookie":
        sign_out = Html(
            '<form method="post" action="/logout" class="inline">'
            '<button type="submit" class="link">Sign out</button></form>'
        )
    return html('<span class="role">{label}</span>{sign_out}', label=label, sign_out=sign_out)


def status_badge(status: str) -> Html:
    live = Html(' <span class="pulse" aria-hidden="true"></span>') if status == "running" else ""
    return html(
        '<span class="badge status-{status}" data-status="{status}">{status}{live}</span>',
        status=status,
        live=live,
    )


def is_terminal(status: str) -> bool:
    return status in TERMINAL_STATUSES


def when(timestamp: str) -> Html:
    """A stored UTC timestamp, to the second, with the exact value on hover."""
    short = timestamp[:19].replace("T", " ") if len(timestamp) >= 19 else timestamp
    return html(
        '<time datetime="{full}" title="{full}">{short}</time>', full=timestamp, short=short
    )
