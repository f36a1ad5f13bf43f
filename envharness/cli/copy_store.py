"""``envharness copy-store SRC DST``: move a store's evidence between SQLite and PostgreSQL.

Each side is a store directory or a ``postgresql://`` URL. The source is opened for reading
only — no writer, no crash recovery — so copying changes nothing there; the destination is
created, and refused before anything is written to it when it already holds evidence (or, for
a directory, files that are not a store). :func:`envharness.store.postgres.copy.copy_store`
checks every record, blob, snapshot and dataset on the way, and copies the source as it was
when the copy started. A URL is never printed as given: it may hold a password, so messages
name its user, host, port and database. What stays behind (:data:`LEFT_BEHIND`) is said on
stderr after a copy that succeeds, in either direction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer

from envharness.cli.edge import CliError, ProgressLine
from envharness.cli.render import printable
from envharness.errors import StoreError, StoreLayoutError
from envharness.store.database import DATABASE_NAME
from envharness.store.locate import AnyStore, opening_store, postgres_url, reading_store
from envharness.store.postgres import copy as copying
from envharness.store.postgres.driver import target

__all__ = ["LEFT_BEHIND", "app", "copy_store_command"]

LEFT_BEHIND = (
    "not copied: service tokens (credentials for the source's service alone; issue new ones "
    "with `envharness --store DST token issue`) and stop and pause requests (meant for runs "
    "of the source, taken or stale once it is copied)"
)

app = typer.Typer()
"""No name: :mod:`envharness.cli.app` adds ``copy-store`` to the root."""


@app.command("copy-store")
def copy_store_command(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SRC", help="The store to copy: a store directory or a postgresql:// URL."
        ),
    ],
    destination: Annotated[
        str,
        typer.Argument(
            metavar="DST",
            help="Where to copy it: a new or empty store directory, or a postgresql:// URL of "
            "an existing database without evidence (createdb first).",
        ),
    ],
) -> None:
    """Copy every session, experiment, optimizer run, imported source, snapshot and dataset
    from SRC into the empty DST, checking every digest; SQLite to PostgreSQL or back. SRC is
    only read; service tokens are not copied (issue new ones for DST)."""
    _refuse_same(source, destination)
    existing = _existing(destination)
    read_from, write_to = _location(source), _location(destination)
    copied = snapshots = 0

    def tick(chain_id: str) -> None:
        nonlocal copied
        copied += 1
        line.show(f"copying: {copied} chains")

    def tick_snapshot(snapshot_id: str) -> None:
        nonlocal snapshots
        snapshots += 1
        line.show(f"copying: {copied} chains, {snapshots} snapshots")

    async def copy() -> copying.CopyReport:
        await _refuse_evidence(existing, destination)
        async with (
            reading_store(read_from) as reader,
            opening_store(write_to) as writer,
        ):
            await _refuse_held(writer, destination)  # written to since it was looked at
            try:
                return await copying.copy_store(
                    reader, writer, on_chain=tick, on_snapshot=tick_snapshot
                )
            except StoreError as failure:
                whole = f"{copied} chains" + (f" and {snapshots} snapshots" if snapshots else "")
                failure.add_note(
                    f"the destination holds what was copied before: {whole} whole, and of "
                    "what came next at most a start; remove it (or name a new one) before "
                    "copying again"
                )
                raise

    with ProgressLine() as line:
        report = anyio.run(copy)
    typer.echo(
        f"{report.chains} chains, {report.records} records, {report.blobs} blobs, "
        f"{report.sources} imported sources ({report.imported} records), "
        f"{report.artifacts} artifacts, {report.snapshots} snapshots, "
        f"{report.datasets} datasets copied"
    )
    typer.echo(LEFT_BEHIND, err=True)


def _location(given: str) -> str | Path:
    """A URL as given; a directory with ``~`` expanded."""
    return given if postgres_url(given) else Path(given).expanduser()


def _named(location: str) -> str:
    """``location`` as a message may show it: a URL without its password."""
    return str(target(location)) if postgres_url(location) else printable(location)


def _refuse_same(source: str, destination: str) -> None:
    """SRC and DST one store (the same directory, or the same database by any user)."""
    source_url, destination_url = postgres_url(source), postgres_url(destination)
    if source_url is not None and destination_url is not None:
        one, other = target(source_url), target(destination_url)
        same = (one.host, one.port, one.database) == (other.host, other.port, other.database)
    elif source_url is None and destination_url is None:
        same = Path(source).expanduser().resolve() == Path(destination).expanduser().resolve()
    else:
        same = False
    if same:
        raise CliError(
            f"SRC and DST are the same store ({_named(source)}); name a new, empty store as DST"
        )


def _existing(destination: str) -> str | Path | None:
    """The store already at ``destination`` to look into before copying: a URL, or a directory
    with a store's database; ``None`` for a new or empty directory. A directory holding files
    but no store is refused: a copy would mix into them."""
    if postgres_url(destination) is not None:
        return destination
    directory = Path(destination).expanduser()
    if not directory.is_dir():
        return None  # new, created by the copy (or a file, refused when it is opened)
    if (directory / DATABASE_NAME).exists():
        return directory
    if any(directory.iterdir()):
        raise CliError(
            f"DST {printable(destination)!r} is a directory with files in it but no store; "
            "name a new or empty directory"
        )
    return None


async def _refuse_evidence(existing: str | Path | None, destination: str) -> None:
    """A destination that already holds anything a copy writes, refused before it is opened
    for writing (which would recover its chains): it is left exactly as it was."""
    if existing is None:
        return
    try:
        async with reading_store(existing) as store:
            await _refuse_held(store, destination)
    except StoreLayoutError:
        return  # a database without a store: the copy creates it


async def _refuse_held(store: AnyStore, destination: str) -> None:
    """Anything a copy writes already in ``store``: refused as a usage error, so that no note
    about what was copied follows (nothing was)."""
    try:
        await copying.refuse_non_empty(store)
    except StoreError as held:
        raise CliError(f"DST {_named(destination)}: {held}") from None
