"""``envharness run MANIFEST.toml``: run the experiment a TOML file describes (docs/manifests.md).

The manifest holds the whole experiment, so the options that describe one on the command line
(``--agent``, ``--turns``, ``--seed`` …) are refused next to it rather than silently ignored or
half-applied. The first Ctrl-C stops the experiment (``experiment.stop()``): the sessions in
flight record ``stopped``, the experiment records its counts, and the command exits 130.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from pathlib import Path

import anyio
import typer
from anyio.abc import TaskStatus

from envharness.api.experiments import AsyncExperiment
from envharness.cli.edge import EXIT_INTERRUPTED, EXIT_NO, CliError, ProgressLine, resume_hint
from envharness.cli.experiments import result_lines
from envharness.cli.loading import make_cwd_importable
from envharness.cli.render import printable
from envharness.cli.results import experiment_results
from envharness.errors import ConfigurationError
from envharness.manifest import load_manifest
from envharness.runtime import ProgressCallback
from envharness.runtime.executors import Executor
from envharness.runtime.experiment import ExperimentResult
from envharness.runtime.plan import turn_limit_note
from envharness.store.locate import describe

__all__ = ["experiment_lines", "is_manifest", "run_manifest"]


def is_manifest(argument: str) -> bool:
    """``run``'s ENVIRONMENT names a manifest: a ``.toml`` path, or any existing file or
    folder (a folder is refused by the loader, which says what it expected)."""
    return argument.endswith(".toml") or Path(argument).exists()


def run_manifest(
    ctx: typer.Context, argument: str, store: Path | str, executor: Executor | None = None
) -> None:
    """Load, run and report; exit 0 when every session completed, 1 otherwise, 130 on Ctrl-C.

    ``executor`` (``--workers`` / ``--ray``) is where the sessions run."""
    _refuse_options(ctx, argument)
    make_cwd_importable()
    manifest = load_manifest(argument)
    experiment = manifest.async_experiment(
        store, hooks=manifest.load_hooks(store), executor=executor
    )

    def progress(session_id: str, turn: int, planned: int) -> None:
        counts = experiment.progress
        line.show(
            f"{experiment.id}  {counts.finished}/{counts.total} sessions done, "
            f"{counts.running} running  {session_id} turn {turn}/{planned}"
        )

    with ProgressLine() as line:
        result, interrupted = anyio.run(_run_stoppable, experiment, progress)
    if result is None:
        typer.echo(f"interrupted: experiment {experiment.id} was stopped before it began", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    report = anyio.run(experiment_results, store, result.id)
    shown = shlex.quote(printable(describe(store)))
    for text in [
        *experiment_lines(result, store),
        *result_lines(report),
        "",
        f"more:   envharness --store {shown} experiments show {result.id}",
    ]:
        typer.echo(text)
    ended = (session.result.ended_by for session in result.sessions)
    cut = turn_limit_note(ended, manifest.turns, "raise the manifest's turns to play longer")
    if cut is not None:
        typer.echo(f"note: {cut}", err=True)
    if interrupted:
        typer.echo(f"interrupted: experiment {result.id} was recorded as stopped", err=True)
        typer.echo(resume_hint(store, result.id, [argument]), err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.completed != result.total:
        raise typer.Exit(EXIT_NO)


def experiment_lines(result: ExperimentResult, store: Path | str) -> list[str]:
    """The experiment, one line per session (scenario, trial, seed, status), and the counts."""
    lines = [f"experiment {result.id}  {printable(result.name)}"]
    width = max((len(s.scenario_id) for s in result.sessions), default=0)
    for session in result.sessions:
        lines.append(
            f"session {session.result.id}  scenario {printable(session.scenario_id):<{width}}  "
            f"trial {session.trial}  seed {session.seed:<19}  {session.result.status}"
        )
        if session.result.status != "completed" and session.result.reason:
            lines.append(f"  reason  {printable(session.result.reason)}")
    summary = f"{result.completed} completed, {result.failed} failed of {result.total}"
    not_started = result.total - len(result.sessions)
    stopped = result.stopped - not_started  # the recorded count includes those never started
    held = [f"{stopped} stopped"] if stopped > 0 else []
    held += [f"{not_started} not started"] if not_started > 0 else []
    if held:
        summary += f" ({', '.join(held)})"
    lines.append(summary)
    lines.append(
        f"view it: envharness --store {shlex.quote(printable(describe(store)))} serve --open"
    )
    return lines


_WITH_A_MANIFEST = frozenset({"environment", "workers", "ray"})
"""``run``'s parameters that a manifest does not hold: where it runs is the caller's choice."""


def _refuse_options(ctx: typer.Context, argument: str) -> None:
    # Compared by name: typer ships its own copy of click, whose ParameterSource is not click's.
    given = [
        param.opts[0]
        for param in ctx.command.params
        if param.name is not None
        and param.name not in _WITH_A_MANIFEST
        and getattr(ctx.get_parameter_source(param.name), "name", "DEFAULT")
        not in ("DEFAULT", "DEFAULT_MAP")
    ]
    if given:
        raise CliError(
            f"{', '.join(given)} cannot be given with a manifest: {argument!r} holds the whole "
            "experiment (agents, turns, seed, scenarios…); change it there"
        )


async def _run_stoppable(
    experiment: AsyncExperiment, progress: ProgressCallback
) -> tuple[ExperimentResult | None, bool]:
    """Run the experiment; the first Ctrl-C calls ``experiment.stop()``, later ones are
    acknowledged and ignored while the last records are written. Returns the result (``None``
    when stopped before anything was recorded) and whether Ctrl-C came."""
    interrupted = False

    async def watch(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal interrupted
        with contextlib.ExitStack() as stack:
            try:
                signals = stack.enter_context(anyio.open_signal_receiver(signal.SIGINT))
            except (NotImplementedError, RuntimeError, ValueError):
                task_status.started()  # not watchable here: KeyboardInterrupt exits 130
                return
            task_status.started()
            async for _ in signals:
                if interrupted:
                    typer.echo("still stopping: writing the last records", err=True)
                else:
                    interrupted = True
                    experiment.stop()

    result: ExperimentResult | None = None
    try:
        async with anyio.create_task_group() as group:
            await group.start(watch)
            try:
                result = await experiment.run(progress=progress)
            except ConfigurationError:
                if not interrupted:  # "stopped before it started" is no error after Ctrl-C
                    raise
            group.cancel_scope.cancel()
    except BaseExceptionGroup as failure:
        if len(failure.exceptions) == 1:  # the watcher never fails: raise the run's own error
            raise failure.exceptions[0] from None
        raise
    return result, interrupted
