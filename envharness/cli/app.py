"""The ``envharness`` command: parse arguments, call the library once, render the answer.

Each command runs its async work with one ``anyio.run`` and reads through
:func:`~envharness.store.read_store` (which never creates a store) or writes through the
harness. Errors become exit statuses in :mod:`envharness.cli.edge`, for every command at once.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import anyio
import typer
from typer.core import TyperGroup

from envharness._version import __version__
from envharness.api.harness import DEFAULT_ACTION_TIMEOUT, MAX_COUNT
from envharness.cli.edge import (
    EXIT_INTERRUPTED,
    EXIT_NO,
    CliError,
    ProgressLine,
    closing,
    interruptible,
    translate_errors,
)
from envharness.cli.experiments import register_experiment_commands
from envharness.cli.loading import command_line_harness, make_cwd_importable, parse_input
from envharness.cli.manifest_run import is_manifest, run_manifest
from envharness.cli.optimize import register_optimizer_commands
from envharness.cli.options import ActionTimeout, Agents, JsonLines, Roles
from envharness.cli.protocol import protocol_app
from envharness.cli.quickstart import write_quickstart
from envharness.cli.render import (
    Timeline,
    printable,
    quickstart_lines,
    run_lines,
    session_json,
    session_table,
    verify_lines,
)
from envharness.cli.serve import register_service_commands
from envharness.cli.sources import register_source_commands
from envharness.cli.trajectories import export_snapshot_command, register_trajectory_commands
from envharness.contracts.scenario import Scenario
from envharness.errors import ScenarioInputError
from envharness.manifest import load_manifest
from envharness.records import Payload, Status, encode_record
from envharness.store import RecordFilter, SessionInfo, VerifyReport, read_store

__all__ = ["app", "main"]

DEFAULT_STORE = Path("environment-sessions")
STORE_ENV = "ENVHARNESS_STORE"

_STATUSES = list(get_args(Status))
_KINDS = sorted(str(member.__struct_config__.tag) for member in get_args(Payload))


class _Group(TyperGroup):
    """The root group: one place where every command's errors become exit statuses."""

    def invoke(self, ctx: Any) -> Any:
        with translate_errors():
            return super().invoke(ctx)


app = typer.Typer(
    name="envharness",
    cls=_Group,
    help="Run agents in persistent environments and inspect the hash-chained evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain output: help and usage errors print [brackets] as written
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(protocol_app)


@dataclass(frozen=True, slots=True)
class _Options:
    store: Path


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"envharness {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    store: Annotated[
        Path,
        typer.Option(
            "--store",
            envvar=STORE_ENV,
            metavar="PATH",
            help="The evidence store directory (created by commands that write).",
        ),
    ] = DEFAULT_STORE,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    ctx.obj = _Options(store=store.expanduser())


def _store(ctx: typer.Context) -> Path:
    options = ctx.find_object(_Options)
    return options.store if options is not None else DEFAULT_STORE


register_service_commands(app, _store)  # serve, token (envharness/cli/serve.py)
register_experiment_commands(app, _store)  # experiments (envharness/cli/experiments.py)
register_trajectory_commands(app, _store)  # trajectories, snapshot, dataset (cli/trajectories.py)
register_source_commands(app, _store)  # import, sources (envharness/cli/sources.py)
register_optimizer_commands(app, _store)  # selftest, optimize, harness (cli/optimize.py)


# -- writing -----------------------------------------------------------------------------------


@app.command()
def quickstart(
    ctx: typer.Context,
    turns: Annotated[
        int, typer.Option("--turns", metavar="N", min=1, help="Turns per session.")
    ] = 8,
) -> None:
    """Write a store of synthetic sessions to explore. Its numbers measure nothing."""
    store = _store(ctx)
    with ProgressLine() as line:
        summary = anyio.run(
            lambda: write_quickstart(
                store,
                turns=turns,
                progress=lambda done, planned: line.show(f"session {done}/{planned}"),
            )
        )
    for text in quickstart_lines(summary):
        typer.echo(text)


@app.command("run")
def run_command(
    ctx: typer.Context,
    environment: Annotated[
        str,
        typer.Argument(
            metavar="ENVIRONMENT",
            help="The environment class or factory, as module:attribute; or an experiment "
            "manifest, experiment.toml (docs/manifests.md).",
        ),
    ],
    agent: Agents = None,
    turns: Annotated[
        int | None,
        typer.Option("--turns", metavar="N", min=1, max=MAX_COUNT, help="Turns to run at most."),
    ] = None,
    role: Roles = None,
    scenario: Annotated[
        str, typer.Option("--scenario", metavar="ID", help="The scenario id recorded.")
    ] = "cli",
    input: Annotated[
        str | None,
        typer.Option(
            "--input", metavar="JSON", help="The scenario input, a JSON object. Default: {}."
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="The session's random seed.")
    ] = 0,
    action_timeout: ActionTimeout = DEFAULT_ACTION_TIMEOUT,
) -> None:
    """Run one session and record it. Exit status 0 when it completed, 1 when it did not.

    Given a manifest (experiment.toml) instead, run the experiment it describes.
    """
    store = _store(ctx)
    if is_manifest(environment):
        run_manifest(ctx, environment, store)
        return
    if not agent or turns is None:
        raise CliError("run needs --agent NAME=module:factory|COMMAND and --turns N")
    harness = command_line_harness(
        store, environment, agent, role, what="ENVIRONMENT", action_timeout=action_timeout
    )
    case = Scenario(id=scenario, input=parse_input(input))
    seen: list[str] = []

    def progress(session_id: str, turn: int, planned: int) -> None:
        seen[:] = [session_id]
        line.show(f"{session_id}  turn {turn}/{planned}")

    with ProgressLine() as line:
        try:
            result = anyio.run(
                lambda: interruptible(
                    lambda: harness.run(case, turns=turns, seed=seed, progress=progress)
                )
            )
        except ScenarioInputError as exc:
            raise CliError(f"{exc}; give the scenario input as --input JSON") from None
    if result is None:
        which = f"session {seen[0]}" if seen else "the session"
        typer.echo(f"interrupted: {which} was recorded as stopped", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    for text in run_lines(result):
        typer.echo(text)
    if result.status != "completed":
        raise typer.Exit(EXIT_NO)


@app.command("resume")
def resume_command(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="EXPERIMENT_OR_SESSION",
            help="The id (or a unique prefix) of an interrupted, stopped or paused session, "
            "or of an experiment (exp_...).",
        ),
    ],
    environment: Annotated[
        str,
        typer.Argument(
            metavar="ENVIRONMENT",
            help="The same code that ran it: module:attribute with --agent options, or the "
            "experiment's manifest (experiment.toml).",
        ),
    ],
    agent: Agents = None,
    role: Roles = None,
    declare_changes: Annotated[
        str | None,
        typer.Option(
            "--declare-changes",
            metavar="WHY",
            help="Resume even though the code differs from what the evidence recorded; "
            "the differences and this reason are recorded.",
        ),
    ] = None,
    action_timeout: ActionTimeout = DEFAULT_ACTION_TIMEOUT,
) -> None:
    """Continue an interrupted (crashed), stopped or paused session or experiment after its
    last complete turn. Exit status 0 when everything completed, 1 when not."""
    store = _store(ctx)
    if is_manifest(environment):
        if agent or role:
            raise CliError("the manifest names the agents; give no --agent or --role with it")
        make_cwd_importable()
        manifest = load_manifest(environment)
        harness = manifest.async_harness(store, hooks=manifest.load_hooks(store))
    elif not agent:
        raise CliError("resume needs the code that ran it: ENVIRONMENT and --agent, or a manifest")
    else:
        harness = command_line_harness(
            store, environment, agent, role, what="ENVIRONMENT", action_timeout=action_timeout
        )

    async def resume() -> tuple[str, int, int, str | None]:
        if target.startswith("exp_"):
            result = await harness.resume_experiment(target, declare_changes=declare_changes)
            return result.id, result.completed, result.total, None
        session = await harness.resume(target, declare_changes=declare_changes)
        done = 1 if session.status == "completed" else 0
        return session.id, done, 1, f"{session.status} after {session.turns_completed} turns"

    with ProgressLine():
        outcome = anyio.run(lambda: interruptible(resume))
    if outcome is None:
        typer.echo(f"interrupted: {target} was recorded as stopped", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    resumed, completed, total, detail = outcome
    typer.echo(f"resumed {resumed}: {detail or f'{completed} of {total} sessions completed'}")
    if completed != total:
        raise typer.Exit(EXIT_NO)


# -- reading -----------------------------------------------------------------------------------


@app.command()
def sessions(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", metavar="STATUS", help=f"Only this status: {', '.join(_STATUSES)}."
        ),
    ] = None,
    as_json: JsonLines = False,
) -> None:
    """List the sessions in the store, oldest first."""
    store = _store(ctx)
    _check_choice("--status", status, _STATUSES)

    async def listed() -> list[SessionInfo]:
        reader = await read_store(store)
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
        typer.echo(f"no sessions{which} in {shlex.quote(printable(str(store)))}", err=True)


@app.command()
def show(
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
    store = _store(ctx)
    for value in kind or ():
        _check_choice("--kind", value, _KINDS)
    selection = RecordFilter(kinds=tuple(kind or ()), participant=participant, turn=turn)

    async def render() -> None:
        reader = await read_store(store)
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


@app.command()
def verify(ctx: typer.Context) -> None:
    """Re-check every session's hash chain. Exit status 1 when anything is broken."""
    store = _store(ctx)
    checked = 0

    def tick(session_id: str) -> None:
        nonlocal checked
        checked += 1
        line.show(f"verifying: {checked} sessions")

    async def check() -> VerifyReport:
        reader = await read_store(store)
        return await reader.verify(on_session=tick)

    with ProgressLine() as line:
        report = anyio.run(check)
    for text in verify_lines(report):
        typer.echo(text)
    if not report.ok:
        raise typer.Exit(EXIT_NO)


@app.command()
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
    store = _store(ctx)
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
        reader = await read_store(store)
        info = await reader.session(session)
        # Plain blocking writes: nothing else runs on this loop, and a slow reader should
        # slow the export down (the reader pages hold no lock while they wait).
        async with closing(reader.rows(info.id)) as rows:
            async for row in rows:
                out.write(encode_record(row) + b"\n")
        out.flush()

    anyio.run(stream)


# -- entry point -------------------------------------------------------------------------------


def main() -> None:
    """The console script. After an interrupted ``run``, exit without waiting for threads.

    A synchronous agent that was mid-call when Ctrl-C came cannot be stopped; its worker thread
    was abandoned (the evidence is already closed), and waiting for it at interpreter exit
    would make Ctrl-C appear not to work.
    """
    try:
        app(prog_name="envharness")
    except SystemExit as exit_:
        if exit_.code == EXIT_INTERRUPTED and _busy_threads():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        raise


def _check_choice(option: str, value: str | None, choices: list[str]) -> None:
    if value is not None and value not in choices:
        raise CliError(f"{option} {value!r} is not one of: {', '.join(choices)}")


def _busy_threads() -> bool:
    current = threading.current_thread()
    return any(t is not current and not t.daemon and t.is_alive() for t in threading.enumerate())
