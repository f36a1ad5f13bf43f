"""``envharness trajectories``: sessions and imported episodes as trajectories.

The command calls the same ``envharness.trajectories`` functions as the Python API
(``harness.trajectory``) and renders the answer; docs/trajectories.md is the guide. Snapshots
and datasets have their own modules (:mod:`envharness.cli.snapshots`,
:mod:`envharness.cli.datasets`), which show trajectories with :func:`trajectory_table`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import CliError
from envharness.cli.options import check_choice
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.store.locate import describe, reading_store
from envharness.trajectories import Trajectory, project, source_trajectories

__all__ = ["ORIGINS", "app", "trajectories", "trajectory_table"]

ORIGINS = ("native", "imported")
_COLUMNS = ("session", "execution", "collection", "termination", "outcome", "segs", "records")

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds this command to the root."""


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
    """List sessions and imported episodes as trajectories, with their four states.

    Each trajectory's segments and states (collection, execution, termination, verified
    outcome) are bound to its evidence by digest. Sessions come first, then each source's
    episodes."""
    check_choice("--origin", origin, ORIGINS)
    if source is not None and origin == "native":
        raise CliError("--source lists imported episodes; it cannot go with --origin native")
    if sessions and (origin is not None or source is not None):
        raise CliError("give trajectory ids, or --origin/--source to list them, not both")
    store = CliState.of(ctx, postgres=True).location

    async def projected() -> list[Trajectory]:
        async with reading_store(store) as reader:
            if sessions:
                return [await project(reader, trajectory_id) for trajectory_id in sessions]
            found = []
            if origin != "imported" and source is None:
                found += [await project(reader, info.id) for info in await reader.sessions()]
            if origin != "native":
                found += [t async for t in source_trajectories(reader.backend, source)]
            return found

    found = anyio.run(projected)
    if as_json:
        for trajectory in found:
            typer.echo(msgspec.json.encode(trajectory).decode())
    elif found:
        for line in trajectory_table(found):
            typer.echo(line)
    else:
        typer.echo(f"no trajectories in {shlex.quote(printable(describe(store)))}", err=True)


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
