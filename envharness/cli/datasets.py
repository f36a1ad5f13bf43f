"""``envharness dataset create/list/export``: immutable training datasets.

A dataset is an ordered selection of snapshots whose every trajectory is complete, terminal,
training-entitled and rewarded; each command calls the same ``envharness.trajectories``
functions as the Python API (``harness.create_dataset``) and renders the answer.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Annotated

import anyio
import typer
from msgspec import UnsetType

from envharness.cli.edge import EXIT_USAGE, CliError, closing
from envharness.cli.options import check_choice
from envharness.cli.refusals import refusal_lines
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.store.locate import AnyStore, describe, reading_store
from envharness.trajectories import (
    AdmissionError,
    Dataset,
    DatasetRow,
    create_dataset,
    dataset_rows,
    list_datasets,
    load_dataset,
    verify_snapshot,
)
from envharness.trajectories.files import jsonl_line, output_file, write_parquet

__all__ = ["FORMATS", "app", "dataset_create", "dataset_export", "dataset_list"]

FORMATS = ("jsonl", "parquet")
_WRITE_BATCH = 256

app = typer.Typer(
    help="Immutable training datasets: ordered selections of snapshots.",
    no_args_is_help=True,
)


@app.command("create")
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
            help="The score metric used as reward: a participant's own when the score has "
            "per-participant metrics (default: the only per-participant metric, pass/fail, or "
            "the only metric).",
        ),
    ] = None,
    participants: Annotated[
        list[str] | None,
        typer.Option(
            "--participant",
            metavar="NAME",
            help="Only this participant's rows (repeat for several; default: every one's).",
        ),
    ] = None,
    shared_reward: Annotated[
        bool,
        typer.Option(
            "--shared-reward",
            help="Let one shared score metric be the reward of several participants' rows "
            "(a cooperative game); refused otherwise.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", help="On refusal, list every refused trajectory, not one per reason."
        ),
    ] = False,
) -> None:
    """Create a dataset from snapshots, all of it or nothing.

    Every trajectory must be complete, terminal, training-entitled and rewarded; otherwise
    nothing is created, and the refusals are told by reason with counts and the fix."""
    store = CliState.of(ctx, postgres=True).location

    async def created() -> Dataset:
        async with reading_store(store) as reader:
            return await create_dataset(
                reader,
                name,
                snapshots,
                reward=reward,
                participants=participants or None,
                shared_reward=shared_reward,
            )

    try:
        dataset = anyio.run(created)
    except AdmissionError as refused:
        what = f"dataset {printable(refused.dataset)!r}"
        for line in refusal_lines(what, refused.refusals, verbose=verbose):
            typer.echo(f"error: {line}" if line.startswith("dataset") else line, err=True)
        raise typer.Exit(EXIT_USAGE) from None
    typer.echo(dataset.id)
    typer.echo(
        f"dataset {printable(dataset.name)!r}: {len(dataset.snapshots)} snapshot(s), "
        f"{dataset.trajectories} trajectories",
        err=True,
    )


@app.command("list")
def dataset_list(ctx: typer.Context) -> None:
    """List the datasets, oldest first."""
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> list[Dataset]:
        async with reading_store(store) as reader:
            return await list_datasets(reader)

    found = anyio.run(listed)
    if not found:
        typer.echo(f"no datasets in {shlex.quote(printable(describe(store)))}", err=True)
    for dataset in found:
        chosen = ""
        if not isinstance(dataset.participants, UnsetType):
            chosen = f"  participants={','.join(map(printable, dataset.participants))}"
        shared = "  shared-reward" if dataset.shared_reward is True else ""
        typer.echo(
            f"{printable(dataset.name)}  {dataset.id}  {dataset.trajectories} trajectories"
            f"  reward={printable(dataset.reward or 'default')}{chosen}{shared}"
            f"  {' '.join(dataset.snapshots)}"
        )


@app.command("export")
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
    check_choice("--format", format, FORMATS)
    if format == "parquet" and output is None:
        raise CliError("--format parquet writes a file: give --output PATH")
    if output is not None:
        output = output_file(output, what="--output")  # followed if a link; a file
    if output is not None and not output.absolute().parent.is_dir():
        raise CliError(
            f"--output {str(output)!r}: there is no directory {str(output.parent)!r}; "
            "create it first, or give a path in one that exists"
        )
    store = CliState.of(ctx, postgres=True).location

    async def exported() -> int:
        async with reading_store(store) as reader:
            return await _exported(reader, name, format, output)

    written = anyio.run(exported)
    if output is not None:
        typer.echo(f"wrote {written} rows to {printable(str(output))}", err=True)


async def _exported(reader: AnyStore, name: str, format: str, output: Path | None) -> int:
    """Write the dataset's rows to stdout or ``output``; how many."""
    if output is None:
        # Lines on stdout cannot be taken back: refuse altered evidence before the first (a
        # file is written aside and renamed, so it needs no second read).
        for snapshot_id in (await load_dataset(reader, name)).snapshots:
            await verify_snapshot(reader, snapshot_id)
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
