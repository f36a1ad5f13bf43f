"""Declarations several commands share, made once so that they read and behave alike.

``--json`` on a listing prints one JSON object per line; ``run`` and ``resume`` take the same
``--environment``, ``--environment-command``, ``--agent``, ``--role`` and ``--action-timeout``,
and the same model agents' settings and budgets, since a resume needs the code that ran;
``sessions``, ``experiments`` and ``token`` are groups whose older bare forms still act, with
a note (:func:`deprecated_form`); every group lists its commands' first sentences whole
(:class:`HelpGroup`); and an option limited to a few words says so in one way
(:func:`check_choice`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer import _click  # typer's own click: the types its groups format help with
from typer.core import TyperGroup

from envharness.cli.edge import CliError
from envharness.errors import ConfigurationError
from envharness.runtime.executors import Executor, ProcessPoolExecutor

__all__ = [
    "ActionFormatOption",
    "ActionTimeout",
    "Agents",
    "ApiKeyEnv",
    "BaseUrl",
    "BudgetSeconds",
    "BudgetTokens",
    "BudgetUsd",
    "EnvironmentCommand",
    "EnvironmentOption",
    "HelpGroup",
    "JsonLines",
    "MaxBlocks",
    "MaxTokens",
    "OnBlockLimitOption",
    "PriceOption",
    "RayAddress",
    "Roles",
    "Temperature",
    "Template",
    "Workers",
    "acting_group",
    "check_choice",
    "deprecated_form",
    "executor_from",
    "ray_executor",
    "workers_option",
]

JsonLines = Annotated[
    bool, typer.Option("--json", help="One JSON object per line instead of a table.")
]
Agents = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        metavar="NAME=module:factory|COMMAND|model:MODEL",
        help="A participant and its agent: a class or factory as module:attribute, a "
        "command line run as an external agent (e.g. alice='node agent.mjs'), or a model "
        "played by a model agent (e.g. alice=model:gpt-4o-mini); repeat for more "
        "participants.",
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

MaxBlocks = Annotated[
    int,
    typer.Option(
        "--max-blocks",
        metavar="N",
        min=1,
        help="Vetoes in a row (hooks' block_and_prompt) of one participant in one turn before "
        "--on-block-limit acts.",
    ),
]
OnBlockLimitOption = Annotated[
    str,
    typer.Option(
        "--on-block-limit",
        metavar="skip|run_last",
        help="After --max-blocks vetoes in a row: skip the participant's turn, or run its last "
        "answer anyway (recorded in the session's configuration).",
    ),
]


BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="The API root model agents call, e.g. http://127.0.0.1:8000/v1. Default: "
        "$OPENAI_BASE_URL, else https://api.openai.com/v1.",
    ),
]
ApiKeyEnv = Annotated[
    str,
    typer.Option(
        "--api-key-env",
        metavar="VAR",
        help="The environment variable holding model agents' API key (never the key itself); "
        "'' for none. A loopback endpoint needs none.",
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        metavar="T",
        min=0,
        max=2,
        help="Model agents' sampling temperature. Default: 0.",
    ),
]
Template = Annotated[
    str | None,
    typer.Option(
        "--template",
        metavar="PATH|NAME",
        help="Model agents' prompt template: a packaged one's name or a template file "
        "(docs/model-agents.md). Default: the packaged default.",
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        metavar="N",
        min=1,
        help="The most tokens a model agent's answer may have.",
    ),
]
PriceOption = Annotated[
    str | None,
    typer.Option(
        "--price",
        metavar="IN/OUT",
        help="US dollars per million input and output tokens, e.g. 0.15/0.60, for an endpoint "
        "that reports no price: what --budget-usd counts model agents' calls with.",
    ),
]
ActionFormatOption = Annotated[
    str | None,
    typer.Option(
        "--action-format",
        metavar="auto|tools|json|text",
        help="How model agents are asked for an action: a tool call, a JSON answer or plain "
        "text. Default: auto.",
    ),
]
BudgetUsd = Annotated[
    float | None,
    typer.Option(
        "--budget-usd",
        metavar="USD",
        help="Stop the session (status stopped, reason budget: ...) once its agents have "
        "spent this many US dollars.",
    ),
]
BudgetTokens = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        metavar="N",
        help="Stop the session once its agents have used this many tokens, input and output.",
    ),
]
BudgetSeconds = Annotated[
    float | None,
    typer.Option(
        "--budget-seconds",
        metavar="S",
        help="Stop the session once it has run this many seconds of wall time.",
    ),
]


def workers_option(help_text: str) -> Any:
    """``--workers N`` as every command that runs sessions in workers declares it; only
    ``help_text``, what the command does with them, differs."""
    return typer.Option("--workers", metavar="N", min=1, help=help_text)


Workers = Annotated[
    int | None,
    workers_option(
        "Run an experiment's sessions in N worker processes on this machine (one per core uses "
        "them all); the evidence is still written by this process (docs/scale-out.md). "
        "Default: in this process."
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run an experiment's sessions on a Ray cluster: the head's address (host:port), "
        "or 'auto' for the one this machine is part of; --workers N is then the number of Ray "
        "workers (docs/ray.md; needs envharness[ray]).",
    ),
]


def executor_from(workers: int | None, ray: str | None) -> Executor | None:
    """The executor ``--workers`` / ``--ray`` choose (``None``: in this process): with
    ``--ray``, ``--workers`` is the number of Ray workers."""
    try:
        if ray is not None:
            return ray_executor(ray, workers)
        if workers is not None:
            return ProcessPoolExecutor(workers=workers)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    return None


def ray_executor(address: str, workers: int | None = None) -> Executor:
    """A Ray executor for ``address``, imported only when asked for (Ray is an extra)."""
    from envharness.runtime.executors.ray import RayExecutor  # Ray's weight only when asked

    if workers is None:
        return RayExecutor(address=address)
    return RayExecutor(address=address, workers=workers)


class HelpGroup(TyperGroup):
    """A group whose help lists each command's first sentence whole, wrapped over lines
    where it is long: click would cut it to the column left over, mid-phrase, with "..."."""

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        rows = [
            (name, command.get_short_help_str(limit=sys.maxsize))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def acting_group(help: str) -> typer.Typer:
    """A command group whose callback runs when no subcommand is given (``experiments`` lists
    them, ``experiments show ID`` shows one); :mod:`envharness.cli.app` adds it by name."""
    return typer.Typer(help=help, cls=HelpGroup, invoke_without_command=True, no_args_is_help=False)


def check_choice(option: str, value: str | None, choices: Sequence[str]) -> None:
    """Refuse ``value`` for ``option`` unless it is one of ``choices`` (``None``: not given)."""
    if value is not None and value not in choices:
        raise CliError(f"{option} {value!r} is not one of: {', '.join(choices)}")


def deprecated_form(old: str, new: str) -> None:
    """Say on stderr (stdout stays the answer, for scripts) that ``envharness OLD`` is an
    alias kept for a release, and what to type instead."""
    typer.echo(
        f"note: `envharness {old}` is now `envharness {new}`; the old form will be removed "
        "in a later release",
        err=True,
    )
