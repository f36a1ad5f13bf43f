"""Move the evidence of one store into another: SQLite to PostgreSQL, or back.

Every chain (session, experiment, optimizer run) is read in ``seq`` order and each record is
checked before it is written — its digest recomputed over the stored bytes, its ``prev`` link
and its place in the chain — with the state blobs and artifacts it cites, each checked against
its sha256. The destination's own writer then commits the rows unchanged (so the digests stay
the same and its indexes are rebuilt from the records by the same rules), and its heads are
compared with the source's at the end. A destination that already holds anything a copy
writes is refused before anything is written (:func:`refuse_non_empty`): chains copied into a
store with chains of its own could collide, and nothing there is touched.

The copy is of the source as it was when the copy started: runners may go on writing to it,
and what they write meanwhile is left out. Its snapshots and datasets are listed first, then
its chains (so every session a listed snapshot holds is listed too); each chain is copied to
its end as read.

Imported sources are copied after the chains, as they were stored (their import log and
records unchanged, every hash recomputed: :mod:`envharness.store.sources.transfer`), then the
snapshots and datasets, each checked against its content address
(:mod:`envharness.store.snapshot_transfer`): they bind evidence that is then already there.
Two things are not copied (``docs/postgresql.md``): the service's tokens, which are
credentials for the service of the source alone — a copy must not grant access to another
database unasked, so tokens are issued anew there — and stop and pause requests, which are
addressed to runs of the source and are spent or stale once the copy is made.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Protocol

import msgspec

from envharness.errors import NotFoundError, StoreError
from envharness.records import Artifact, RecordRow, decode_payload
from envharness.store.backend import SqliteBackend
from envharness.store.optimizer_index import OptimizerRunInfo
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.reader import ExperimentInfo, SessionInfo
from envharness.store.snapshot_transfer import Bound, copy_snapshots, list_snapshots
from envharness.store.sources.transfer import copy_sources
from envharness.store.verify import STATEFUL, digest_holds

__all__ = ["COPY_BATCH_ROWS", "CopyReport", "EvidenceStore", "copy_store", "refuse_non_empty"]

COPY_BATCH_ROWS = 1000
"""Rows per append to the destination: one transaction each, a bounded amount in memory."""


class EvidenceStore(Protocol):
    """What copying needs of a store; :class:`Store` and ``PostgresStore`` both have it."""

    async def sessions(self) -> list[SessionInfo]: ...
    async def experiments(self) -> list[ExperimentInfo]: ...
    async def optimizer_runs(self) -> list[OptimizerRunInfo]: ...
    async def last_position(self) -> int: ...
    def rows(self, session_id: str) -> AsyncGenerator[RecordRow, None]: ...
    async def blob(self, digest: str) -> bytes: ...
    async def append(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> None: ...
    async def put_artifact(self, data: bytes) -> str: ...
    @property
    def backend(self) -> SqliteBackend | PostgresBackend: ...


class CopyReport(msgspec.Struct, frozen=True, kw_only=True):
    chains: int
    records: int
    blobs: int
    artifacts: int
    sources: int = 0
    """Imported sources copied, and their records."""
    imported: int = 0
    snapshots: int = 0
    """Snapshots and datasets copied."""
    datasets: int = 0


async def copy_store(
    source: EvidenceStore,
    destination: EvidenceStore,
    on_chain: Callable[[str], None] | None = None,
    on_snapshot: Callable[[str], None] | None = None,
) -> CopyReport:
    """Copy every chain of ``source`` into the empty ``destination`` (both open; the
    destination for writing), then its imported sources, snapshots and datasets, checking
    every digest and content address; a :class:`StoreError` names the first record, blob,
    snapshot or dataset that does not hold, and what had been copied before it stays a valid
    prefix of each chain. ``on_chain`` and ``on_snapshot`` hear of each one copied."""
    await refuse_non_empty(destination)
    listed = await list_snapshots(source.backend)  # before the chains: see the module doc
    chains = await _chains(source)
    records = 0
    blobs: set[str] = set()
    artifacts: set[str] = set()
    for chain_id in chains:
        records += await _copy_chain(source, destination, chain_id, blobs, artifacts)
        if on_chain is not None:
            on_chain(chain_id)
    copied = await _chains(destination)
    if copied != chains:
        missing = sorted(set(chains) - set(copied))
        raise StoreError(
            f"the destination's index lists {len(copied)} chains after the copy, the source's "
            f"{len(chains)} (first missing: {missing[:3]}); run `envharness verify` on both"
        )
    sources, imported = await copy_sources(source.backend, destination.backend)
    bound = Bound(chains=set(chains), sources=await _source_names(destination))
    snapshots, datasets = await copy_snapshots(
        source.backend, destination.backend, listed, bound, on_snapshot
    )
    if isinstance(destination.backend, PostgresBackend):
        # A freshly loaded table has no statistics until autovacuum comes by (~a minute):
        # until then the planner reads a session's every record and sorts them for each page
        # the viewer asks (0.9 ms against 0.05 analyzed). A role that does not own the tables
        # is skipped by the server with a warning, never an error.
        await destination.backend.read_native(lambda connection: connection.execute(_ANALYZE))
    return CopyReport(
        chains=len(chains),
        records=records,
        blobs=len(blobs),
        artifacts=len(artifacts),
        sources=sources,
        imported=imported,
        snapshots=snapshots,
        datasets=datasets,
    )


async def refuse_non_empty(destination: EvidenceStore) -> None:
    """Refuse a destination that holds anything a copy writes — records, imported sources,
    snapshots or datasets — before anything is written to it: a chain, source or dataset of
    the same name could not be copied beside one already there."""
    held: list[str] = []
    if await destination.last_position() != -1:
        held.append("records")
    imports, snapshots, datasets = await destination.backend.read(_held)
    if imports:
        held.append("imported sources")
    if snapshots or datasets:
        held.append(f"{snapshots} snapshots and {datasets} datasets")
    if held:
        raise StoreError(
            f"the destination store already holds {', '.join(held)}; copy into a new, empty "
            "store (nothing was written to it)"
        )


def _held(connection: Any) -> tuple[int, int, int]:
    found = connection.execute(
        "SELECT (SELECT COUNT(*) FROM source_imports), (SELECT COUNT(*) FROM snapshots),"
        " (SELECT COUNT(*) FROM datasets)"
    ).fetchone()
    return int(found[0]), int(found[1]), int(found[2])


async def _source_names(store: EvidenceStore) -> set[str]:
    """The imported sources ``store`` holds whole (the ``sources`` entry is written last)."""
    rows = await store.backend.read(lambda c: c.execute("SELECT id FROM sources").fetchall())
    return {str(row[0]) for row in rows}


_ANALYZE = (
    "ANALYZE sessions, experiments, optimizer_runs, harness_versions, records, blobs, artifacts,"
    " sources, source_imports, source_records, snapshots, snapshot_trajectories, datasets"
)
"""Every table a copy fills: the viewer's pages, trajectories and datasets read them all."""


async def _copy_chain(
    source: EvidenceStore,
    destination: EvidenceStore,
    chain_id: str,
    blobs: set[str],
    artifacts: set[str],
) -> int:
    """One chain, checked row by row, in appends of at most :data:`COPY_BATCH_ROWS` rows
    (each with the blobs its rows are the first to cite); returns the rows copied."""
    head: tuple[int, str] | None = None
    batch: list[RecordRow] = []
    cited: dict[str, bytes] = {}
    copied = 0
    async with aclosing(source.rows(chain_id)) as rows:
        async for row in rows:
            _check(row, head)
            head = (row.seq, row.digest)
            state, artifact = _cites(row)
            if state is not None and state not in blobs and state not in cited:
                cited[state] = await source.blob(state)  # checked against its digest there
            if artifact is not None and artifact not in artifacts:
                data = await _artifact(source, artifact)
                if await destination.put_artifact(data) != artifact:
                    raise StoreError(f"artifact {artifact} changed while it was copied")
                artifacts.add(artifact)
            batch.append(row)
            if len(batch) >= COPY_BATCH_ROWS:
                await destination.append(batch, cited)
                copied += len(batch)
                blobs.update(cited)
                batch, cited = [], {}
    if batch or cited:
        await destination.append(batch, cited)
        copied += len(batch)
        blobs.update(cited)
    return copied


async def _chains(store: EvidenceStore) -> list[str]:
    """Every chain's id, oldest first (experiments and runs before the sessions they made)."""
    found: list[tuple[str, str]] = []
    found += [(info.created_at, info.id) for info in await store.experiments()]
    found += [(info.created_at, info.id) for info in await store.optimizer_runs()]
    found += [(info.created_at, info.id) for info in await store.sessions()]
    return [chain_id for _, chain_id in sorted(found)]


def _check(row: RecordRow, head: tuple[int, str] | None) -> None:
    """The row's place in its chain and its digest, as ``verify`` checks them."""
    expected, prev = (0, None) if head is None else (head[0] + 1, head[1])
    if row.seq != expected or row.prev != prev:
        raise StoreError(
            f"the source chain {row.session_id} breaks at seq {row.seq} (seq {expected} was "
            "expected, linked to the one before); run `envharness verify` on the source"
        )
    if not digest_holds(row):
        raise StoreError(
            f"the source record {row.session_id} seq {row.seq} ({row.kind!r}) does not match "
            "its digest: it was altered; run `envharness verify` on the source"
        )


def _cites(row: RecordRow) -> tuple[str | None, str | None]:
    """The state blob and the artifact a row cites, if any."""
    if row.kind not in _CITING:
        return None, None
    payload = decode_payload(row.payload)
    if isinstance(payload, Artifact):
        return None, payload.sha256
    state = payload.state if isinstance(payload, STATEFUL) else None
    return state or None, None


_CITING = frozenset(str(kind.__struct_config__.tag) for kind in (*STATEFUL, Artifact))


async def _artifact(store: EvidenceStore, sha256: str) -> bytes:
    """An artifact's bytes from either store, checked against its sha256 by its backend."""
    try:
        return await store.backend.artifact(sha256)
    except NotFoundError as missing:
        raise StoreError(str(missing)) from None  # a store error: the copy stops, as on damage
