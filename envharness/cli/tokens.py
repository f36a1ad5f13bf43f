"""``envharness token issue``, ``token list`` and ``token revoke``: the local service's credentials.

They need nothing but the store: tokens are kept hashed in it
(:class:`~envharness.store.tokens.TokenStore`), a SQLite store's or a PostgreSQL database's
``tokens`` table, and a secret is shown once, when it is issued.
"""

from __future__ import annotations

from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import CliError
from envharness.cli.options import JsonLines, acting_group, deprecated_form
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.store.locate import reading_store
from envharness.store.tokens import ROLES, TokenInfo, TokenStore

__all__ = ["app", "token", "token_issue", "token_list", "token_revoke", "token_table"]

app = acting_group(help="Issue, list and revoke the bearer tokens of the local service.")


Role = Annotated[
    str | None,
    typer.Option("--role", metavar="ROLE", help=f"The token's role: {', '.join(ROLES)}."),
]
Participant = Annotated[
    str | None,
    typer.Option("--participant", metavar="NAME", help="The participant (that role)."),
]
Sessions = Annotated[
    list[str] | None,
    typer.Option(
        "--session",
        metavar="ID",
        help="Bind a participant token to this session (repeat; default: all of its).",
    ),
]
Label = Annotated[
    str, typer.Option("--label", metavar="TEXT", help="A note shown by `token list`.")
]


@app.callback()
def token(
    ctx: typer.Context,
    role: Annotated[str | None, typer.Option("--role", hidden=True)] = None,
    participant: Annotated[str | None, typer.Option("--participant", hidden=True)] = None,
    session: Annotated[list[str] | None, typer.Option("--session", hidden=True)] = None,
    label: Annotated[str, typer.Option("--label", hidden=True)] = "",
) -> None:
    """The local service's bearer tokens: `token issue`, `token list`, `token revoke ID`."""
    if ctx.invoked_subcommand is not None:
        if role is not None or participant is not None or session or label:
            raise CliError("--role, --participant, --session and --label go after "
                           f"`token issue`, not with `token {ctx.invoked_subcommand}`")  # fmt: skip
        return
    if role is None:
        raise CliError(
            "use `token issue --role admin|viewer|participant`, `token list` or `token revoke ID`"
        )
    deprecated_form("token --role ...", "token issue --role ...")
    _issue(ctx, role, participant, session, label)


@app.command("issue")
def token_issue(
    ctx: typer.Context,
    role: Role = None,
    participant: Participant = None,
    session: Sessions = None,
    label: Label = "",
) -> None:
    """Issue a token; its secret is printed once, on stdout."""
    if role is None:
        raise CliError(f"give the token's role: --role {'|'.join(ROLES)}")
    _issue(ctx, role, participant, session, label)


def _issue(
    ctx: typer.Context, role: str, participant: str | None, session: list[str] | None, label: str
) -> None:
    store = CliState.of(ctx, postgres=True).location

    async def issue() -> tuple[str, TokenInfo]:
        async with reading_store(store) as reader:
            sessions = [(await reader.session(s)).id for s in session or ()]
            issued = await TokenStore(reader.backend).issue(
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


@app.command("list")
def token_list(
    ctx: typer.Context,
    as_json: JsonLines = False,
) -> None:
    """Every token issued, with its role and state (never a secret)."""
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> tuple[list[TokenInfo], str]:
        async with reading_store(store) as reader:
            tokens = TokenStore(reader.backend)
            return await tokens.tokens(), tokens.now()

    found, now = anyio.run(listed)
    if as_json:
        for info in found:
            typer.echo(msgspec.json.encode(info).decode())
        return
    if not found:
        typer.echo("no tokens; issue one with `envharness token issue --role viewer`", err=True)
        return
    for line in token_table(found, now):
        typer.echo(line)


@app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (tok_…).")],
) -> None:
    """Revoke a token for good: requests carrying it get 401 from now on."""
    store = CliState.of(ctx, postgres=True).location

    async def revoked() -> TokenInfo:
        async with reading_store(store) as reader:
            return await TokenStore(reader.backend).revoke(token_id)

    info = anyio.run(revoked)
    typer.echo(f"revoked {info.role} token {info.id}")


def token_table(found: list[TokenInfo], now: str) -> list[str]:
    """One row per token: id, role, participant, sessions, state, created, label."""
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
