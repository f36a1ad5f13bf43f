"""``envharness serve`` and ``envharness token``: the local service and its credentials.

``serve`` imports the service (Starlette, uvicorn: the ``server`` extra) only when it runs, so
every other command works without them. ``token`` needs nothing but the store.
"""

from __future__ import annotations

import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import CliError
from envharness.cli.options import JsonLines, acting_group
from envharness.cli.render import printable
from envharness.store import read_store
from envharness.store.tokens import ROLES, TokenInfo, TokenStore

__all__ = ["register_service_commands"]

DEFAULT_PORT = 8765

StoreOf = Callable[[typer.Context], Path]


def register_service_commands(app: typer.Typer, store_of: StoreOf) -> None:
    """Add ``serve`` and the ``token`` group to ``app``; ``store_of`` finds --store."""

    @app.command()
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
        _serve(store_of(ctx), host=host, port=port, open_browser=open_browser)

    token_app = acting_group(
        app, "token", help="Issue, list and revoke the bearer tokens of the local service."
    )

    @token_app.callback()
    def token(
        ctx: typer.Context,
        role: Annotated[
            str | None,
            typer.Option("--role", metavar="ROLE", help=f"Issue a token: {', '.join(ROLES)}."),
        ] = None,
        participant: Annotated[
            str | None,
            typer.Option("--participant", metavar="NAME", help="The participant (that role)."),
        ] = None,
        session: Annotated[
            list[str] | None,
            typer.Option(
                "--session",
                metavar="ID",
                help="Bind a participant token to this session (repeat; default: all of its).",
            ),
        ] = None,
        label: Annotated[
            str, typer.Option("--label", metavar="TEXT", help="A note shown by `token list`.")
        ] = "",
    ) -> None:
        """Issue a token (prints its secret once, on stdout), or list / revoke them."""
        if ctx.invoked_subcommand is not None:
            if role is not None or participant is not None or session or label:
                raise CliError("--role, --participant, --session and --label issue a token; "
                               f"they do not go with `token {ctx.invoked_subcommand}`")  # fmt: skip
            return
        if role is None:
            raise CliError(
                "give --role admin|viewer|participant to issue a token, or use "
                "`token list` / `token revoke ID`"
            )
        store = store_of(ctx)

        async def issue() -> tuple[str, TokenInfo]:
            reader = await read_store(store)
            sessions = [(await reader.session(s)).id for s in session or ()]
            issued = await TokenStore(reader.directory).issue(
                role, participant=participant, sessions=sessions or None, label=label
            )
            return issued.secret, issued.info

        secret, info = anyio.run(issue)
        typer.echo(secret)
        scope = f" for participant {info.participant}" if info.participant else ""
        typer.echo(
            f"issued {info.role} token {info.id}{scope}; it is shown only now "
            f"(revoke: envharness token revoke {info.id})",
            err=True,
        )

    @token_app.command("list")
    def list_tokens(
        ctx: typer.Context,
        as_json: JsonLines = False,
    ) -> None:
        """Every token issued, with its role and state (never a secret)."""
        store = store_of(ctx)

        async def listed() -> tuple[list[TokenInfo], str]:
            tokens = TokenStore((await read_store(store)).directory)
            return await tokens.tokens(), tokens.now()

        found, now = anyio.run(listed)
        if as_json:
            for info in found:
                typer.echo(msgspec.json.encode(info).decode())
            return
        if not found:
            typer.echo("no tokens; issue one with `envharness token --role viewer`", err=True)
            return
        for line in _token_table(found, now):
            typer.echo(line)

    @token_app.command("revoke")
    def revoke(
        ctx: typer.Context,
        token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (tok_…).")],
    ) -> None:
        """Revoke a token for good: requests carrying it get 401 from now on."""
        store = store_of(ctx)

        async def revoked() -> TokenInfo:
            return await TokenStore((await read_store(store)).directory).revoke(token_id)

        info = anyio.run(revoked)
        typer.echo(f"revoked {info.role} token {info.id}")


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
    typer.echo("            (one use, valid 10 minutes; the browser gets read-only access)")
    typer.echo(f"  API       {address.url}/docs  (needs a token: envharness token --role viewer)")
    typer.echo("Ctrl-C stops it.")

    async def opened() -> None:
        if open_browser:
            await anyio.to_thread.run_sync(webbrowser.open, link)

    try:
        anyio.run(lambda: run_service(service, sock, started=opened), backend="asyncio")
    except KeyboardInterrupt:
        pass  # uvicorn shut down cleanly on Ctrl-C and passed the signal on: the normal stop
    finally:
        sock.close()
    typer.echo("stopped", err=True)


def _token_table(found: list[TokenInfo], now: str) -> list[str]:
    rows = [
        (
            info.id,
            info.role,
            info.participant or "",
            "all" if info.sessions is None else ",".join(s[:12] for s in info.sessions),
            "revoked" if info.revoked_at else ("active" if info.active(now) else "expired"),
            info.created_at[:19].replace("T", " ") + "Z",
            printable(info.label),
        )
        for info in found
    ]
    header = ("id", "role", "participant", "sessions", "state", "created", "label")
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True))]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return lines
