"""Running the service: bind a loopback socket, serve the app with uvicorn, stop on Ctrl-C.

The socket is bound here, before uvicorn starts, so that a port in use is a clear error
instead of a log line, ``--port 0`` can pick a free port, and the sign-in link printed names
the port actually bound. uvicorn runs on asyncio (it supports nothing else); the application
itself is backend-neutral and is tested on trio as well.
"""

from __future__ import annotations

import errno
import html
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import uvicorn

from envharness.errors import ConfigurationError
from envharness.service.app import create_app
from envharness.service.state import Address, Service

__all__ = ["GRACEFUL_SHUTDOWN_S", "bind", "login_link", "run_service", "write_sign_in_page"]

BACKLOG = 128
"""Connections the kernel holds for the server while it starts (uvicorn's default too)."""
GRACEFUL_SHUTDOWN_S = 1
"""Seconds open requests get after Ctrl-C; live streams never finish by themselves."""


def bind(address: Address) -> tuple[socket.socket, Address]:
    """A socket bound to ``address`` (a loopback address), already listening, and the address
    it really got. Listening at once lets a client that follows the printed link before
    uvicorn has started wait in the backlog instead of being refused."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on connections accepted
    # from a socket that says it is TCP. Without it Nagle's algorithm holds the last segment
    # of each answer until the client's delayed ACK (~40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"port {address.port} on {address.host} is in use (another `envharness serve`?);"
                " stop it, or pass --port with another number (--port 0 picks a free one)"
            ) from None
        raise ConfigurationError(f"cannot listen on {address.url}: {exc.strerror}") from None
    return sock, Address(address.host, sock.getsockname()[1])


def login_link(service: Service) -> str:
    """A fresh one-time sign-in link for this service."""
    return f"{service.address.url}/login?code={service.logins.issue()}"


SIGN_IN_PAGE = """<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={target}">
<title>envharness viewer: signing in</title>
<p>Signing in to the envharness viewer&hellip; <a href="{target}">continue</a></p>
"""


def write_sign_in_page(
    service: Service, directory: Path, on_redeem: Callable[[], None] | None = None
) -> Path:
    """A page that signs a browser in with a fresh one-time code (``on_redeem``: see
    :meth:`~envharness.service.codes.LoginCodes.issue`).

    ``serve --open`` hands the browser this file's path, never the code: a browser's command
    line is readable by every local user (``/proc/PID/cmdline``). The file is created for this
    user alone (0600; ``directory`` should be private too) and sends the browser on to
    ``/login#code=...``: a fragment never leaves the browser, so the code is in no request
    line and no log either; the sign-in page's script posts it.
    """
    code = service.logins.issue(on_redeem=on_redeem)
    target = html.escape(f"{service.address.url}/login#code={code}", quote=True)
    path = directory / "sign-in.html"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8") as file:
        file.write(SIGN_IN_PAGE.format(target=target))
    return path


async def run_service(
    service: Service,
    sock: socket.socket,
    *,
    started: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve until uvicorn is told to stop (Ctrl-C, SIGTERM); ``started`` runs once it listens."""
    config = uvicorn.Config(
        create_app(service),
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.05)
        if started is not None:
            await started()

    async with anyio.create_task_group() as group:
        group.start_soon(announce)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()
