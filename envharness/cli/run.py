"""``envharness quickstart``, ``run`` and ``resume``: the commands that record sessions.

``run`` and ``resume`` take the environment — ``module:attribute``, an adapter reference
(``gymnasium:ID``, ``pettingzoo:MODULE``, ``textworld:GAME_FILE``) as the argument or
``--environment``, or a program as ``--environment-command`` — with ``--agent`` options, or an
experiment manifest (:mod:`envharness.cli.manifest_run`); the first Ctrl-C stops the work and
the runtime records it as stopped (exit status 130).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import anyio
import typer

from envharness.api.harness import DEFAULT_ACTION_TIMEOUT, MAX_COUNT, AsyncEnvironmentHarness
from envharness.cli.edge import (
    EXIT_INTERRUPTED,
    EXIT_NO,
    CliError,
    ProgressLine,
    interruptible,
    resume_hint,
)
from envharness.cli.loading import (
    code_words,
    command_line_harness,
    make_cwd_importable,
    parse_input,
)
from envharness.cli.manifest_run import is_manifest, run_manifest
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
    MaxBlocks,
    MaxTokens,
    OnBlockLimitOption,
    PriceOption,
    RayAddress,
    Roles,
    Temperature,
    Template,
    Workers,
    check_choice,
    executor_from,
)
from envharness.cli.quickstart import write_quickstart
from envharness.cli.render import quickstart_lines, run_lines
from envharness.cli.results import session_scores
from envharness.cli.state import CliState
from envharness.contracts.budget import Budget
from envharness.contracts.scenario import Scenario
from envharness.errors import ScenarioInputError
from envharness.manifest import load_manifest
from envharness.manifest.model_agents import DEFAULT_KEY_ENV
from envharness.runtime.hooking import BLOCK_LIMITS, DEFAULT_MAX_BLOCKS, DEFAULT_ON_BLOCK_LIMIT
from envharness.runtime.plan import turn_limit_note

__all__ = ["app", "quickstart", "resume", "run"]

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands to the root."""


@app.command("quickstart")
def quickstart(
    ctx: typer.Context,
    turns: Annotated[
        int, typer.Option("--turns", metavar="N", min=1, help="Turns per session.")
    ] = 8,
) -> None:
    """Write a store of synthetic sessions to explore. Its numbers measure nothing."""
    store = CliState.of(ctx, postgres=True).location
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
def run(
    ctx: typer.Context,
    environment: Annotated[
        str | None,
        typer.Argument(
            metavar="ENVIRONMENT",
            help="The environment: a class or factory as module:attribute, gymnasium:ID, "
            "pettingzoo:MODULE or textworld:GAME_FILE (or give it as --environment); or an "
            "experiment manifest, experiment.toml (docs/manifests.md).",
            show_default=False,
        ),
    ] = None,
    environment_option: EnvironmentOption = None,
    environment_command: EnvironmentCommand = None,
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
    max_blocks: MaxBlocks = DEFAULT_MAX_BLOCKS,
    on_block_limit: OnBlockLimitOption = DEFAULT_ON_BLOCK_LIMIT,
    workers: Workers = None,
    ray: RayAddress = None,
) -> None:
    """Run one session and record it. Exit status 0 when it completed, 1 when it did not.

    Given a manifest (experiment.toml) instead, run the experiment it describes: in this
    process, or with --workers N in N processes (--ray ADDRESS: on a Ray cluster).
    """
    store = CliState.of(ctx, postgres=True).location
    if environment is not None and is_manifest(environment):
        run_manifest(ctx, environment, store, executor_from(workers, ray))
        return
    if workers is not None or ray is not None:
        raise CliError(
            "--workers and --ray run an experiment's sessions elsewhere; give an experiment "
            "manifest (experiment.toml) to run many sessions (one session runs here)"
        )
    if not agent or turns is None:
        _environment(environment, environment_option)  # a mistake there is named first
        raise CliError("run needs --agent NAME=module:factory|COMMAND|model:MODEL and --turns N")
    models = ModelOptions(
        base_url, api_key_env, temperature, template, max_tokens, action_format, price
    )
    budget = budget_from(budget_usd, budget_tokens, budget_seconds)
    check_choice("--on-block-limit", on_block_limit, BLOCK_LIMITS)
    if (max_blocks, on_block_limit) != (DEFAULT_MAX_BLOCKS, DEFAULT_ON_BLOCK_LIMIT):
        typer.echo(
            "note: --max-blocks and --on-block-limit govern harness hooks' vetoes, and run "
            "with --agent runs no hooks: they apply to `optimize` reruns and to hooks given "
            "in Python (docs/hooks.md)",
            err=True,
        )
    harness = _harness(
        store, (environment, environment_option, environment_command), agent, role,
        action_timeout=action_timeout, models=models, budget=budget,
        blocking=(max_blocks, on_block_limit),
    )  # fmt: skip
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
        if seen:
            code = code_words(environment, environment_option, environment_command, agent, role)
            typer.echo(resume_hint(store, seen[0], code), err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    scores = anyio.run(session_scores, store, result.id)
    for text in run_lines(result, scores):
        typer.echo(text)
    cut = turn_limit_note([result.ended_by], turns)
    if cut is not None:
        typer.echo(f"note: {cut}", err=True)
    if result.status != "completed":
        raise typer.Exit(EXIT_NO)


@app.command("resume")
def resume(
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
        str | None,
        typer.Argument(
            metavar="ENVIRONMENT",
            help="The same code that ran it: the environment (module:attribute, gymnasium:ID, "
            "pettingzoo:MODULE, textworld:GAME_FILE, or --environment / "
            "--environment-command) with --agent options, or the experiment's manifest "
            "(experiment.toml).",
            show_default=False,
        ),
    ] = None,
    environment_option: EnvironmentOption = None,
    environment_command: EnvironmentCommand = None,
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
    workers: Workers = None,
    ray: RayAddress = None,
) -> None:
    """Continue an interrupted (crashed), stopped or paused session or experiment after its
    last complete turn. Exit status 0 when everything completed, 1 when not.

    A session stopped by its budget goes on with the budget given now (a larger one); an
    experiment's sessions go on in N worker processes with --workers N (--ray: on Ray)."""
    store = CliState.of(ctx, postgres=True).location
    if (workers is not None or ray is not None) and not target.startswith("exp_"):
        raise CliError(
            "--workers and --ray run an experiment's sessions elsewhere; a single session "
            "resumes here (give an experiment id, exp_..., to use them)"
        )
    executor = executor_from(workers, ray)
    models = ModelOptions(
        base_url, api_key_env, temperature, template, max_tokens, action_format, price
    )
    budget = budget_from(budget_usd, budget_tokens, budget_seconds)
    experiment_budget = None
    if environment is not None and is_manifest(environment):
        if agent or role or environment_option or environment_command or models.given():
            raise CliError(
                "the manifest names the environment and the agents; give no --environment, "
                "--environment-command, --agent, --role or model options with it"
            )
        if budget is not None:
            raise CliError(
                "the manifest holds the budgets: change them there ([experiment] budget, "
                "session_budget) and resume with the manifest alone"
            )
        make_cwd_importable()
        manifest = load_manifest(environment)
        experiment_budget = manifest.budget
        harness = manifest.async_harness(store, hooks=manifest.load_hooks(store))
    elif not agent or (environment, environment_option, environment_command) == (None,) * 3:
        raise CliError("resume needs the code that ran it: ENVIRONMENT and --agent, or a manifest")
    else:
        harness = _harness(
            store, (environment, environment_option, environment_command), agent, role,
            action_timeout=action_timeout, models=models, budget=budget,
        )  # fmt: skip

    async def resumed() -> tuple[str, int, int, str | None]:
        if target.startswith("exp_"):
            result = await harness.resume_experiment(
                target, declare_changes=declare_changes, budget=experiment_budget,
                executor=executor,
            )  # fmt: skip
            return result.id, result.completed, result.total, None
        session = await harness.resume(target, declare_changes=declare_changes)
        done = 1 if session.status == "completed" else 0
        return session.id, done, 1, f"{session.status} after {session.turns_completed} turns"

    with ProgressLine():
        outcome = anyio.run(lambda: interruptible(resumed))
    if outcome is None:
        typer.echo(f"interrupted: {target} was recorded as stopped", err=True)
        code = (
            [environment]
            if environment is not None and is_manifest(environment)
            else code_words(environment, environment_option, environment_command, agent, role)
        )
        typer.echo(resume_hint(store, target, code), err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    which, completed, total, detail = outcome
    typer.echo(f"resumed {which}: {detail or f'{completed} of {total} sessions completed'}")
    if completed != total:
        raise typer.Exit(EXIT_NO)


def _harness(
    store: Path | str,
    environment: tuple[str | None, str | None, str | None],
    agent: Sequence[str],
    role: Sequence[str] | None,
    *,
    action_timeout: float,
    models: ModelOptions,
    budget: Budget | None,
    blocking: tuple[int, str] = (DEFAULT_MAX_BLOCKS, DEFAULT_ON_BLOCK_LIMIT),
) -> AsyncEnvironmentHarness:
    """The harness ``run`` and ``resume`` build from the command line (``environment``: the
    argument, ``--environment`` and ``--environment-command``), with the note a ``usd``
    budget needs when some model is unpriced."""
    argument, option, command = environment
    reference, what = _environment(argument, option)
    harness = command_line_harness(
        store,
        reference,
        agent,
        role,
        what=what,
        action_timeout=action_timeout,
        environment_command=command,
        models=models,
        budget=budget,
        max_blocks=blocking[0],
        on_block_limit=blocking[1],
    )
    note = unpriced_note(agent, models, budget)
    if note is not None:
        typer.echo(note, err=True)
    return harness


def _environment(argument: str | None, option: str | None) -> tuple[str | None, str]:
    """The environment reference, given as the argument or as ``--environment`` (not both),
    and how to name it in errors."""
    if argument is not None and option is not None:
        raise CliError(
            f"the environment is given twice, as ENVIRONMENT {argument!r} and as --environment "
            f"{option!r}; give it once"
        )
    return (option, "--environment") if option is not None else (argument, "ENVIRONMENT")
