"""``envharness protocol``: the agent protocol seen from the command line.

``check`` is how the author of an agent in any language learns whether their program will work
in a session: it runs the conformance suite (:mod:`envharness.protocol.conformance`) against
the program and prints one line per case. ``schema`` prints the JSON Schema of either direction,
for authors whose language can generate types or validate messages from it.

Exit statuses follow :mod:`envharness.cli.edge`: 0 when every case passed (skipped cases are
optional features the agent did not declare), 1 when one failed, 2 when the program cannot be
run at all (not found, not executable) or an option is wrong.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from envharness.cli.edge import EXIT_NO, CliError
from envharness.cli.options import check_choice
from envharness.cli.render import printable
from envharness.cli.verdicts import run_kit, tally, verdict_lines
from envharness.protocol import render_schemas
from envharness.protocol.conformance import (
    CASES,
    DEFAULT_REPLY_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
    CaseResult,
    ConformanceSettings,
    check_agent,
)

__all__ = ["app", "protocol_check", "protocol_schema"]

_NAME_WIDTH = max(len(case.name) for case in CASES)
_STDERR_LINES = 6
_DIRECTIONS = ("host-to-agent", "agent-to-host")

app = typer.Typer(
    name="protocol",
    help="The JSON-lines protocol external agents speak: check a program, print the schema.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command(
    "check",
    # Everything after PROGRAM belongs to the program: `check python3 -u agent.py` works too.
    context_settings={"allow_interspersed_args": False},
)
def protocol_check(
    program: Annotated[
        str,
        typer.Argument(
            metavar="PROGRAM",
            help="The agent program, as a session would run it (no shell is involved).",
        ),
    ],
    args: Annotated[
        list[str] | None,
        typer.Argument(metavar="ARGS", help="The program's arguments; put -- before PROGRAM."),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", metavar="SECONDS", help="How long the agent may take for each answer."
        ),
    ] = DEFAULT_REPLY_TIMEOUT,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            help="How long the agent has to exit after shutdown before it is terminated.",
        ),
    ] = DEFAULT_SHUTDOWN_GRACE,
    case: Annotated[
        list[str] | None,
        typer.Option(
            "--case",
            metavar="NAME",
            help=f"Run only this case; repeat for more. Cases: {', '.join(c.name for c in CASES)}.",
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="NAME=VALUE",
            help="A variable for the agent; it gets only PATH, HOME, locale, TZ, TMPDIR otherwise.",
        ),
    ] = None,
    cwd: Annotated[
        Path | None,
        typer.Option("--cwd", metavar="DIR", help="The agent's working directory."),
    ] = None,
) -> None:
    """Run the conformance suite against an agent program; one line per case.

    Each case starts the program afresh and stops it as a session would: shutdown, then
    SIGTERM, then SIGKILL to its process group. Exit status 0 when every case passed.
    """
    if not timeout > 0:
        raise CliError("--timeout must be more than 0 seconds")
    if not grace > 0:
        raise CliError("--grace must be more than 0 seconds")
    settings = ConformanceSettings(
        reply_timeout=timeout,
        shutdown_grace=grace,
        terminate_grace=min(grace, DEFAULT_TERMINATE_GRACE),
    )
    variables = dict(_variable(text) for text in env or ())
    command = [program, *(args or ())]
    report = run_kit(
        f"checking {printable(shlex.join(command))}",
        lambda show: check_agent(
            command, cwd=cwd, env=variables, settings=settings, cases=case, on_result=show
        ),
        _show,
        interrupted="every agent process was stopped",
    )
    typer.echo(tally(report))
    if not report.ok:
        raise typer.Exit(EXIT_NO)


@app.command("schema")
def protocol_schema(
    direction: Annotated[
        str,
        typer.Argument(metavar="DIRECTION", help="Which messages: host-to-agent or agent-to-host."),
    ],
) -> None:
    """Print the JSON Schema (2020-12) of the messages travelling in one direction."""
    check_choice("DIRECTION", direction, _DIRECTIONS)
    typer.echo(render_schemas()[f"{direction}.json"], nl=False)


def _show(result: CaseResult) -> None:
    """One line per case as it finishes; a failure also shows the end of the agent's stderr."""
    more: list[str] = []
    if result.stderr:
        more.append("the agent's stderr ended with:")
        more.extend(f"| {printable(line)}" for line in result.stderr.splitlines()[-_STDERR_LINES:])
    for line in verdict_lines(result.status, result.name, _NAME_WIDTH, result.detail, *more):
        typer.echo(line)


def _variable(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` for ``--env``; the value is kept exactly (it may be empty)."""
    name, separator, value = text.partition("=")
    if not separator or not name:
        raise CliError(f"--env {text!r} is not NAME=VALUE, e.g. --env MODEL=small")
    return name, value
