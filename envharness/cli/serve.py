"""``envharness serve``: the viewer and the API for a store, on loopback.

``serve`` imports the service (Starlette, uvicorn: the ``server`` extra) only when it runs, so
every other command works without them. Its credentials are ``envharness token``'s
(:mod:`envharness.cli.tokens`).
"""

from __future__ import annotations

import contextlib
import tempfile
import webbrowser
from pathlib import Path
from typing import Annotated

import anyio
import typer

from envharness.cli.edge import CliError
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.store import read_store
from envharness.store.tokens import TokenStore

__all__ = ["DEFAULT_PORT", "app", "serve"]

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
        from envharness.service.server import (
            bind,
            login_link,
            run_service,
            write_sign_in_page,
        )
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
    typer.echo("            (one use, valid 10 minutes; the browser gets read-only access)")
    typer.echo(f"  API       {address.url}/docs  (needs a token: envharness token --role viewer)")
    typer.echo("Ctrl-C stops it.")

    with contextlib.ExitStack() as stack:
        # Not the link: a browser's command line is readable by every local user. A page only
        # this user can read (0600, in a 0700 directory) carries a code instead.
        private = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="envharness-")))
            if open_browser
            else None
        )

        async def opened() -> None:
            if private is None:
                return
            used = anyio.Event()
            page = write_sign_in_page(service, private, used.set)  # codes are the loop's: here
            if not await anyio.to_thread.run_sync(webbrowser.open, page.as_uri()):
                typer.echo("no browser could be opened: sign in with the link above", err=True)
            with anyio.move_on_after(service.logins.ttl):  # used or expired: its work is done
                await used.wait()
            await anyio.Path(page).unlink(missing_ok=True)

        try:
            anyio.run(lambda: run_service(service, sock, started=opened), backend="asyncio")
        except KeyboardInterrupt:
            pass  # uvicorn shut down cleanly on Ctrl-C and passed the signal on: the normal stop
        finally:
            sock.close()
    typer.echo("stopped", err=True)
