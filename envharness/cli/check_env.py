"""``envharness check-env``: does an environment keep the contract the runtime relies on?

The checks are :mod:`envharness.api.conformance`'s; this prints one line per check as it is
decided (``PASS``, ``FAIL`` with the fix, ``SKIP`` with why), the mean time of each environment
method, and a summary. Exit statuses follow :mod:`envharness.cli.edge`: 0 when no check
failed, 1 when one did, 2 when there is nothing to check (not an environment, an unknown
Gymnasium id, a missing extra, an input the environment refuses).
"""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from envharness.api.conformance import (
    CHECKS,
    DEFAULT_TURNS,
    CheckResult,
    ConformanceReport,
    check_environment,
)
from envharness.api.harness import MAX_COUNT
from envharness.cli.edge import EXIT_NO, CliError
from envharness.cli.loading import environment_factory, parse_input
from envharness.cli.render import printable
from envharness.cli.verdicts import run_kit, tally, verdict_lines

__all__ = ["app", "check_env"]

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds ``check-env`` to the root."""

_WIDTH = max(len(name) for name in CHECKS)


@app.command("check-env")
def check_env(
    environment: Annotated[
        str | None,
        typer.Argument(
            metavar="ENVIRONMENT",
            help="The environment: a class or factory as module:attribute, gymnasium:ID, "
            "pettingzoo:MODULE or textworld:GAME_FILE.",
            show_default=False,
        ),
    ] = None,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            metavar="COMMAND",
            help="Check an environment program instead (any language, speaking the "
            "environment protocol), e.g. 'node my_env.js'.",
        ),
    ] = None,
    input: Annotated[
        str | None,
        typer.Option(
            "--input", metavar="JSON", help="The scenario input, a JSON object. Default: {}."
        ),
    ] = None,
    turns: Annotated[
        int,
        typer.Option(
            "--turns", metavar="N", min=1, max=MAX_COUNT, help="Turns each probe session plays."
        ),
    ] = DEFAULT_TURNS,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="The sessions' seed.")] = 0,
    participant: Annotated[
        list[str] | None,
        typer.Option(
            "--participant",
            metavar="NAME[=ROLE]",
            help="A participant to run (repeat for more); default: one per role, named after "
            "it. A PettingZoo game needs its agents' names, e.g. --participant player_0 "
            "--participant player_1.",
        ),
    ] = None,
) -> None:
    """Check that an environment keeps the contract its sessions rely on.

    Checked: its spec, encoding, determinism, checkpoint and restore, private observations
    and failures in resolve.

    The checks run short sessions with a probe agent that picks legal moves (from an action
    mask, admissible commands or the action schema), in a temporary store. Exit status 0 when
    no check failed, 1 when one did.
    """
    factory = environment_factory(environment, command, what="ENVIRONMENT")
    shown = f"--command {shlex.quote(command)}" if command is not None else str(environment)
    roster = dict(_participant(text) for text in participant or ())
    report = run_kit(
        f"checking {printable(shown)}",
        lambda show: check_environment(
            factory,
            input=parse_input(input),
            turns=turns,
            seed=seed,
            participants=roster or None,
            on_result=show,
        ),
        _show,
        interrupted="the check was stopped",
    )
    for line in _ending(report):
        typer.echo(line)
    if not report.ok:
        raise typer.Exit(EXIT_NO)


def _show(result: CheckResult) -> None:
    fix = (f"fix: {printable(result.fix)}",) if result.fix else ()
    for line in verdict_lines(result.status, result.name, _WIDTH, result.detail, *fix):
        typer.echo(line)


def _ending(report: ConformanceReport) -> list[str]:
    lines = []
    if report.timings:
        spent = ", ".join(
            f"{timing.method} {timing.mean_us:,.0f} us x{timing.calls}" for timing in report.timings
        )
        lines.append(f"mean time per call: {spent}")
    lines.append(printable(f"{report.environment}: {tally(report)}"))
    return lines


def _participant(text: str) -> tuple[str, str]:
    """``NAME`` (its role: the environment's only one, or the name itself) or ``NAME=ROLE``."""
    name, separator, role = (part.strip() for part in text.partition("="))
    if not name or (separator and not role):
        raise CliError(f"--participant {text!r} is not NAME or NAME=ROLE, e.g. alice=buyer")
    return name, role or ""
