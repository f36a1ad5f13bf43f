"""``envharness sessions list|show``, ``verify`` and ``export``: reading a store's sessions.

``sessions`` alone (list) and ``show SESSION`` are the older forms, kept as aliases that say
so on stderr. Each command reads through :func:`~envharness.store.locate.reading_store`,
which never creates a store and reads a PostgreSQL store as well (``--store postgresql://``),
and renders with :mod:`envharness.cli.render`. ``export snapshot ID`` is a form of ``export``
that :mod:`envharness.cli.snapshots` answers, on a store directory only.
"""

from __future__ import annotations

import contextlib
import shlex
from typing import Annotated, get_args

import anyio
import typer

from envharness.api.harness import MAX_COUNT
from envharness.cli.edge import EXIT_NO, CliError, ProgressLine, closing
from envharness.cli.options import HelpGroup, JsonLines, acting_group, check_choice, deprecated_form
from envharness.cli.render import Timeline, printable, session_json, session_table, verify_lines
from envharness.cli.snapshots import export_snapshot_command
from envharness.cli.state import CliState
from envharness.errors import DamagedStoreError
from envharness.records import Payload, Status, encode_record
from envharness.store import ChainBreak, RecordFilter, SessionInfo, VerifyReport
from envharness.store.locate import AnyStore, describe, reading_store
from envharness.store.verify import STORE

__all__ = ["app", "export", "group", "sessions", "sessions_list", "show", "verify"]

STATUSES = list(get_args(Status))
KINDS = sorted(str(member.__struct_config__.tag) for member in get_args(Payload))

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands, and the ``sessions`` group, to the
root."""

group = acting_group(help="The store's sessions: list them, or show one's timeline.")
app.add_typer(group, name="sessions", cls=HelpGroup)

StatusOption = Annotated[
    str | None,
    typer.Option("--status", metavar="STATUS", help=f"Only this status: {', '.join(STATUSES)}."),
]


@group.callback()
def sessions(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option("--status", hidden=True)] = None,
    as_json: Annotated[bool, typer.Option("--json", hidden=True)] = False,
) -> None:
    """The store's sessions: `sessions list`, `sessions show SESSION`."""
    if ctx.invoked_subcommand is not None:
        if status is not None or as_json:
            raise CliError(
                "--status and --json go after the subcommand: "
                f"envharness sessions {ctx.invoked_subcommand} ... --json"
            )
        return
    deprecated_form("sessions", "sessions list")
    _list_sessions(ctx, status, as_json)


@group.command("list")
def sessions_list(
    ctx: typer.Context, status: StatusOption = None, as_json: JsonLines = False
) -> None:
    """List the sessions in the store, oldest first."""
    _list_sessions(ctx, status, as_json)


def _list_sessions(ctx: typer.Context, status: str | None, as_json: bool) -> None:
    store = CliState.of(ctx, postgres=True).location
    check_choice("--status", status, STATUSES)

    async def listed() -> list[SessionInfo]:
        async with reading_store(store) as reader:
            return await reader.sessions(status=status)

    found = anyio.run(listed)
    if as_json:
        for info in found:
            typer.echo(session_json(info))
    elif found:
        for line in session_table(found):
            typer.echo(line)
    else:
        which = f" with status {status}" if status else ""
        typer.echo(f"no sessions{which} in {shlex.quote(printable(describe(store)))}", err=True)


@group.command("show")
def sessions_show(
    ctx: typer.Context,
    session: Annotated[
        str, typer.Argument(metavar="SESSION", help="A session id, or a unique prefix of one.")
    ],
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            metavar="KIND",
            help="Only records of this kind (repeat for more), e.g. action.blocked.",
        ),
    ] = None,
    participant: Annotated[
        str | None,
        typer.Option("--participant", metavar="NAME", help="Only this participant's records."),
    ] = None,
    turn: Annotated[
        int | None,
        typer.Option("--turn", metavar="N", min=0, max=MAX_COUNT, help="Only this turn."),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Show long values whole instead of cut.")
    ] = False,
) -> None:
    """Show a session's timeline, turn by turn."""
    _show(ctx, session, kind, participant, turn, full)


@app.command("show", hidden=True)
def show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(metavar="SESSION")],
    kind: Annotated[list[str] | None, typer.Option("--kind", metavar="KIND")] = None,
    participant: Annotated[str | None, typer.Option("--participant", metavar="NAME")] = None,
    turn: Annotated[int | None, typer.Option("--turn", metavar="N", min=0, max=MAX_COUNT)] = None,
    full: Annotated[bool, typer.Option("--full")] = False,
) -> None:
    """The older form of `sessions show SESSION`."""
    deprecated_form("show", "sessions show")
    _show(ctx, session, kind, participant, turn, full)


def _show(
    ctx: typer.Context,
    session: str,
    kind: list[str] | None,
    participant: str | None,
    turn: int | None,
    full: bool,
) -> None:
    store = CliState.of(ctx, postgres=True).location
    for value in kind or ():
        check_choice("--kind", value, KINDS)
    selection = RecordFilter(kinds=tuple(kind or ()), participant=participant, turn=turn)

    async def render() -> None:
        async with reading_store(store) as reader:
            await print_timeline(reader)

    async def print_timeline(reader: AnyStore) -> None:
        info = await reader.session(session)
        timeline = Timeline(info, full=full)
        for line in timeline.header():
            typer.echo(line)
        shown = 0
        async with closing(reader.records(info.id, selection)) as records:
            async for record in records:
                shown += 1
                for line in timeline.lines(record):
                    typer.echo(line)
        if not shown:
            typer.echo("no records match --kind/--participant/--turn", err=True)

    anyio.run(render)


@app.command("verify")
def verify(
    ctx: typer.Context,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Also check every index against its table (SQLite's integrity_check instead "
            "of its quick_check); slower on a large store.",
        ),
    ] = False,
) -> None:
    """Re-check the database file and every session's hash chain. Exit status 1 when anything
    is broken or damaged."""
    store = CliState.of(ctx, postgres=True).location
    checked = 0

    def tick(session_id: str) -> None:
        nonlocal checked
        checked += 1
        line.show(f"verifying: {checked} sessions")

    async def check() -> VerifyReport:
        async with contextlib.AsyncExitStack() as opened:
            try:  # a store whose WAL lost acknowledged commits is read as SQLite recovers it
                reader = await opened.enter_async_context(reading_store(store, damaged=True))
            except DamagedStoreError as damage:  # too damaged to open: verify's answer
                return VerifyReport(0, 0, (ChainBreak(STORE, None, str(damage)),))
            return await reader.verify(on_session=tick, full=full)

    with ProgressLine() as line:
        report = anyio.run(check)
    for text in verify_lines(report):
        typer.echo(text)
    if not report.ok:
        raise typer.Exit(EXIT_NO)


@app.command("export")
def export(
    ctx: typer.Context,
    session: Annotated[
        str,
        typer.Argument(
            metavar="SESSION | snapshot ID",
            help="A session id (or a unique prefix of one); or the word snapshot and a "
            "snapshot id.",
        ),
    ],
    snapshot_id: Annotated[str | None, typer.Argument(metavar="", show_default=False)] = None,
) -> None:
    """Stream a session's records, or a snapshot (`export snapshot ID`), to stdout as JSON lines.

    Each record line holds its payload exactly as digested, and its prev and digest. A
    snapshot is checked first and refused, naming the record, if its evidence was altered
    (docs/trajectories.md).
    """
    store = CliState.of(ctx, postgres=True).location
    if session == "snapshot":
        if snapshot_id is None:
            raise CliError("export snapshot needs the snapshot's id: envharness export snapshot ID")
        export_snapshot_command(store, snapshot_id)
        return
    if snapshot_id is not None:
        raise CliError(
            f"export takes one SESSION (or `snapshot ID`), not {session!r} {snapshot_id!r}"
        )
    out = typer.get_binary_stream("stdout")

    async def stream() -> None:
        async with reading_store(store) as reader:
            info = await reader.session(session)
            # Plain blocking writes: nothing else runs on this loop, and a slow reader should
            # slow the export down (the reader pages hold no lock while they wait).
            async with closing(reader.rows(info.id)) as rows:
                async for row in rows:
                    out.write(encode_record(row) + b"\n")
        out.flush()

    anyio.run(stream)
