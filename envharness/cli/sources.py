"""``envharness import SOURCE FILE`` and ``envharness sources``: imports and source health.

Both call the same functions as ``harness.sources()``
(:class:`envharness.api.sources.AsyncSources`).
A refused import is an :class:`~envharness.errors.EnvharnessError` like any other: the edge
prints its one-line message (which names the line, the position and the fix) and exits 2, and
the store is left as it was. ``sources`` exits 1 when a source is unhealthy
(:meth:`AsyncSources.problems <envharness.api.sources.AsyncSources.problems>`), naming each one and
why, so a script or a scheduled job can act on it.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Iterator
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.api.sources import AsyncSources
from envharness.cli.edge import EXIT_NO
from envharness.cli.options import JsonLines
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.store.locate import describe
from envharness.store.sources import ImportReceipt, SourceHealth
from envharness.trajectories.sources import FORMATS

__all__ = ["app", "health_table", "import_", "receipt_line", "sources"]

_COLUMNS = (
    "source", "head", "hash", "records", "episodes", "backlog", "gaps", "capture failures",
    "refused",
)  # fmt: skip
_NUMERIC_FROM = 3
_HASH_SHOWN = 12


app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds these commands to the root."""


@app.command("import")
def import_(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="The source to import into, NAMESPACE/NAME (e.g. acme/nightly-evals).",
        ),
    ],
    file: Annotated[
        str,
        typer.Argument(metavar="FILE", help="The file to import; - reads standard input."),
    ],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help=f"The file's format: {', '.join(FORMATS)} (OpenTelemetry GenAI spans in "
            "OTLP JSON). See docs/imports.md.",
        ),
    ] = "envharness",
    training: Annotated[
        bool,
        typer.Option("--training", help="Declare that these records may be used to train models."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="The receipt as one JSON object.")
    ] = False,
) -> None:
    """Import a file of another tool's records into a source, all of it or nothing.

    Importing the same records again stores nothing; a record that conflicts with one
    already imported, does not chain, or leaves a gap refuses the whole file (exit 2).
    """
    api = AsyncSources(CliState.of(ctx, postgres=True).location)

    async def imported() -> ImportReceipt:
        if file == "-":
            return await api.import_lines(
                source, sys.stdin.buffer, format=format, origin="stdin", training=training
            )
        return await api.import_file(source, file, format=format, training=training)

    receipt = anyio.run(imported)
    if as_json:
        typer.echo(msgspec.json.encode(receipt).decode())
    else:
        typer.echo(receipt_line(receipt))


@app.command("sources")
def sources(
    ctx: typer.Context,
    source: Annotated[
        str | None,
        typer.Argument(metavar="[SOURCE]", help="Only this source.", show_default=False),
    ] = None,
    as_json: JsonLines = False,
) -> None:
    """Show each imported source's health, and exit 1 when one is unhealthy.

    Health is the acknowledged position and hash, the backlog of positions offered but not
    stored, gaps, capture failures the source reported, and imports refused since the last
    one that stored something.

    Exit status 1 when a source is unhealthy — a gap, a backlog, a refused last import, or
    a break in its stored chain (every hash is recomputed) — with each named on stderr.
    Capture failures the source reported are shown, not counted: no import can mend them.
    """
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> tuple[list[SourceHealth], dict[str, list[str]]]:
        api = AsyncSources(store)
        return await api.health(source), await api.problems(source)

    found, problems = anyio.run(listed)
    if as_json:
        for health in found:
            typer.echo(msgspec.json.encode(health).decode())
    elif found:
        for line in health_table(found):
            typer.echo(line)
    else:
        typer.echo(f"no imported sources in {shlex.quote(printable(describe(store)))}", err=True)
    for name, reasons in problems.items():
        typer.echo(f"unhealthy: {printable(name)}: {printable('; '.join(reasons))}", err=True)
    if problems:
        raise typer.Exit(EXIT_NO)


def receipt_line(receipt: ImportReceipt) -> str:
    positions = (
        str(receipt.first_position)
        if receipt.first_position == receipt.last_position
        else f"{receipt.first_position}..{receipt.last_position}"
    )
    return (
        f"imported {receipt.stored} new record{'s' if receipt.stored != 1 else ''} into "
        f"{printable(receipt.source)} ({receipt.format}, positions {positions}, "
        f"{receipt.duplicates} already held); acknowledged position {receipt.head_position}, "
        f"hash {receipt.head_hash[:_HASH_SHOWN]}"
    )


def health_table(found: Iterable[SourceHealth]) -> Iterator[str]:
    """One row per source, then one line per source that has a refusal to explain."""
    found = list(found)
    rows = [
        (
            printable(health.source),
            str(health.head_position) if health.head_position >= 0 else "-",
            (health.head_hash or "-")[:_HASH_SHOWN],
            str(health.records),
            str(health.episodes),
            str(health.backlog),
            ", ".join(
                str(gap.first) if gap.first == gap.last else f"{gap.first}..{gap.last}"
                for gap in health.gaps
            )
            or "0",
            str(health.capture_failures),
            str(health.refused),
        )
        for health in found
    ]
    widths = [max(len(cell) for cell in column) for column in zip(_COLUMNS, *rows, strict=True)]
    yield typer.style(_row(_COLUMNS, widths), bold=True)
    for row in rows:
        line = _row(row, widths)
        troubled = row[5] != "0" or row[6] != "0" or row[7] != "0" or row[8] != "0"
        yield typer.style(line, fg="yellow") if troubled else line
    for health in found:
        if health.last_refusal:
            yield f"{printable(health.source)}: last refused: {printable(health.last_refusal)}"
        if health.last_capture_failure:
            yield (
                f"{printable(health.source)}: last capture failure: "
                f"{printable(health.last_capture_failure)}"
            )


def _row(cells: Iterable[str], widths: list[int]) -> str:
    return "  ".join(
        cell.rjust(width) if index >= _NUMERIC_FROM else cell.ljust(width)
        for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()
