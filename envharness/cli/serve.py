"""``envharness serve``: the viewer and the API for a store, on loopback.

``serve`` imports the service (Starlette, uvicorn: the ``server`` extra) only when it runs, so
every other command works without them. Its credentials are ``envharness token``'s
(:mod:`envharness.cli.tokens`).
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
    _serve(CliState.of(ctx).store, host=host, port=port, open_browser=open_browser)


def _serve(store: Path, *, host: str, port: int, open_browser: bool) -> None:
    try:
        from envharness.service.server import bind, login_link, run_service
        from envharness.service.state import Service, loopback_address
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise CliError(
            f"serve needs the server extra ({exc.name} is missing): "
            "pip install 'envharness[server]'"
        ) from None
    address = loopback_address(host, port)
    reader = anyio.run(read_store, store)
    sock, address = bind(address)
    service = Service(store=reader, address=address, tokens=TokenStore(reader.directory))
    link = login_link(service)
    where = printable(str(store.resolve()))
    typer.echo(f"envharness viewer for {where}")
    typer.echo(f"  sign in   {link}")
    typer.echo("            (one use, valid 10 minutes; the browser gets read-only access;")
    again = shlex.join(["envharness", "--store", str(store.resolve()), "login-link"])
    typer.echo(f"            a fresh one while this runs: {printable(again)})")
    typer.echo(
        f"  API       {address.url}/docs  (needs a token: envharness token issue --role viewer)"
    )
    typer.echo("Ctrl-C stops it.")

    with contextlib.ExitStack() as stack:
        # Not the link: a browser's command line is readable by every local user. A page only
        # this user can read (0600, in a 0700 directory) carries a code instead.
        private = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="envharness-")))
            if open_browser
            else None
        )
        recorded = record_address(reader.directory, address.url)
        stack.callback(clear_address, recorded, address.url)

        async def opened() -> None:
            if private is not None:
                await sign_in_browser(service, private)

        try:
            anyio.run(lambda: run_service(service, sock, started=opened), backend="asyncio")
        except KeyboardInterrupt:
            pass  # uvicorn shut down cleanly on Ctrl-C and passed the signal on: the normal stop
        finally:
            sock.close()
    typer.echo("stopped", err=True)


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

    store = anyio.run(read_store, CliState.of(ctx).store).directory
    if port is not None:
        url = loopback_address(host, port).url
    else:
        recorded = read_address(store)
        if recorded is None:
            raise CliError(
                f"no `envharness serve` has recorded an address for {printable(str(store))}; "
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
