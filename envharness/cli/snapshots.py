"""``envharness snapshot create/list/show`` and ``export snapshot ID``: frozen selections.

A snapshot is a content-addressed selection of trajectories (docs/trajectories.md); each
command calls the same ``envharness.trajectories`` functions as the Python API
(``harness.snapshot``, ``harness.sources().export_snapshot``) and renders the answer.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import EXIT_NO, CliError, closing
from envharness.cli.options import JsonLines
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.cli.trajectories import trajectory_table
from envharness.errors import EnvharnessError
from envharness.store.locate import AnyStore, describe, reading_store
from envharness.store.snapshots import SnapshotStore
from envharness.trajectories import (
    Entitlement,
    Snapshot,
    SnapshotMetadata,
    Trajectory,
    TrajectoryError,
    export_snapshot,
    freeze,
    list_snapshots,
    load_snapshot,
    snapshot_trajectories,
    verify_snapshot,
)

__all__ = [
    "app",
    "export_snapshot_command",
    "snapshot_create",
    "snapshot_list",
    "snapshot_show",
]

app = typer.Typer(
    help="Frozen, content-addressed selections of trajectories.", no_args_is_help=True
)


@app.command("create")
def snapshot_create(
    ctx: typer.Context,
    sessions: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[SESSION]...",
            help="Session ids or unique prefixes, or imported SOURCE:EPISODE ids.",
        ),
    ] = None,
    experiment: Annotated[
        str | None,
        typer.Option("--experiment", metavar="ID", help="Add every session of this experiment."),
    ] = None,
    label: Annotated[
        str, typer.Option("--label", metavar="TEXT", help="A label (part of the content).")
    ] = "",
    entitle_training: Annotated[
        str | None,
        typer.Option(
            "--entitle-training",
            metavar="BASIS",
            help="Declare these trajectories may train models, and why (e.g. 'own "
            "evaluation data'); datasets require it.",
        ),
    ] = None,
    declared_by: Annotated[
        str, typer.Option("--declared-by", metavar="WHO", help="Who declares it.")
    ] = "",
) -> None:
    """Freeze sessions' trajectories now as one snapshot and print its id. The same
    selection frozen again gets the same id; nothing is ever overwritten."""
    if not sessions and experiment is None:
        raise CliError("snapshot create needs SESSION ids or --experiment ID")
    if entitle_training is not None and not entitle_training.strip():
        raise CliError("--entitle-training needs the basis, e.g. 'own evaluation data'")
    if declared_by and entitle_training is None:
        raise CliError("--declared-by goes with --entitle-training BASIS")
    store = CliState.of(ctx, postgres=True).location
    entitlement = (
        Entitlement(basis=entitle_training, declared_by=declared_by)
        if entitle_training is not None
        else None
    )

    async def frozen() -> Snapshot:
        async with reading_store(store) as reader:
            ids = list(sessions or ())
            if experiment is not None:
                info = await reader.experiment(experiment)
                ids += [member.session.id for member in await reader.experiment_sessions(info.id)]
            return await freeze(reader, ids, label=label, entitlement=entitlement)

    snapshot = anyio.run(frozen)
    metadata = snapshot.metadata
    typer.echo(metadata.id)
    typer.echo(
        f"{metadata.trajectories} trajectories, {metadata.records} records"
        + (", training-entitled" if metadata.entitlement else ""),
        err=True,
    )


@app.command("list")
def snapshot_list(
    ctx: typer.Context,
    as_json: JsonLines = False,
) -> None:
    """List the snapshots, oldest first. A snapshot whose stored header no longer reads is
    named on stderr, after the others are listed, and the exit status is 1."""
    store = CliState.of(ctx, postgres=True).location
    found, corrupt = anyio.run(_listed_snapshots, store)
    if as_json:
        for metadata in found:
            typer.echo(msgspec.json.encode(metadata).decode())
    elif not found and not corrupt:
        typer.echo(f"no snapshots in {shlex.quote(printable(describe(store)))}", err=True)
    for metadata in [] if as_json else found:
        entitled = "entitled" if metadata.entitlement else "-"
        typer.echo(
            f"{metadata.id}  {metadata.created_at}  {metadata.trajectories:>5} traj"
            f"  {metadata.records:>8} rec  {entitled:<8}  {printable(metadata.label)}"
        )
    for snapshot_id, problem, members in corrupt:
        named = problem if snapshot_id in problem else f"{snapshot_id}: {problem}"
        typer.echo(f"corrupt: {printable(named)}", err=True)
        typer.echo(f"  its trajectories: {printable(' '.join(members)) or 'none'}", err=True)
    if corrupt:
        typer.echo(
            f"{len(corrupt)} of {len(found) + len(corrupt)} snapshots cannot be read; the "
            "others are listed. The sessions they froze are untouched: `snapshot create` "
            "with their ids makes a sound snapshot again",
            err=True,
        )
        raise typer.Exit(EXIT_NO)


@app.command("show")
def snapshot_show(
    ctx: typer.Context,
    snapshot: Annotated[str, typer.Argument(metavar="ID", help="A snapshot id or prefix.")],
) -> None:
    """Check a snapshot (content address and every trajectory's digest binding) and list
    its trajectories. Exit status 2 with the record named when evidence was altered."""
    store = CliState.of(ctx, postgres=True).location

    async def shown() -> tuple[SnapshotMetadata, list[Trajectory]]:
        async with reading_store(store) as reader:
            metadata = await verify_snapshot(reader, snapshot)
            return metadata, [t async for t in snapshot_trajectories(reader, metadata.id)]

    metadata, found = anyio.run(shown)
    typer.echo(f"snapshot {metadata.id}  (verified)")
    typer.echo(f"  created {metadata.created_at}, label {printable(metadata.label)!r}")
    if metadata.entitlement is not None:
        typer.echo(f"  training-entitled: {printable(metadata.entitlement.basis)}")
    for line in trajectory_table(found):
        typer.echo(line)


async def _listed_snapshots(
    store: Path | str,
) -> tuple[list[SnapshotMetadata], list[tuple[str, str, list[str]]]]:
    """Every snapshot that reads, and (id, why, the trajectories it holds) for each whose
    stored header does not.

    The listing is one read; only when a header fails to decode is each snapshot loaded on
    its own, so one corrupt row cannot hide the rest.
    """
    async with reading_store(store) as reader:
        try:
            return await list_snapshots(reader), []
        except TrajectoryError:
            pass
        return await _each_snapshot(reader)


async def _each_snapshot(
    reader: AnyStore,
) -> tuple[list[SnapshotMetadata], list[tuple[str, str, list[str]]]]:
    snapshots = SnapshotStore(reader.backend)
    found: list[SnapshotMetadata] = []
    corrupt: list[tuple[str, str, list[str]]] = []
    for row in await snapshots.snapshots():
        try:
            found.append(await load_snapshot(reader, row.id))
        except EnvharnessError as exc:  # its header, or the id it is stored under
            async with closing(snapshots.members(row.id)) as members:
                held = [member.session_id async for member in members]
            corrupt.append((row.id, str(exc), held))
    return found, corrupt


def export_snapshot_command(store: Path | str, snapshot: str) -> None:
    """``envharness export snapshot ID``: the snapshot's lines to stdout, checked first."""
    out = typer.get_binary_stream("stdout")

    async def stream() -> None:
        # Plain blocking writes, as for `export SESSION`: a slow reader slows the export.
        async with (
            reading_store(store) as reader,
            closing(export_snapshot(reader, snapshot)) as lines,
        ):
            async for line in lines:
                out.write(line)
        out.flush()

    anyio.run(stream)
