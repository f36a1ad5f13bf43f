"""``checkpoint``, ``branch``, ``continue`` and ``compare``: a session's life after ``run``,
from the command line as from Python (``stop`` and ``pause`` are :mod:`envharness.cli.control`'s).

A checkpoint is named ``SESSION@SEQ`` (its session and record seq, as ``checkpoint`` prints
it), or found by ``SESSION --turn N``. ``branch`` and ``continue`` need the code that ran the
session — the environment, and for ``continue`` the agents — given as ``resume`` takes it;
``checkpoint`` and ``compare`` need only the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec
import typer

from envharness.api.harness import DEFAULT_ACTION_TIMEOUT, MAX_COUNT
from envharness.cli.edge import (
    EXIT_INTERRUPTED,
    EXIT_NO,
    CliError,
    ProgressLine,
    interruptible,
    resume_hint,
)
from envharness.cli.loading import code_words, command_line_harness, environment_factory
from envharness.cli.model_agents import ModelOptions, budget_from, unpriced_note
from envharness.cli.options import (
    ActionFormatOption,
    ActionTimeout,
    Agents,
    ApiKeyEnv,
    BaseUrl,
    BudgetSeconds,
    BudgetTokens,
    BudgetUsd,
    EnvironmentCommand,
    EnvironmentOption,
    MaxTokens,
    PriceOption,
    Roles,
    Temperature,
    Template,
)
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.manifest.model_agents import DEFAULT_KEY_ENV
from envharness.records import SessionCreated
from envharness.runtime.branching import CheckpointRef, branch, list_checkpoints, take_checkpoint
from envharness.runtime.compare import Comparison, alignment_note, compare_sessions
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore, opening_store, reading_store

__all__ = [
    "app",
    "branch_command",
    "checkpoint_command",
    "compare_command",
    "comparison_lines",
    "continue_command",
]

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands to the root."""

Session = Annotated[
    str, typer.Argument(metavar="SESSION", help="A session id, or a unique prefix of one.")
]
Environment = Annotated[
    str | None,
    typer.Argument(
        metavar="ENVIRONMENT",
        help="The environment that ran the session (module:attribute, gymnasium:ID, "
        "pettingzoo:MODULE, textworld:GAME_FILE), or --environment / --environment-command.",
        show_default=False,
    ),
]


@app.command("checkpoint")
def checkpoint_command(
    ctx: typer.Context,
    session: Session,
    label: Annotated[
        str | None,
        typer.Option("--label", metavar="TEXT", help="A name for it (default: turn N)."),
    ] = None,
) -> None:
    """Record a checkpoint at a session's last complete turn, to branch from later."""
    store = CliState.of(ctx, postgres=True).location

    async def taken() -> CheckpointRef:
        async with reading_store(store) as reader:  # never creates a store
            info = await reader.session(session)
        async with opening_store(store, create=False) as writable:
            return await take_checkpoint(writable, info.id, label)

    ref = anyio.run(taken)
    typer.echo(f"checkpoint {_name(ref)} at turn {ref.turn} ({printable(ref.label)})")
    typer.echo(f"branch from it: envharness branch {_name(ref)} ENVIRONMENT --intervention JSON")


@app.command("branch")
def branch_command(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="CHECKPOINT | SESSION",
            help="A checkpoint as SESSION@SEQ (as `checkpoint` prints it), or a session: its "
            "checkpoint at --turn N, or its latest.",
        ),
    ],
    environment: Environment = None,
    environment_option: EnvironmentOption = None,
    environment_command: EnvironmentCommand = None,
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn",
            metavar="N",
            min=0,
            max=MAX_COUNT,
            help="Branch from the checkpoint at turn N.",
        ),
    ] = None,
    intervention: Annotated[
        str,
        typer.Option(
            "--intervention",
            metavar="JSON",
            help="What to change in the state, as the environment's intervene() takes it.",
        ),
    ] = "{}",
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="Why, recorded with the branch.")
    ] = "",
) -> None:
    """Make a new session from a checkpoint, with an intervention applied; it waits, paused,
    for `continue`."""
    store = CliState.of(ctx, postgres=True).location
    change = _json(intervention, "--intervention")
    if environment is not None and environment_option is not None:
        raise CliError("the environment is given twice, as ENVIRONMENT and --environment")
    if (environment or environment_option or environment_command) is None:
        raise CliError(
            "branch needs the environment that ran the session, to apply the intervention: "
            "ENVIRONMENT, --environment or --environment-command"
        )
    factory = environment_factory(
        environment_option or environment,
        environment_command,
        what="--environment" if environment_option else "ENVIRONMENT",
    )
    made = factory()
    if not callable(getattr(made, "intervene", None)) or not hasattr(made, "spec"):
        raise CliError(f"{type(made).__name__} is not an environment (no spec or intervene())")

    async def branched() -> tuple[CheckpointRef, str]:
        ref = await _checkpoint(store, target, turn)
        async with opening_store(store, create=False) as writable:
            child = await branch(writable, ref, made, change, reason)
        return ref, child

    ref, child = anyio.run(branched)
    typer.echo(f"branched {child} from {_name(ref)} at turn {ref.turn}")
    typer.echo(f"continue it: envharness continue {child} ENVIRONMENT --agent NAME=... --turns N")


@app.command("continue")
def continue_command(
    ctx: typer.Context,
    session: Session,
    environment: Environment = None,
    environment_option: EnvironmentOption = None,
    environment_command: EnvironmentCommand = None,
    agent: Agents = None,
    role: Roles = None,
    turns: Annotated[
        int,
        typer.Option("--turns", metavar="N", min=1, max=MAX_COUNT, help="How many more turns."),
    ] = 1,
    declare_changes: Annotated[
        str | None,
        typer.Option(
            "--declare-changes",
            metavar="WHY",
            help="Go on even though the code differs from what the evidence recorded.",
        ),
    ] = None,
    action_timeout: ActionTimeout = DEFAULT_ACTION_TIMEOUT,
    base_url: BaseUrl = None,
    api_key_env: ApiKeyEnv = DEFAULT_KEY_ENV,
    temperature: Temperature = None,
    template: Template = None,
    max_tokens: MaxTokens = None,
    action_format: ActionFormatOption = None,
    price: PriceOption = None,
    budget_usd: BudgetUsd = None,
    budget_tokens: BudgetTokens = None,
    budget_seconds: BudgetSeconds = None,
) -> None:
    """Play more turns of a completed, paused (a branch), stopped or interrupted session.
    Exit status 0 when the new turns completed, 1 when not.

    The budgets count what the session spent before: after a budget stopped it, give a larger
    one."""
    store = CliState.of(ctx, postgres=True).location
    if environment is not None and environment_option is not None:
        raise CliError("the environment is given twice, as ENVIRONMENT and --environment")
    if not agent or (environment or environment_option or environment_command) is None:
        raise CliError("continue needs the code that ran it: ENVIRONMENT and --agent NAME=SPEC")
    models = ModelOptions(
        base_url, api_key_env, temperature, template, max_tokens, action_format, price
    )
    budget = budget_from(budget_usd, budget_tokens, budget_seconds)
    harness = command_line_harness(
        store,
        environment_option or environment,
        agent,
        role,
        what="--environment" if environment_option else "ENVIRONMENT",
        action_timeout=action_timeout,
        environment_command=environment_command,
        models=models,
        budget=budget,
    )
    note = unpriced_note(agent, models, budget)
    if note is not None:
        typer.echo(note, err=True)

    async def continued() -> tuple[str, str, int]:
        found = await harness.continue_(session, turns=turns, declare_changes=declare_changes)
        return found.id, found.status, found.turns_completed

    with ProgressLine():
        outcome = anyio.run(lambda: interruptible(continued))
    if outcome is None:
        typer.echo(f"interrupted: {session} was recorded as stopped", err=True)
        code = code_words(environment, environment_option, environment_command, agent, role)
        typer.echo(resume_hint(store, session, code), err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    which, status, done = outcome
    typer.echo(f"continued {which}: {status} after {done} turns")
    if status != "completed":
        raise typer.Exit(EXIT_NO)


@app.command("compare")
def compare_command(
    ctx: typer.Context,
    left: Annotated[str, typer.Argument(metavar="A", help="A session id (or unique prefix).")],
    right: Annotated[str, typer.Argument(metavar="B", help="The session to compare it with.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="The comparison as one JSON object.")
    ] = False,
) -> None:
    """Compare two sessions turn by turn (a branch with its parent, say), and their scores.
    Exit status 0 when they are identical, 1 when they differ."""
    store = CliState.of(ctx, postgres=True).location

    async def compared() -> tuple[Comparison, list[str]]:
        async with reading_store(store) as reader:
            comparison = await compare_sessions(reader, left, right)
            ran = [await _environment_of(reader, comparison.left)]
            return comparison, [*ran, await _environment_of(reader, comparison.right)]

    comparison, environments = anyio.run(compared)
    if as_json:
        typer.echo(msgspec.json.encode(comparison).decode())
    else:
        for line in comparison_lines(comparison):
            typer.echo(line)
    if (note := alignment_note(comparison, *environments)) is not None:
        typer.echo(f"note: {note}", err=True)
    if not comparison.identical:
        raise typer.Exit(EXIT_NO)


def comparison_lines(comparison: Comparison) -> list[str]:
    """The scores side by side, then each differing value by turn and participant."""
    lines = [f"compare {comparison.left}  vs  {comparison.right}"]
    lines.append(f"turns compared: {_ranges(comparison.turns_compared) or 'none'}")
    if comparison.unmatched_turns:
        lines.append(f"turns only one played: {_ranges(comparison.unmatched_turns)}")
    for metric, (a, b) in comparison.scores.items():
        mark = "" if a == b else "   differs"
        lines.append(f"score {printable(metric)}: {_value(a)}  vs  {_value(b)}{mark}")
    for difference in comparison.differences:
        who = f" {printable(difference.participant)}" if difference.participant else ""
        lines.append(
            f"turn {difference.turn}{who} {difference.kind}: "
            f"{_value(difference.left)}  vs  {_value(difference.right)}"
        )
    if comparison.identical:
        lines.append("identical")
    else:
        scores = sum(a != b for a, b in comparison.scores.values())
        lines.append(
            f"different: {len(comparison.differences)} values, "
            f"{len(comparison.unmatched_turns)} turns only one played, {scores} scores"
        )
    return lines


async def _environment_of(reader: AnyStore, session_id: str) -> str:
    """``name@version`` of the environment a session ran, from its first record."""
    first = [
        r
        async for r in reader.records(session_id, RecordFilter(kinds=("session.created",), limit=1))
    ]
    if not first or not isinstance(first[0].payload, SessionCreated):
        return "an unknown environment"
    environment = first[0].payload.config.environment
    return f"{printable(environment.name)}@{printable(environment.version)}"


async def _checkpoint(store: Path | str, target: str, turn: int | None) -> CheckpointRef:
    """The checkpoint ``SESSION@SEQ`` names, or the session's at ``turn`` (or its latest)."""
    session, at, seq_text = target.partition("@")
    if at and turn is not None:
        raise CliError(f"{target} names one checkpoint; give --turn only with a SESSION")
    if at and not seq_text.isdigit():
        raise CliError(f"checkpoint {target!r} is not SESSION@SEQ, e.g. ses_0123abcd@17")
    async with reading_store(store) as reader:
        info = await reader.session(session)
        found = await list_checkpoints(reader, info.id)
    if at:
        chosen = [ref for ref in found if ref.seq == int(seq_text)]
    elif turn is not None:
        chosen = [ref for ref in found if ref.turn == turn][-1:]
    else:
        chosen = found[-1:]
    if chosen:
        return chosen[0]
    have = ", ".join(f"{_name(ref)} (turn {ref.turn})" for ref in found) or "none"
    wanted = target if at else f"{info.id} at turn {turn}" if turn is not None else info.id
    raise CliError(
        f"no checkpoint {wanted}; it has: {have}. Take one at its last complete turn with "
        f"`envharness checkpoint {info.id}`"
    )


def _name(ref: CheckpointRef) -> str:
    return f"{ref.session_id}@{ref.seq}"


def _json(text: str, option: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise CliError(f"{option} is not valid JSON ({exc}): {text!r:.200}") from None


def _value(value: Any) -> str:
    text = msgspec.json.encode(value).decode() if value is not None else "-"
    return printable(text if len(text) <= 80 else text[:79] + "…")


def _ranges(turns: tuple[int, ...]) -> str:
    """``1-4, 7`` rather than ``1, 2, 3, 4, 7``."""
    spans: list[list[int]] = []
    for turn in turns:
        if spans and turn == spans[-1][1] + 1:
            spans[-1][1] = turn
        else:
            spans.append([turn, turn])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
