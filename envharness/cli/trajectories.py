"""``envharness trajectories``, ``snapshot …``, ``dataset …`` and ``export snapshot ID``.

Each command calls the same ``envharness.trajectories`` functions as the Python API
(``harness.trajectory``, ``harness.snapshot``, ``harness.sources().export_snapshot``,
``harness.create_dataset``) and renders the answer; docs/trajectories.md is the guide.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import EXIT_NO, CliError, closing
from envharness.cli.options import JsonLines
from envharness.cli.render import printable
from envharness.errors import EnvharnessError
from envharness.store import read_store
from envharness.store.snapshots import SnapshotStore
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    Entitlement,
    Snapshot,
    SnapshotMetadata,
    Trajectory,
    TrajectoryError,
    create_dataset,
    dataset_rows,
    export_snapshot,
    freeze,
    list_datasets,
    list_snapshots,
    load_dataset,
    load_snapshot,
    project,
    snapshot_trajectories,
    source_trajectories,
    verify_snapshot,
)
from envharness.trajectories.files import jsonl_line, output_file, write_parquet

__all__ = ["export_snapshot_command", "register_trajectory_commands", "trajectory_table"]

StoreOf = Callable[[typer.Context], Path]

FORMATS = ("jsonl", "parquet")
ORIGINS = ("native", "imported")
_WRITE_BATCH = 256
_COLUMNS = ("session", "execution", "collection", "termination", "outcome", "segs", "records")


def register_trajectory_commands(app: typer.Typer, store_of: StoreOf) -> None:
    """Add ``trajectories``, ``snapshot`` and ``dataset`` to ``app``; ``store_of`` finds
    --store. (``export snapshot ID`` is a form of ``export``, which calls
    :func:`export_snapshot_command`.)"""

    @app.command("trajectories")
    def trajectories(
        ctx: typer.Context,
        sessions: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="[SESSION]...",
                help="Session ids or unique prefixes, or imported SOURCE:EPISODE ids "
                "(default: every session, then every imported episode).",
            ),
        ] = None,
        origin: Annotated[
            str | None,
            typer.Option(
                "--origin",
                metavar="ORIGIN",
                help=f"Only {' or '.join(ORIGINS)} trajectories: sessions run here, or episodes "
                "imported from other tools (`envharness sources` lists the sources).",
            ),
        ] = None,
        source: Annotated[
            str | None,
            typer.Option("--source", metavar="SOURCE", help="Only this source's episodes."),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Each trajectory whole, one JSON object per line.")
        ] = False,
    ) -> None:
        """Project sessions and imported episodes into trajectories: segments and the four
        states (collection, execution, termination, verified outcome), each bound to its
        evidence by digest. Sessions come first, then each source's episodes."""
        if origin is not None and origin not in ORIGINS:
            raise CliError(f"--origin {origin!r} is not one of: {', '.join(ORIGINS)}")
        if source is not None and origin == "native":
            raise CliError("--source lists imported episodes; it cannot go with --origin native")
        if sessions and (origin is not None or source is not None):
            raise CliError("give trajectory ids, or --origin/--source to list them, not both")
        store = store_of(ctx)

        async def projected() -> list[Trajectory]:
            reader = await read_store(store)
            if sessions:
                return [await project(reader, trajectory_id) for trajectory_id in sessions]
            found = []
            if origin != "imported" and source is None:
                found += [await project(reader, info.id) for info in await reader.sessions()]
            if origin != "native":
                found += [t async for t in source_trajectories(store, source)]
            return found

        found = anyio.run(projected)
        if as_json:
            for trajectory in found:
                typer.echo(msgspec.json.encode(trajectory).decode())
        elif found:
            for line in trajectory_table(found):
                typer.echo(line)
        else:
            typer.echo(f"no trajectories in {shlex.quote(printable(str(store)))}", err=True)

    snapshot_app = typer.Typer(
        help="Frozen, content-addressed selections of trajectories.", no_args_is_help=True
    )
    app.add_typer(snapshot_app, name="snapshot")

    @snapshot_app.command("create")
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
            typer.Option(
                "--experiment", metavar="ID", help="Add every session of this experiment."
            ),
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
        store = store_of(ctx)
        entitlement = (
            Entitlement(basis=entitle_training, declared_by=declared_by)
            if entitle_training is not None
            else None
        )

        async def frozen() -> Snapshot:
            reader = await read_store(store)
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

    @snapshot_app.command("list")
    def snapshot_list(
        ctx: typer.Context,
        as_json: JsonLines = False,
    ) -> None:
        """List the snapshots, oldest first. A snapshot whose stored header no longer reads is
        named on stderr, after the others are listed, and the exit status is 1."""
        store = store_of(ctx)
        found, corrupt = anyio.run(_listed_snapshots, store)
        if as_json:
            for metadata in found:
                typer.echo(msgspec.json.encode(metadata).decode())
        elif not found and not corrupt:
            typer.echo(f"no snapshots in {shlex.quote(printable(str(store)))}", err=True)
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

    @snapshot_app.command("show")
    def snapshot_show(
        ctx: typer.Context,
        snapshot: Annotated[str, typer.Argument(metavar="ID", help="A snapshot id or prefix.")],
    ) -> None:
        """Check a snapshot (content address and every trajectory's digest binding) and list
        its trajectories. Exit status 2 with the record named when evidence was altered."""
        store = store_of(ctx)

        async def shown() -> tuple[SnapshotMetadata, list[Trajectory]]:
            reader = await read_store(store)
            metadata = await verify_snapshot(reader, snapshot)
            return metadata, [t async for t in snapshot_trajectories(reader, metadata.id)]

        metadata, found = anyio.run(shown)
        typer.echo(f"snapshot {metadata.id}  (verified)")
        typer.echo(f"  created {metadata.created_at}, label {printable(metadata.label)!r}")
        if metadata.entitlement is not None:
            typer.echo(f"  training-entitled: {printable(metadata.entitlement.basis)}")
        for line in trajectory_table(found):
            typer.echo(line)

    dataset_app = typer.Typer(
        help="Immutable training datasets: ordered selections of snapshots.",
        no_args_is_help=True,
    )
    app.add_typer(dataset_app, name="dataset")

    @dataset_app.command("create")
    def dataset_create(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME", help="The dataset's name.")],
        snapshots: Annotated[
            list[str], typer.Argument(metavar="SNAPSHOT...", help="Snapshot ids, in order.")
        ],
        reward: Annotated[
            str | None,
            typer.Option(
                "--reward",
                metavar="METRIC",
                help="The score metric used as reward (default: pass/fail, or the only metric).",
            ),
        ] = None,
    ) -> None:
        """Create a dataset. Every trajectory must be complete, terminal, training-entitled
        and rewarded; otherwise nothing is created and each refusal is named."""
        store = store_of(ctx)

        async def created() -> Dataset:
            return await create_dataset(await read_store(store), name, snapshots, reward=reward)

        dataset = anyio.run(created)
        typer.echo(dataset.id)
        typer.echo(
            f"dataset {printable(dataset.name)!r}: {len(dataset.snapshots)} snapshot(s), "
            f"{dataset.trajectories} trajectories",
            err=True,
        )

    @dataset_app.command("list")
    def dataset_list(ctx: typer.Context) -> None:
        """List the datasets, oldest first."""
        store = store_of(ctx)

        async def listed() -> list[Dataset]:
            return await list_datasets(await read_store(store))

        found = anyio.run(listed)
        if not found:
            typer.echo(f"no datasets in {shlex.quote(printable(str(store)))}", err=True)
        for dataset in found:
            typer.echo(
                f"{printable(dataset.name)}  {dataset.id}  {dataset.trajectories} trajectories"
                f"  reward={dataset.reward or 'default'}  {' '.join(dataset.snapshots)}"
            )

    @dataset_app.command("export")
    def dataset_export(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME", help="The dataset's name or id.")],
        format: Annotated[
            str,
            typer.Option(
                "--format", metavar="FORMAT", help="jsonl (to stdout or --output) or parquet."
            ),
        ] = "jsonl",
        output: Annotated[
            Path | None,
            typer.Option("--output", "-o", metavar="PATH", help="Write here instead of stdout."),
        ] = None,
    ) -> None:
        """Export a dataset in TRL's conversational format: one row per trajectory and
        participant, {"messages": [...], "reward": ..., ...}. Evidence is checked as it is read."""
        if format not in FORMATS:
            raise CliError(f"--format {format!r} is not one of: {', '.join(FORMATS)}")
        if format == "parquet" and output is None:
            raise CliError("--format parquet writes a file: give --output PATH")
        if output is not None:
            output = output_file(output, what="--output")  # followed if a link; a file
        if output is not None and not output.absolute().parent.is_dir():
            raise CliError(
                f"--output {str(output)!r}: there is no directory {str(output.parent)!r}; "
                "create it first, or give a path in one that exists"
            )
        store = store_of(ctx)

        async def exported() -> int:
            reader = await read_store(store)
            if output is None:
                # Lines on stdout cannot be taken back: refuse altered evidence before the
                # first (a file is written aside and renamed, so it needs no second read).
                for snapshot_id in (await load_dataset(reader, name)).snapshots:
                    await verify_snapshot(reader, snapshot_id)
            if output is None:
                return await _write_jsonl(dataset_rows(reader, name), None)
            try:
                if format == "parquet":
                    async with closing(dataset_rows(reader, name)) as rows:
                        return await write_parquet(rows, output)
                return await _write_jsonl(dataset_rows(reader, name), output)
            except OSError as exc:
                raise CliError(
                    f"cannot write --output {str(output)!r}: {exc.strerror or exc}; give a path "
                    "in a directory that exists and that you may write to"
                ) from None

        written = anyio.run(exported)
        if output is not None:
            typer.echo(f"wrote {written} rows to {printable(str(output))}", err=True)


async def _listed_snapshots(
    store: Path,
) -> tuple[list[SnapshotMetadata], list[tuple[str, str, list[str]]]]:
    """Every snapshot that reads, and (id, why, the trajectories it holds) for each whose
    stored header does not.

    The listing is one read; only when a header fails to decode is each snapshot loaded on
    its own, so one corrupt row cannot hide the rest.
    """
    reader = await read_store(store)
    try:
        return await list_snapshots(reader), []
    except TrajectoryError:
        pass
    snapshots = SnapshotStore(reader.directory)
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


async def _write_jsonl(rows: AsyncGenerator[DatasetRow, None], output: Path | None) -> int:
    """Rows as JSON lines to stdout, or to ``output`` (renamed into place when complete)."""
    written = 0
    if output is None:
        out = typer.get_binary_stream("stdout")
        async with closing(rows) as stream:
            async for row in stream:
                out.write(jsonl_line(row))
                written += 1
        out.flush()
        return written
    partial = output.with_name(f".{output.name}.partial")
    try:
        async with await anyio.open_file(partial, "wb") as file, closing(rows) as stream:
            buffer: list[bytes] = []
            async for row in stream:
                buffer.append(jsonl_line(row))
                written += 1
                if len(buffer) >= _WRITE_BATCH:
                    await file.write(b"".join(buffer))
                    buffer = []
            await file.write(b"".join(buffer))
        await anyio.Path(partial).replace(output)
    finally:
        await anyio.Path(partial).unlink(missing_ok=True)
    return written


def export_snapshot_command(store: Path, snapshot: str) -> None:
    """``envharness export snapshot ID``: the snapshot's lines to stdout, checked first."""
    out = typer.get_binary_stream("stdout")

    async def stream() -> None:
        reader = await read_store(store)
        # Plain blocking writes, as for `export SESSION`: a slow reader slows the export.
        async with closing(export_snapshot(reader, snapshot)) as lines:
            async for line in lines:
                out.write(line)
        out.flush()

    anyio.run(stream)


def trajectory_table(trajectories: Iterable[Trajectory]) -> Iterator[str]:
    rows = [
        (
            trajectory.session_id,
            f"{trajectory.execution.state} ({trajectory.execution.status})",
            trajectory.collection.state,
            trajectory.termination.cause,
            _outcome(trajectory),
            str(len(trajectory.segments)),
            str(trajectory.journal.records),
        )
        for trajectory in trajectories
    ]
    widths = [max(len(cell) for cell in column) for column in zip(_COLUMNS, *rows, strict=True)]
    yield typer.style(
        "  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths, strict=True)), bold=True
    )
    for row in rows:
        yield "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()


def _outcome(trajectory: Trajectory) -> str:
    outcome = trajectory.outcome
    if outcome.state != "verified":
        return outcome.state
    verdict = "" if outcome.passed is None else (" passed" if outcome.passed else " failed")
    return f"verified{verdict} ({outcome.verifier_version})"
