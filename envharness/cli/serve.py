"""``envharness serve``: the viewer and the API for a store, on loopback.

``serve`` imports the service (Starlette, uvicorn: the ``server`` extra) only when it runs, so
every other command works without them. Its credentials are ``envharness token``'s
(:mod:`envharness.cli.tokens`). A PostgreSQL store is served the same way; the store stays open
for as long as it is served, and what is printed names it without its password.
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import tempfile
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import anyio
import typer

from envharness.cli.edge import CliError
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.service.link_codes import (
    clear_address,
    issue_stored_code,
    read_address,
    record_address,
)
from envharness.store import read_store
from envharness.store.locate import describe, postgres_url, reading_store
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.tokens import TokenStore

if TYPE_CHECKING:
    from envharness.service.state import Service

__all__ = ["DEFAULT_PORT", "NO_BROWSER", "app", "login_link_command", "serve", "sign_in_browser"]

DEFAULT_PORT = 8765

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds this command to the root."""


@app.command("serve")
def serve(
    ctx: typer.Context,
    port: Annotated[
        int,
        typer.Option("--port", metavar="N", help="The port (0: any free one).", min=0),
    ] = DEFAULT_PORT,
    host: Annotated[
        str,
        typer.Option(
            "--host", metavar="ADDRESS", help="A loopback address: 127.0.0.1, ::1, localhost."
        ),
    ] = "127.0.0.1",
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the viewer in a browser, signed in.")
    ] = False,
) -> None:
    """Serve the viewer and the API for this store on loopback, until Ctrl-C.

    Prints a one-time sign-in link for the browser (read-only); API clients use a
    token from `envharness token`.
    """
    location = CliState.of(ctx, postgres=True).location
    _serve(location, host=host, port=port, open_browser=open_browser)


def _serve(location: Path | str, *, host: str, port: int, open_browser: bool) -> None:
    try:
        from envharness.service.server import bind
        from envharness.service.state import Service, loopback_address
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise CliError(
            f"serve needs the server extra ({exc.name} is missing): "
            "pip install 'envharness[server]'"
        ) from None
    address = loopback_address(host, port)
    shown = (
        describe(location) if postgres_url(location) is not None else str(Path(location).resolve())
    )

    async def serving() -> None:
        async with reading_store(location) as reader:
            tokens = TokenStore(reader.backend)
            await tokens.check_grants()
            sock, bound = bind(address)
            try:
                service = Service(store=reader, address=bound, tokens=tokens)
                _announce(service, shown)
                await _serve_service(service, sock, open_browser=open_browser)
            finally:
                sock.close()

    # uvicorn shuts down cleanly on Ctrl-C and passes the signal on: the normal stop.
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serving, backend="asyncio")
    typer.echo("stopped", err=True)


def _announce(service: Service, shown: str) -> None:
    """The sign-in link, how to get another, and where the API is."""
    from envharness.service.server import login_link

    typer.echo(f"envharness viewer for {printable(shown)}")
    typer.echo(f"  sign in   {login_link(service)}")
    typer.echo("            (one use, valid 10 minutes; the browser gets read-only access;")
    again = shlex.join(["envharness", "--store", shown, "login-link"])
    typer.echo(f"            a fresh one while this runs: {printable(again)})")
    typer.echo(
        f"  API       {service.address.url}/docs  (needs a token: envharness token issue "
        "--role viewer)"
    )
    typer.echo("Ctrl-C stops it.")


async def _serve_service(service: Service, sock: socket.socket, *, open_browser: bool) -> None:
    """Serve until stopped, with the address recorded for ``login-link`` meanwhile."""
    from envharness.service.server import run_service

    backend = service.store.backend
    url = service.address.url
    recorded = await anyio.to_thread.run_sync(record_address, backend, url)
    try:
        with contextlib.ExitStack() as stack:
            # Not the link: a browser's command line is readable by every local user. A page
            # only this user can read (0600, in a 0700 directory) carries a code instead.
            private = (
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="envharness-")))
                if open_browser
                else None
            )

            async def opened() -> None:
                if private is not None:
                    await sign_in_browser(service, private)

            await run_service(service, sock, started=opened)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(clear_address, recorded, url)


NO_BROWSER = (
    "--open: no browser could be started on this machine; open the 'sign in' link printed "
    "above in a browser that can reach it (for a fresh link: envharness login-link)"
)


async def sign_in_browser(
    service: Service, private: Path, *, open_url: Callable[[str], bool] = webbrowser.open
) -> bool:
    """Open the default browser on a private sign-in page; False (and says so) without one.

    The page is removed once its code is used or expired, or at once when no browser took it.
    """
    from envharness.service.server import write_sign_in_page

    used = anyio.Event()
    page = write_sign_in_page(service, private, used.set)  # codes are the loop's: here
    try:
        if not await anyio.to_thread.run_sync(open_url, page.as_uri()):
            typer.echo(NO_BROWSER, err=True)
            return False
        with anyio.move_on_after(service.logins.ttl):  # used or expired: its work is done
            await used.wait()
        return True
    finally:
        await anyio.Path(page).unlink(missing_ok=True)


@app.command("login-link")
def login_link_command(
    ctx: typer.Context,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            metavar="N",
            help="The server's port (default: the one serve recorded).",
            min=1,
            max=65535,
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option("--host", metavar="ADDRESS", help="The server's loopback address."),
    ] = "127.0.0.1",
) -> None:
    """Print a fresh one-time sign-in link for the viewer already running on this store.

    No restart needed: the running `serve` accepts it (one use, valid 10 minutes, read-only).
    """
    from envharness.service.state import loopback_address

    location = CliState.of(ctx, postgres=True).location
    url_given = postgres_url(location)
    # A PostgreSQL store's codes are this user's files, found by its server and database:
    # nothing to read from the database itself.
    store: Path | PostgresBackend = (
        anyio.run(read_store, Path(location)).directory
        if url_given is None
        else PostgresBackend(url_given)
    )
    shown = describe(location) if url_given is not None else str(store)
    if port is not None:
        url = loopback_address(host, port).url
    else:
        recorded = read_address(store)
        if recorded is None:
            raise CliError(
                f"no `envharness serve` has recorded an address for {printable(shown)}; "
                "start one (envharness serve), or give the port it listens on (--port N)"
            )
        parsed = urlsplit(recorded)
        url = loopback_address(parsed.hostname or "", parsed.port or 0).url
    if not _answers(url):
        raise CliError(
            f"no viewer answers at {url}; start one with `envharness serve`"
            + ("" if port is not None else ", or give its port with --port N")
        )
    code = issue_stored_code(store)
    typer.echo(f"{url}/login?code={code}")
    typer.echo("one use, valid 10 minutes; the browser gets read-only access", err=True)


def _answers(url: str) -> bool:
    """Whether something listens at ``url`` (a recorded address outlives a killed server)."""
    parsed = urlsplit(url)
    try:
        with socket.create_connection((parsed.hostname or "", parsed.port or 0), timeout=2):
            return True
    except OSError:
        return False
