"""The ``envharness`` command: the root app, its options, and where every command is added.

Each command is a plain function in its own module: parse arguments, call the library once,
render the answer. It runs its async work with one ``anyio.run`` and reads through
:func:`~envharness.store.read_store` (which never creates a store) or writes through the
harness. The root options reach it as a :class:`~envharness.cli.state.CliState` on the typer
context. Errors become exit statuses in :mod:`envharness.cli.edge`, for every command at once.

The order in which the modules' apps are added below is the order ``envharness --help``
lists the commands in; the package docstring (:mod:`envharness.cli`) maps the modules.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Annotated, Any

import typer

from envharness._version import __version__
from envharness.cli import (
    artifacts,
    check_env,
    control,
    copy_store,
    datasets,
    experiments,
    harness_versions,
    lifecycle,
    optimize,
    protocol,
    run,
    serve,
    sessions,
    snapshots,
    sources,
    tokens,
    trajectories,
)
from envharness.cli.edge import EXIT_INTERRUPTED, translate_errors
from envharness.cli.help_ranges import drop_unreachable_bounds
from envharness.cli.options import HelpGroup
from envharness.cli.state import DEFAULT_STORE, STORE_ENV, CliState

__all__ = ["app", "main"]


class _Group(HelpGroup):
    """The root group: one place where every command's errors become exit statuses, and
    where every command's help leaves out bounds nobody could meet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        drop_unreachable_bounds(self)

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

# Modules whose app has no name add their commands to the root itself; the others are groups.
# Typer lists the root's commands in the order they are added here.
app.add_typer(serve.app)
app.add_typer(trajectories.app)
app.add_typer(sources.app)
app.add_typer(optimize.app)
app.add_typer(run.app)
app.add_typer(lifecycle.app)
app.add_typer(control.app)
app.add_typer(sessions.app)
app.add_typer(artifacts.app)
app.add_typer(check_env.app)
app.add_typer(copy_store.app)
app.add_typer(protocol.app, cls=HelpGroup)  # named "protocol" by its module
app.add_typer(tokens.app, name="token", cls=HelpGroup)
app.add_typer(experiments.app, name="experiments", cls=HelpGroup)
app.add_typer(snapshots.app, name="snapshot", cls=HelpGroup)
app.add_typer(datasets.app, name="dataset", cls=HelpGroup)
app.add_typer(harness_versions.app, name="harness", cls=HelpGroup)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"envharness {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    store: Annotated[
        str,  # not a Path: that would collapse the // of a postgresql:// URL
        typer.Option(
            "--store",
            envvar=STORE_ENV,
            metavar="PATH|URL",
            help="The evidence store directory (created by commands that write), or a "
            "postgresql:// URL for the commands that read one (docs/postgresql.md).",
        ),
    ] = str(DEFAULT_STORE),
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Parse the root options once; every command reads them with ``CliState.of(ctx)``."""
    ctx.obj = CliState.parsed(ctx, store)


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


def _busy_threads() -> bool:
    current = threading.current_thread()
    return any(t is not current and not t.daemon and t.is_alive() for t in threading.enumerate())
