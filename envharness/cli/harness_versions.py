"""``envharness harness runs/list/show/diff``: the harness versions the optimizer accepted.

Each command reads the store through :mod:`envharness.optimizer.versions`, the same functions
the Python API offers; a version's code is shown as its patch (:func:`patch_lines`).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import anyio
import msgspec
import typer

from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.optimizer import HarnessPatch
from envharness.optimizer.versions import (
    HarnessVersion,
    diff_versions,
    harness_version,
    patch_text,
)
from envharness.store import HarnessVersionInfo, OptimizerRunInfo
from envharness.store.locate import describe, reading_store

__all__ = ["app", "harness_diff", "harness_list", "harness_runs", "harness_show", "patch_lines"]

app = typer.Typer(
    help="The harness versions the optimizer accepted: list, show one, diff two; the "
    "optimizer runs.",
    no_args_is_help=True,
)


@app.command("runs")
def harness_runs(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List the optimizer runs, oldest first: what an interrupted run's --resume needs."""
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> tuple[list[OptimizerRunInfo], list[HarnessVersionInfo]]:
        async with reading_store(store) as reader:
            return await reader.optimizer_runs(), await reader.harness_versions()

    runs, versions = anyio.run(listed)
    accepted: dict[str, list[str]] = {}
    for info in versions:
        accepted.setdefault(info.run_id, []).append(info.version)
    if as_json:
        for run in runs:
            entry = {**msgspec.to_builtins(run), "versions": accepted.get(run.id, [])}
            typer.echo(msgspec.json.encode(entry).decode())
        return
    if not runs:
        typer.echo(f"no optimizer runs in {shlex.quote(printable(describe(store)))}", err=True)
        return
    typer.echo(f"{'run':<28} {'status':<11} {'created':<28} versions")
    for run in runs:
        typer.echo(
            printable(
                f"{run.id:<28} {run.status:<11} {run.created_at:<28} "
                f"{', '.join(accepted.get(run.id, [])) or '-'}"
            )
        )


@app.command("list")
def harness_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List the accepted harness versions, oldest first."""
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> list[HarnessVersionInfo]:
        async with reading_store(store) as reader:
            return await reader.harness_versions()

    found = anyio.run(listed)
    if as_json:
        for info in found:
            typer.echo(msgspec.json.encode(info).decode())
        return
    if not found:
        typer.echo(f"no harness versions in {shlex.quote(printable(describe(store)))}", err=True)
        return
    typer.echo(f"{'version':<14} {'parent':<14} {'run':<28} {'digest':<14} created")
    for info in found:
        typer.echo(
            f"{info.version:<14} {info.parent or '-':<14} {info.run_id:<28} "
            f"{info.digest[:12]:<14} {info.created_at}"
        )


@app.command("show")
def harness_show(
    ctx: typer.Context,
    version: Annotated[str, typer.Argument(metavar="VERSION", help="e.g. harness-v2")],
    as_json: Annotated[bool, typer.Option("--json", help="The version as JSON.")] = False,
) -> None:
    """Show a version: its evidence (run, rerun experiment, reward, cost) and its code."""
    store = CliState.of(ctx, postgres=True).location

    async def shown() -> HarnessVersion:
        async with reading_store(store) as reader:
            return await harness_version(reader, version)

    found = anyio.run(shown)
    if as_json:
        typer.echo(msgspec.json.encode(found).decode())
        return
    interval = f" [{found.interval[0]:+.3f}, {found.interval[1]:+.3f}]" if found.interval else ""
    p_value = f", sign test p={found.p_value:.3g}" if found.p_value is not None else ""
    for line in (
        f"{found.version}  (from {found.parent or 'the unpatched harness'})",
        f"environment: {found.environment or '?'}",
        f"run: {found.run_id}, iteration {found.iteration}, candidate {found.candidate}",
        f"rerun experiment: {found.experiment_id or '-'}",
        f"reward: {found.mean_reward:+.3f}{interval}{p_value}; score "
        f"{found.score if found.score is not None else float('nan'):.3f}",
        f"cost: engineer {found.engineer_tokens} tokens, reruns {found.rerun_tokens} tokens, "
        f"{found.seconds:.1f}s",
        f"digest: {found.digest}",
        "",
        *patch_lines(found.patch),
    ):
        typer.echo(printable(line))


@app.command("diff")
def harness_diff(
    ctx: typer.Context,
    old: Annotated[str, typer.Argument(metavar="OLD", help="e.g. harness-v1")],
    new: Annotated[str, typer.Argument(metavar="NEW", help="e.g. harness-v2")],
) -> None:
    """The difference between two versions' code, as a unified diff."""
    store = CliState.of(ctx, postgres=True).location

    async def both() -> list[str]:
        async with reading_store(store) as reader:
            return diff_versions(
                await harness_version(reader, old), await harness_version(reader, new)
            )

    lines = anyio.run(both)
    if not lines:
        typer.echo(f"{old} and {new} have the same hooks")
    for line in lines:
        typer.echo(printable(line))


def patch_lines(patch: dict[str, Any]) -> list[str]:
    return patch_text(HarnessPatch.from_dict(patch))
