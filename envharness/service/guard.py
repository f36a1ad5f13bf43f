"""Checks every request passes before routing, and headers every answer carries.

- **Host**: the Host header must name this server (``127.0.0.1:8765``, ``localhost:8765``).
  A page on another site that rebinds its own domain to 127.0.0.1 (DNS rebinding) sends its
  own domain as Host and is refused with 400 before any handler runs.
- **Origin**: a request that may change something (any method but GET and HEAD) carrying an
  ``Origin`` or ``Sec-Fetch-Site`` that is not this server is refused with 403. There is no
  CORS: no ``Access-Control-*`` header is ever sent, so browsers keep other sites' scripts
  from reading any answer.
- **Headers**: a Content-Security-Policy that admits only this server's own scripts and
  styles (no inline script), no framing, no referrer beyond this server (a sign-in link must not
  leak to another site; ``no-referrer`` would make browsers send ``Origin: null`` on this
  server's own forms), no MIME sniffing, and no caching of evidence.
"""

from __future__ import annotations

import msgspec
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envharness.service.wire.sessions import Problem

__all__ = ["SECURITY_HEADERS", "Guard"]

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_SAFE = frozenset({"GET", "HEAD"})


class Guard:
    def __init__(
        self, app: ASGIApp, *, allowed_hosts: frozenset[str], allowed_origins: frozenset[str]
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if host.lower() not in self.allowed_hosts:  # a host name is case-insensitive
            expected = ", ".join(sorted(self.allowed_hosts))
            await _refuse(
                send, 400,
                f"Host {host!r} is not this server ({expected}); requests must name it by its "
                "loopback address",
            )  # fmt: skip
            return
        if scope["method"] not in _SAFE:
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            if (origin is not None and origin not in self.allowed_origins) or site in (
                "cross-site",
                "same-site",
            ):
                await _refuse(send, 403, "cross-site requests may not change anything here")
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                if b"cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _refuse(send: Send, status: int, message: str) -> None:
    body = msgspec.json.encode(Problem(status=status, message=message))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
