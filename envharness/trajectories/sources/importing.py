"""Import a file (or records) into a source: read it in the format named, store it whole.

An :class:`Importer` turns the bytes of one format into records of a source's chain; the
store checks the chain again and keeps the batch whole or refuses it whole. Lines are read and
checked as they stream by, into a spool on disk (:class:`~envharness.store.sources.RowSpool`),
so an import of any size holds about one chunk of records in memory. Two importers ship:
``envharness`` (import lines, docs/imports.md) and ``otel-genai`` (OpenTelemetry GenAI spans
in OTLP JSON). Others plug in through :func:`importer_for`'s table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Protocol

import anyio

from envharness.errors import ConfigurationError
from envharness.store.sources import (
    ImportBatch,
    ImportReceipt,
    RowSpool,
    SourceFormatError,
    SourceImportError,
    SourceRow,
    SourcesAt,
    SourceStore,
    check_source_id,
    positions_of,
)
from envharness.trajectories.sources.format import read_source_lines, row_problem
from envharness.trajectories.sources.otel import OtelGenAIImporter

__all__ = [
    "FORMATS",
    "EnvharnessLinesImporter",
    "Importer",
    "import_file",
    "import_lines",
    "import_records",
    "importer_for",
]


class Importer(Protocol):
    """Reads one format into records of a source, in chain order.

    ``records`` raises :class:`~envharness.store.sources.SourceImportError` (naming ``origin``,
    the line and the position) for input it cannot read.
    """

    format: str
    """The format's name, as ``--format`` takes it and provenance records it."""
    importer: str
    """The importer's name and version, recorded with every import."""
    checks_chain: bool
    """Whether ``records`` itself refuses what :class:`~envharness.store.sources.RowSpool`
    would (each record's source, schema version, hash and link to the one before, with
    :func:`~envharness.store.sources.chain_problem`): then the spool does not check again."""

    def records(
        self, source: str, lines: Iterable[bytes], *, origin: str
    ) -> Iterator[SourceRow]: ...


class EnvharnessLinesImporter:
    """Our own format: lines the source already hash-chained (docs/imports.md)."""

    format = "envharness"
    importer = "envharness.lines/1"
    checks_chain = True

    def records(self, source: str, lines: Iterable[bytes], *, origin: str) -> Iterator[SourceRow]:
        return read_source_lines(source, lines, origin=origin)


_IMPORTERS: dict[str, Importer] = {
    importer.format: importer for importer in (EnvharnessLinesImporter(), OtelGenAIImporter())
}
FORMATS: tuple[str, ...] = tuple(_IMPORTERS)


def importer_for(format: str) -> Importer:
    """The importer of ``format``; :class:`ConfigurationError` naming the known ones."""
    try:
        return _IMPORTERS[format]
    except KeyError:
        raise ConfigurationError(
            f"unknown import format {format!r}; choose one of: {', '.join(FORMATS)}"
        ) from None


async def import_records(
    store: SourcesAt,
    source: str,
    records: Sequence[SourceRow],
    *,
    format: str = "envharness",
    importer: str = "envharness.records/1",
    origin: str = "",
    training: bool = False,
) -> ImportReceipt:
    """Store ``records`` (sealed by :class:`~envharness.trajectories.sources.SourceChain`, or
    read from lines) as one batch of ``source``: all of them, or none.

    ``training`` declares that the records may be used to train models.
    """
    batch = ImportBatch(
        source=check_source_id(source),
        format=format,
        importer=importer,
        origin=origin,
        training=training,
    )
    sources = SourceStore(store)
    for row in records:  # the checks a line gets: stored records are never removed
        problem = row_problem(batch.source, row)
        if problem is not None:
            refused = SourceFormatError(
                f"{origin + ': ' if origin else ''}position {row.position}: {problem}",
                source=batch.source,
                position=row.position,
            )
            await sources.note_refusal(batch, positions_of(records), refused)
            raise refused
    return await sources.append(batch, records)


async def import_lines(
    store: SourcesAt,
    source: str,
    lines: Iterable[bytes],
    *,
    format: str = "envharness",
    origin: str = "input",
    training: bool = False,
) -> ImportReceipt:
    """Read ``lines`` in ``format`` and store them as one batch of ``source``.

    Reading runs in a worker thread (a large file must not stall the event loop), and in
    bounded memory: each record is checked as it is read and spooled to a temporary file,
    then the whole batch is stored from the spool in one transaction. A refusal raises
    :class:`~envharness.store.sources.SourceImportError`, is noted in the import log, and
    stores nothing.
    """
    reader = importer_for(format)
    batch = ImportBatch(
        source=check_source_id(source),
        format=reader.format,
        importer=reader.importer,
        origin=origin,
        training=training,
    )
    sources = SourceStore(store)
    # Checked as read, into a spool on disk: the batch is never held whole (docs/imports.md).
    spool = RowSpool(
        batch.source, prefix=f"{origin}: " if origin else "", checked=reader.checks_chain
    )

    def read_all() -> None:
        for row in reader.records(batch.source, lines, origin=origin):
            spool.add(row)

    try:
        try:
            await anyio.to_thread.run_sync(read_all)
        except SourceImportError as refused:
            await sources.note_refusal(batch, spool.span, refused)
            raise
        if not spool.count:
            raise ConfigurationError(f"{origin} holds no records to import into {source!r}")
        return await sources.append_spooled(batch, spool)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(spool.close)


async def import_file(
    store: SourcesAt,
    source: str,
    path: str | PathLike[str],
    *,
    format: str = "envharness",
    training: bool = False,
) -> ImportReceipt:
    """Import the file at ``path`` (in ``format``) into ``source`` as one batch."""
    file = Path(path)
    check_source_id(source)  # a bad name or format is refused before the file is opened
    importer_for(format)
    try:
        handle = await anyio.to_thread.run_sync(file.open, "rb")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {str(file)!r}: {exc.strerror or exc}; give the path of a file to import"
        ) from None
    try:
        return await import_lines(
            store, source, handle, format=format, origin=file.name, training=training
        )
    finally:
        handle.close()
