"""Evidence in and out of a store: ``harness.sources()``.

:class:`AsyncSources` (from ``AsyncEnvironmentHarness.sources()``) and its blocking face
:class:`Sources` (from ``EnvironmentHarness.sources()``) stream a snapshot out as JSON lines —
``export_snapshot`` — in constant memory. Imports of external sources are added here too
(``docs/trajectories.md``); each method is a thin call into ``envharness.trajectories``, the
same function the command line calls.

The blocking face runs the async stream in an anyio blocking portal (the harness's own when it
is open, or one for the duration of the iteration) and hands lines over in bounded batches, so
a slow consumer slows the export instead of growing a buffer.

On a PostgreSQL store every method works as on SQLite, on a database that already holds a
store (an import does not create one there; a first run or ``copy-store`` does).
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Sequence,
)
from contextlib import aclosing, asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import TypeVar

from envharness._portal import Portal
from envharness.store.locate import describe, postgres_url, reading_store
from envharness.store.postgres import read_postgres_store
from envharness.store.sources import SourcesAt, SourceStore, health_problems
from envharness.trajectories.model import Trajectory
from envharness.trajectories.snapshots import export_snapshot
from envharness.trajectories.sources import (
    ImportReceipt,
    SourceHealth,
    SourceRow,
    import_file,
    import_lines,
    import_records,
    source_trajectories,
)

__all__ = ["AsyncSources", "Sources"]

_T = TypeVar("_T")


class AsyncSources:
    """Streams evidence out of (and imports it into) the store at ``store``: a SQLite store's
    directory, or a PostgreSQL URL."""

    def __init__(self, store: str | PathLike[str]) -> None:
        url = postgres_url(store)
        self._location: Path | str = Path(store) if url is None else url
        """Where the store is, as given (a URL may hold a password: only this keeps it)."""
        self.store: Path | str = self._location if url is None else describe(url)
        """The store as messages name it: the directory, or the URL without its password."""

    @asynccontextmanager
    async def _sources(self) -> AsyncGenerator[SourcesAt, None]:
        """Where the sources are for one call: the SQLite store's directory, or the backend of
        the PostgreSQL store at the URL (checked to hold a store of a version this reads; no
        writer is started: imports write the sources tables only)."""
        if isinstance(self._location, Path):
            yield self._location
            return
        async with read_postgres_store(self._location) as store:
            yield store.backend

    async def export_snapshot(self, snapshot_id: str) -> AsyncGenerator[str, None]:
        """The snapshot as JSON lines (without their newline), checked before the first.

        The same lines as ``envharness export snapshot ID``: the snapshot, then each
        trajectory followed by its records. A snapshot whose evidence was altered is refused
        with the record named (:class:`~envharness.trajectories.EvidenceMismatchError`).
        """
        async with (
            reading_store(self._location) as store,
            aclosing(export_snapshot(store, snapshot_id)) as lines,
        ):
            async for line in lines:
                yield line[:-1].decode()

    # -- imports (docs/imports.md) ------------------------------------------------------------

    async def import_file(
        self,
        source: str,
        path: str | PathLike[str],
        *,
        format: str = "envharness",
        training: bool = False,
    ) -> ImportReceipt:
        """Import a file into ``source`` (``NAMESPACE/NAME``) as one all-or-nothing batch.

        ``format`` is ``envharness`` (hash-chained import lines) or ``otel-genai``
        (OpenTelemetry GenAI spans in OTLP JSON); ``training`` declares the records may be
        used to train models. An identical retry stores nothing; a bad or conflicting record
        raises :class:`~envharness.trajectories.sources.SourceImportError` and stores nothing.
        """
        async with self._sources() as where:
            return await import_file(where, source, path, format=format, training=training)

    async def import_lines(
        self,
        source: str,
        lines: Iterable[bytes],
        *,
        format: str = "envharness",
        origin: str = "input",
        training: bool = False,
    ) -> ImportReceipt:
        """Like :meth:`import_file`, from lines already open (a pipe, a download)."""
        async with self._sources() as where:
            return await import_lines(
                where, source, lines, format=format, origin=origin, training=training
            )

    async def import_records(
        self, source: str, records: Sequence[SourceRow], *, training: bool = False
    ) -> ImportReceipt:
        """Import records sealed in Python (by a
        :class:`~envharness.trajectories.sources.SourceChain`) as one batch."""
        async with self._sources() as where:
            return await import_records(where, source, records, training=training)

    async def health(self, source: str | None = None) -> list[SourceHealth]:
        """Where each source stands: acknowledged position and hash, backlog, gaps, capture
        failures and refused imports (``envharness sources``)."""
        async with self._sources() as where:
            return await SourceStore(where).health(source)

    async def problems(self, source: str | None = None) -> dict[str, list[str]]:
        """Each unhealthy source (of all, or ``source``) with why, in words with the fix:
        positions skipped or offered and not stored, refused imports, and any break in its
        stored chain (every hash is recomputed, as by ``verify``). Healthy sources are absent,
        so an empty answer means every source is sound (``envharness sources`` exits 0)."""
        found = {health.source: health_problems(health) for health in await self.health(source)}
        async with self._sources() as where:
            breaks = await SourceStore(where).verify(source)
        for chain, position, problem in breaks:
            at = f" at position {position}" if position is not None else ""
            found.setdefault(chain, []).append(
                f"its stored chain is broken{at}: {problem}; stored records are never "
                "rewritten: restore the store from a backup, or import the source's records "
                "again under a new source name"
            )
        return {name: problems for name, problems in sorted(found.items()) if problems}

    async def trajectories(self, source: str | None = None) -> list[Trajectory]:
        """The trajectory of every imported episode (of ``source``, or of all sources)."""
        async with self._sources() as where:
            return [trajectory async for trajectory in source_trajectories(where, source)]


class Sources:
    """The blocking face of :class:`AsyncSources`, for scripts and notebooks."""

    def __init__(self, aio: AsyncSources, portal: Portal | None = None) -> None:
        self.aio = aio
        self._portal = portal or Portal()

    def export_snapshot(self, snapshot_id: str) -> Generator[str, None, None]:
        """See :meth:`AsyncSources.export_snapshot`; lines arrive in batches of
        :data:`~envharness._portal.BATCH`."""
        yield from self._portal.iterate(lambda: self.aio.export_snapshot(snapshot_id))

    def import_file(
        self,
        source: str,
        path: str | PathLike[str],
        *,
        format: str = "envharness",
        training: bool = False,
    ) -> ImportReceipt:
        """See :meth:`AsyncSources.import_file`."""
        return self._call(
            lambda: self.aio.import_file(source, path, format=format, training=training)
        )

    def import_records(
        self, source: str, records: Sequence[SourceRow], *, training: bool = False
    ) -> ImportReceipt:
        """See :meth:`AsyncSources.import_records`."""
        return self._call(lambda: self.aio.import_records(source, records, training=training))

    def health(self, source: str | None = None) -> list[SourceHealth]:
        """See :meth:`AsyncSources.health`."""
        return self._call(lambda: self.aio.health(source))

    def problems(self, source: str | None = None) -> dict[str, list[str]]:
        """See :meth:`AsyncSources.problems`."""
        return self._call(lambda: self.aio.problems(source))

    def trajectories(self, source: str | None = None) -> list[Trajectory]:
        """See :meth:`AsyncSources.trajectories`."""
        return self._call(lambda: self.aio.trajectories(source))

    def _call(self, work: Callable[[], Awaitable[_T]]) -> _T:
        return self._portal.call(work)
