"""What a principal may see of trajectories, applied where they are read — never in a template.

Admin and viewer tokens see every trajectory: each session's, and each episode of every
imported source. A participant token sees the trajectories of the sessions it may see
(:meth:`Access.sessions`, the same query as everywhere else) and nothing imported; asking for
any other trajectory answers exactly like asking for one that does not exist (404).

A trajectory folds every record of its session, session-level ones included, so a participant
gets a reduced view built here: the states that are the same for everyone (collection,
execution and its status, how it ended, turns, segments and times, as the session summary
already shows them) and nothing that describes the others or the verdict — no environment,
no verified outcome or reward chain, no record counts or seqs, no declared changes, no
snapshot membership, not the projection itself and not the digest check (which reads every
participant's records). Filtering a listing by verified outcome is refused to it (403): the
answer would tell which of its sessions were scored how.

Snapshots, datasets and sources hold whole trajectories of every participant and other tools'
records: they are for admin and viewer tokens only (the endpoints' roles), and a participant
gets 403 from them whatever it names, so the answer never depends on what exists.

Imported sources are read from the store's own backend, SQLite or PostgreSQL alike
(:func:`sources_backend`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from envharness.errors import NotFoundError
from envharness.service.access import Access
from envharness.service.problems import HTTPProblem, not_found
from envharness.service.state import Service
from envharness.service.wire.trajectories import EvidenceCheck, SegmentOut, TrajectorySummary
from envharness.store import SessionInfo
from envharness.store.backend import SqliteBackend
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.snapshots import SnapshotStore
from envharness.store.sources import EpisodeInfo, SourceStore
from envharness.trajectories import (
    EvidenceMismatchError,
    Trajectory,
    TrajectoryError,
    check_evidence,
    evidence_for,
    verify_snapshot,
)
from envharness.trajectories.projection import EXECUTION_OF
from envharness.trajectories.sources import split_trajectory_id, trajectory_id

__all__ = [
    "Candidate",
    "TrajectoryAccess",
    "TrajectoryFilter",
    "check_snapshot",
    "sources_backend",
]


def sources_backend(service: Service) -> SqliteBackend | PostgresBackend:
    """The database of the store's imported sources: the store's own, on either engine."""
    return service.store.backend


@dataclass(frozen=True, slots=True)
class Candidate:
    """A trajectory that can be listed, before it is projected: a session or an episode."""

    id: str
    session: SessionInfo | None = None
    episode: EpisodeInfo | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrajectoryFilter:
    """What a listing keeps; ``None`` keeps everything."""

    origin: str | None = None
    execution: str | None = None
    collection: str | None = None
    termination: str | None = None
    outcome: str | None = None
    experiment: str | None = None
    source: str | None = None

    @property
    def needs_projection(self) -> bool:
        return any((self.collection, self.termination, self.outcome))


@dataclass(frozen=True, slots=True)
class TrajectoryAccess:
    """One principal's view of the store's trajectories."""

    access: Access

    @property
    def full(self) -> bool:
        return self.access.sees_everything

    # -- listing -------------------------------------------------------------------------------

    async def candidates(self, wanted: TrajectoryFilter) -> list[Candidate]:
        """Every trajectory this principal may see that the cheap filters keep: sessions
        oldest first, then each source's episodes in the order they began."""
        if wanted.outcome is not None and not self.full:
            raise HTTPProblem(
                403, "a participant token may not filter by verified outcome: scores are about "
                "every participant", parameter="outcome",
            )  # fmt: skip
        found: list[Candidate] = []
        if wanted.origin in (None, "native") and wanted.source is None:
            for info in await self.access.sessions(experiment_id=wanted.experiment):
                execution = EXECUTION_OF.get(info.status, "running")
                if wanted.execution in (None, execution):
                    found.append(Candidate(info.id, session=info))
        if wanted.origin in (None, "imported") and wanted.experiment is None and self.full:
            sources = SourceStore(sources_backend(self.access.service))
            names = [health.source for health in await sources.health()]
            for name in names:
                if wanted.source not in (None, name):
                    continue
                try:
                    episodes = await sources.episodes(name)
                except NotFoundError:  # a source whose imports were all refused
                    continue
                found += [
                    Candidate(trajectory_id(name, episode.episode), episode=episode)
                    for episode in episodes
                ]
        return found

    async def select(
        self, candidates: list[Candidate], wanted: TrajectoryFilter
    ) -> AsyncGenerator[tuple[Candidate, Trajectory], None]:
        """The candidates' trajectories that ``wanted`` keeps, projected as they are reached
        (so a page stops projecting once it is full)."""
        for candidate in candidates:
            trajectory = await self.project(candidate)
            if self.keeps(trajectory, wanted):
                yield candidate, trajectory

    @staticmethod
    def keeps(trajectory: Trajectory, wanted: TrajectoryFilter) -> bool:
        return (
            wanted.execution in (None, trajectory.execution.state)
            and wanted.collection in (None, trajectory.collection.state)
            and wanted.termination in (None, trajectory.termination.cause)
            and wanted.outcome in (None, trajectory.outcome.state)
        )

    async def project(self, candidate: Candidate) -> Trajectory:
        service = self.access.service
        if candidate.session is not None:
            return await service.projections.native(service.store, candidate.session)
        assert candidate.episode is not None
        return await service.projections.imported(sources_backend(service), candidate.episode)

    # -- one trajectory ------------------------------------------------------------------------

    async def one(self, wanted: str) -> Trajectory:
        """The trajectory with exactly this id, if this principal may see it; 404 otherwise."""
        imported = split_trajectory_id(wanted)
        if imported is None:
            info = await self.access.session(wanted)
            return await self.project(Candidate(info.id, session=info))
        if not self.full:
            raise not_found(f"trajectory {wanted!r}")
        source, episode = imported
        try:
            found = await SourceStore(sources_backend(self.access.service)).episode(source, episode)
        except NotFoundError:
            raise not_found(f"trajectory {wanted!r}") from None
        return await self.project(Candidate(wanted, episode=found))

    async def check(self, trajectory: Trajectory) -> EvidenceCheck:
        """Re-read the trajectory's evidence and compare it with its digest binding."""
        try:
            count = await check_evidence(evidence_for(self.access.service.store), trajectory)
        except EvidenceMismatchError as error:
            return EvidenceCheck(
                ok=False, records=None, problem=str(error),
                trajectory=trajectory.session_id, seq=error.seq,
            )  # fmt: skip
        except TrajectoryError as error:
            return EvidenceCheck(
                ok=False, records=None, problem=str(error), trajectory=trajectory.session_id,
                seq=None,
            )  # fmt: skip
        return EvidenceCheck(
            ok=True, records=count, problem=None, trajectory=trajectory.session_id, seq=None
        )

    # -- what is shown -------------------------------------------------------------------------

    async def summary(
        self, trajectory: Trajectory, *, membership: bool = True
    ) -> TrajectorySummary:
        """The listing's view of ``trajectory`` for this principal."""
        full = self.full
        provenance = trajectory.provenance
        outcome = trajectory.outcome
        snapshots = None
        if full and membership:
            snapshots = await SnapshotStore(self.access.service.store.backend).snapshots_of(
                trajectory.session_id
            )
        native = provenance.origin == "native"
        return TrajectorySummary(
            id=trajectory.session_id,
            origin=provenance.origin,
            source=provenance.source,
            session_id=trajectory.session_id if native else None,
            experiment_id=trajectory.experiment_id,
            scenario_id=trajectory.scenario_id,
            environment=trajectory.environment if full else None,
            collection=trajectory.collection.state,
            execution=trajectory.execution.state,
            status=trajectory.execution.status,
            termination=trajectory.termination.cause,
            outcome=outcome.state if full else None,
            passed=outcome.passed if full else None,
            verifier_version=outcome.verifier_version if full else None,
            segments=len(trajectory.segments),
            turns=trajectory.termination.turns,
            records=trajectory.journal.records if full else None,
            started_at=trajectory.started_at,
            ended_at=trajectory.ended_at,
            snapshots=snapshots,
        )

    def segments(self, trajectory: Trajectory) -> list[SegmentOut]:
        full = self.full
        return [
            SegmentOut(
                index=segment.index,
                cause=segment.cause,
                previous=segment.previous,
                start_turn=segment.start_turn,
                end_turn=segment.end_turn,
                started_at=segment.started_at,
                ended_at=segment.ended_at,
                status=segment.status,
                first_seq=segment.first_seq if full else None,
                last_seq=segment.last_seq if full else None,
                changes=list(segment.changes) if full else None,
            )
            for segment in trajectory.segments
        ]


async def check_snapshot(access: Access, snapshot_id: str) -> EvidenceCheck:
    """``verify_snapshot``: the content address, then every trajectory's digest binding."""
    try:
        await verify_snapshot(access.service.store, snapshot_id)
    except EvidenceMismatchError as error:
        return EvidenceCheck(
            ok=False, records=None, problem=str(error), trajectory=error.session_id or None,
            seq=error.seq,
        )  # fmt: skip
    except TrajectoryError as error:
        return EvidenceCheck(ok=False, records=None, problem=str(error), trajectory=None, seq=None)
    return EvidenceCheck(ok=True, records=None, problem=None, trajectory=None, seq=None)
