"""Signing the browser in with the one-time link, and out again.

``GET /login?code=…`` changes nothing: it shows a page whose form posts the code back (a
script submits it at once; without JavaScript, a button does). Only ``POST /login`` redeems
the code, so a link previewer or a prefetching browser that fetches the link cannot use it
up. ``serve --open`` brings the code as ``/login#code=…`` instead: the page's script reads the
fragment, which no request carries, and posts it the same way. The redeemed code becomes a
viewer token, stored hashed like any other (``token list`` shows it, ``token revoke`` ends it),
set as an ``HttpOnly; SameSite=Strict`` cookie. A code is ``serve``'s own (in memory) or one
``envharness login-link`` left in the store (:mod:`..link_codes`); a used or expired one gets
the "Link expired" page, which names the command for a fresh link.
"""

from __future__ import annotations

import datetime as dt
import shlex
from contextlib import aclosing
from typing import Annotated
from urllib.parse import parse_qs

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from envharness.service.codes import LOGIN_CODE_TTL
from envharness.service.link_codes import redeem_stored_code
from envharness.service.pages.html import Html, html
from envharness.service.pages.layout import page
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import Call, Endpoint
from envharness.service.state import Service

__all__ = ["BROWSER_SESSION_DAYS", "LOGIN_ENDPOINTS"]

BROWSER_SESSION_DAYS = 7
"""How long a browser stays signed in (its cookie and the token behind it)."""
MAX_FORM = 2048


class LoginForm(msgspec.Struct, frozen=True, kw_only=True):
    """What the sign-in form posts."""

    code: Annotated[str, msgspec.Meta(description="The one-time code from `serve`'s output.")]


class LoginQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    code: Annotated[
        str | None, msgspec.Meta(description="The one-time code from `serve`'s output.")
    ] = None


async def login_form(call: Call[LoginQuery]) -> Response:
    if call.principal is not None and call.principal.via == "cookie":
        return RedirectResponse("/", status_code=303)
    code = call.query.code
    if not code:
        body = Html(
            '<div class="signin card"><h1>Sign in to the viewer</h1><p>Open the link that '
            "<code>envharness serve</code> printed (it ends in <code>/login?code=…</code>), "
            "or start it with <code>--open</code>.</p>"
            # `serve --open` lands here with #code=… (never sent): login.js posts it.
            '<form method="post" action="/login" id="login-form" hidden>'
            '<input type="hidden" name="code" value=""></form></div>'
            '<script src="/static/login.js"></script>'
        )
        return page(call.service, None, title="Sign in", body=body)
    body = html(
        '<div class="signin card"><h1>Sign in to the viewer</h1>'
        "<p>This browser gets read-only access to the evidence in <code>{store}</code>.</p>"
        '<form method="post" action="/login" id="login-form">'
        '<input type="hidden" name="code" value="{code}">'
        '<button type="submit" class="button">Open the viewer</button></form></div>'
        '<script src="/static/login.js"></script>',
        store=call.service.store.backend.location,
        code=code,
    )
    return page(call.service, None, title="Sign in", body=body)


async def login(call: Call[NoParameters]) -> Response:
    form = await _form(call.request)
    code = (form.get("code") or [""])[0]
    service = call.service
    if not await _redeem(service, code):
        return _expired(call)
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(days=BROWSER_SESSION_DAYS)
    issued = await service.tokens.issue(
        "viewer",
        label="browser sign-in",
        expires_at=expires.isoformat(timespec="microseconds").replace("+00:00", "Z"),
    )
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        service.cookie_name,
        issued.secret,
        max_age=BROWSER_SESSION_DAYS * 86400,
        path="/",
        httponly=True,
        samesite="strict",
    )
    return response


async def _redeem(service: Service, code: str) -> bool:
    """A code ``serve`` issued (memory), else one ``login-link`` left in the store (a file)."""
    if not code:
        return False
    if service.logins.redeem(code):
        return True
    backend = service.store.backend
    return await anyio.to_thread.run_sync(lambda: redeem_stored_code(backend, code))


def _expired(call: Call[NoParameters]) -> Response:
    body = html(
        '<div class="signin card"><h1>Link expired</h1>'
        "<p>This sign-in link was already used or has expired (links work once, for "
        "{minutes} minutes). Get a new one from the running server with:</p>"
        "<pre><code>envharness --store {store} login-link</code></pre>"
        '<p><a href="/login">Sign in</a> with the new link.</p></div>',
        minutes=str(int(LOGIN_CODE_TTL // 60)),
        store=shlex.quote(call.service.store.backend.location),
    )
    return page(call.service, None, title="Link expired", body=body, status=400)


async def logout(call: Call[NoParameters]) -> Response:
    """Revoke the browser's token and forget the cookie. Accepts only the cookie itself."""
    service = call.service
    secret = call.request.cookies.get(service.cookie_name)
    if secret:
        info = await service.tokens.resolve(secret)
        if info is not None and info.role == "viewer":
            await service.tokens.revoke(info.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(service.cookie_name, path="/", httponly=True, samesite="strict")
    return response


async def _form(request: Request) -> dict[str, list[str]]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    if content_type != "application/x-www-form-urlencoded":
        raise HTTPProblem(415, "sign in through the form on /login")
    body = b""
    async with aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            body += chunk
            if len(body) > MAX_FORM:
                raise HTTPProblem(413, "the sign-in form is too large")
    return parse_qs(body.decode("utf-8", errors="replace"))


LOGIN_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/login", handler=login_form, operation="loginPage", tag="auth",
        summary="The sign-in page for the one-time link (changes nothing)", roles=None,
        query=LoginQuery, media_type="text/html", page=True,
    ),
    Endpoint(
        method="POST", path="/login", handler=login, operation="login", tag="auth",
        summary="Redeem a one-time code; sets the read-only viewer cookie",
        description="Form-encoded `code`. Answers 303 to `/` with the cookie, 400 if the code "
        "was used, expired or unknown.",
        roles=None, body=LoginForm, body_media_type="application/x-www-form-urlencoded",
        media_type="text/html", status=303, page=True, errors=(400, 413, 415),
    ),
    Endpoint(
        method="POST", path="/logout", handler=logout, operation="logout", tag="auth",
        summary="Sign this browser out and revoke its viewer token", roles=None,
        media_type="text/html", status=303, page=True,
    ),
)  # fmt: skip
