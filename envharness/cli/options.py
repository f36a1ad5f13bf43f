"""Declarations several commands share, made once so that they read and behave alike.

``--json`` on a listing prints one JSON object per line; ``run`` and ``resume`` take the same
``--environment``, ``--environment-command``, ``--agent``, ``--role`` and ``--action-timeout``,
since a resume needs the code that ran; ``experiments`` and ``token`` are groups that act on
their own when given no subcommand; and an option limited to a few words says so in one way
(:func:`check_choice`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from envharness.cli.edge import CliError

__all__ = [
    "ActionTimeout",
    "Agents",
    "EnvironmentCommand",
    "EnvironmentOption",
    "JsonLines",
    "Roles",
    "acting_group",
    "check_choice",
]

JsonLines = Annotated[
    bool, typer.Option("--json", help="One JSON object per line instead of a table.")
]
Agents = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        metavar="NAME=module:factory|COMMAND",
        help="A participant and its agent: a class or factory as module:attribute, or a "
        "command line run as an external agent (e.g. alice='node agent.mjs'); repeat for "
        "more participants.",
    ),
]
Roles = Annotated[
    list[str] | None,
    typer.Option(
        "--role",
        metavar="NAME=ROLE",
        help="A participant's role, when the environment has more than one.",
    ),
]
EnvironmentOption = Annotated[
    str | None,
    typer.Option(
        "--environment",
        metavar="REFERENCE",
        help="The environment: module:attribute (a class or factory), gymnasium:ID, "
        "pettingzoo:MODULE (e.g. classic.leduc_holdem_v4) or textworld:GAME_FILE.",
    ),
]
EnvironmentCommand = Annotated[
    str | None,
    typer.Option(
        "--environment-command",
        metavar="COMMAND",
        help="The environment as a program in any language speaking the environment protocol "
        "(protocol/environment.md), e.g. 'node my_env.js'; each session runs its own process.",
    ),
]
ActionTimeout = Annotated[
    float,
    typer.Option(
        "--action-timeout",
        metavar="SECONDS",
        min=0,
        help="How long an agent may take for one action; 0 for no limit.",
    ),
]


def acting_group(help: str) -> typer.Typer:
    """A command group whose callback runs when no subcommand is given (``experiments`` lists
    them, ``experiments show ID`` shows one); :mod:`envharness.cli.app` adds it by name."""
    return typer.Typer(help=help, invoke_without_command=True, no_args_is_help=False)


def check_choice(option: str, value: str | None, choices: Sequence[str]) -> None:
    """Refuse ``value`` for ``option`` unless it is one of ``choices`` (``None``: not given)."""
    if value is not None and value not in choices:
        raise CliError(f"{option} {value!r} is not one of: {', '.join(choices)}")
