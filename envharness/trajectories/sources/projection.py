"""Project an imported episode into the same :class:`Trajectory` contract as a native session.

One trajectory per episode of a source. Its id is ``SOURCE:EPISODE`` (source ids never hold a
colon); its journal range is the episode's first and last position in the source's chain, bound
by the source's own hash at the last one — which covers, through ``prev``, every earlier record
of the source (``SOURCE_DIGEST_ALGORITHM``). ``records`` counts the episode's own records: other
episodes' records may lie between them. Its provenance says ``imported``, from which source, in
which format, by which importer, and whether every import that brought it declared it fit for
training.

The four states come from the kinds ``docs/imports.md`` lists: ``episode.ended`` ends it
(termination ``imported``, execution from its status), ``capture.failed`` marks its collection
``gaps``, ``score`` records make a verified (or disputed) outcome, ``episode.started`` names its
environment, scenario and participants. Like the native projection, it is a fold in position
order that keeps summaries, never the rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing

import msgspec

from envharness.errors import NotFoundError
from envharness.store.sources import EpisodeInfo, SourceRow, SourcesAt, SourceStore
from envharness.trajectories.errors import TrajectoryError
from envharness.trajectories.model import (
    CollectionStatus,
    ExecutionState,
    ExecutionStatus,
    JournalRange,
    Provenance,
    RewardChain,
    Segment,
    Termination,
    Trajectory,
    VerifiedOutcome,
)
from envharness.trajectories.projection import EXECUTION_OF
from envharness.trajectories.sources.kinds import (
    CaptureFailed,
    EpisodeEnded,
    EpisodeStarted,
    SourceScore,
    decode_shaping,
)

__all__ = [
    "SOURCE_DIGEST_ALGORITHM",
    "EpisodeProjector",
    "project_episode",
    "project_info",
    "project_rows",
    "source_trajectories",
    "split_trajectory_id",
    "trajectory_id",
]

SOURCE_DIGEST_ALGORITHM = "sha256-source-chain/1"
"""How an imported trajectory's ``head_digest`` binds its range: the source's own hash of the
record at ``last_seq`` (docs/imports.md, 'The hash'), chained through ``prev`` from position 0."""


def trajectory_id(source: str, episode: str) -> str:
    return f"{source}:{episode}"


def split_trajectory_id(value: str) -> tuple[str, str] | None:
    """``(source, episode)`` of an imported trajectory's id; ``None`` for a native one."""
    source, colon, episode = value.partition(":")
    return (source, episode) if colon and "/" in source and episode else None


class EpisodeProjector:
    """Fold one episode's rows, in position order, into a trajectory."""

    def __init__(self, info: EpisodeInfo) -> None:
        self.info = info
        self._first: int | None = None
        self._last = -1
        self._head = ""
        self._count = 0
        self._started_at: str | None = None
        self._turns = 0
        self._started: EpisodeStarted | None = None
        self._ended: tuple[int, str, EpisodeEnded] | None = None
        self._participants: dict[str, str] = {}
        self._failures: list[tuple[int, CaptureFailed]] = []
        self._scores: list[tuple[SourceRow, SourceScore]] = []

    def feed(self, row: SourceRow) -> None:
        if row.position <= self._last:
            raise ValueError(
                f"rows of {self.info.source} must come in ascending positions: "
                f"{row.position} after {self._last}"
            )
        if self._first is None:
            self._first = row.position
            self._started_at = row.at
        self._last = row.position
        self._head = row.hash
        self._count += 1
        if row.turn is not None:
            self._turns = max(self._turns, row.turn)
        if row.participant is not None:
            self._participants.setdefault(row.participant, "")
        try:
            payload = decode_shaping(row.kind, row.payload)
        except msgspec.DecodeError as exc:  # stored before imports checked every record
            raise TrajectoryError(
                f"source {row.source!r} position {row.position}: the payload of its "
                f"{row.kind!r} record is malformed ({exc}), so episode {row.episode!r} cannot "
                "be projected; re-import the source's records under another name"
            ) from None
        if isinstance(payload, EpisodeStarted):
            self._started = payload
            self._participants.update(payload.participants)
        elif isinstance(payload, EpisodeEnded):
            self._ended = (row.position, row.at, payload)
            self._participants.update(payload.participants)
            if payload.turns is not None:
                self._turns = max(self._turns, payload.turns)
        elif isinstance(payload, CaptureFailed):
            self._failures.append((row.position, payload))
        elif isinstance(payload, SourceScore):
            self._scores.append((row, payload))

    def trajectory(self) -> Trajectory:
        info = self.info
        if self._first is None:
            raise NotFoundError(f"episode {info.episode!r} of {info.source!r} has no records")
        ended = self._ended
        status = ended[2].status if ended is not None else "running"
        execution: ExecutionState = EXECUTION_OF.get(status, "running")
        return Trajectory(
            session_id=trajectory_id(info.source, info.episode),
            provenance=Provenance(
                origin="imported",
                source=info.source,
                format="+".join(info.formats),
                source_position=self._last,
                source_hash=self._head,
                importer="+".join(info.importers),
                training=info.training,
            ),
            journal=JournalRange(
                chain=info.source,
                first_seq=self._first,
                last_seq=self._last,
                records=self._count,
                head_digest=self._head,
                algorithm=SOURCE_DIGEST_ALGORITHM,
            ),
            environment=self._started.environment if self._started else None,
            scenario_id=self._started.scenario_id if self._started else None,
            participants=dict(self._participants),
            segments=(
                Segment(
                    index=0,
                    cause="import",
                    first_seq=self._first,
                    last_seq=self._last,
                    end_turn=self._turns or None,
                    started_at=self._started_at or "",
                    ended_at=ended[1] if ended else None,
                    status=status if ended else None,
                ),
            ),
            collection=self._collection(),
            execution=ExecutionStatus(state=execution, status=status),
            termination=self._termination(),
            outcome=self._outcome(),
            started_at=self._started_at,
            ended_at=ended[1] if ended else None,
        )

    def _collection(self) -> CollectionStatus:
        if self._failures:
            shown = "; ".join(
                f"position {position}: {failure.detail}" for position, failure in self._failures[:5]
            )
            more = len(self._failures) - 5
            return CollectionStatus(
                state="gaps",
                detail=f"the source reported {len(self._failures)} capture failure(s): {shown}"
                + (f"; and {more} more" if more > 0 else ""),
            )
        if self._ended is None:
            return CollectionStatus(
                state="partial",
                detail="no episode.ended record yet: the source may send more of it",
            )
        return CollectionStatus(state="complete")

    def _termination(self) -> Termination:
        if self._ended is None:
            return Termination(cause="not_ended", status="running", turns=self._turns)
        position, _, ended = self._ended
        return Termination(
            cause="imported",
            status=ended.status,
            reason=ended.reason,
            error=ended.error,
            seq=position,
            turns=self._turns,
        )

    def _outcome(self) -> VerifiedOutcome:
        if not self._scores:
            return VerifiedOutcome(state="unverified", detail="no score record")
        row, latest = self._scores[-1]
        first = self._first if self._first is not None else 0
        reward = RewardChain(
            score_seq=row.position,
            score_digest=row.hash,
            scorer_version=latest.scorer,
            metrics=dict(latest.metrics),
            passed=latest.passed,
            cites=latest.cites,
            resolved=bool(latest.scorer)
            and bool(latest.cites)
            and all(first <= cited < row.position for cited in latest.cites),
        )
        verdicts = {score.passed for _, score in self._scores} - {None}
        if len(verdicts) > 1:
            said = ", ".join(
                f"position {seen.position} ({score.scorer}: passed={score.passed})"
                for seen, score in self._scores
            )
            return VerifiedOutcome(
                state="disputed",
                verifier_version=latest.scorer,
                reward=reward,
                detail=f"score records disagree: {said}",
            )
        return VerifiedOutcome(
            state="verified",
            verifier_version=latest.scorer,
            passed=latest.passed,
            reward=reward,
        )


def project_rows(info: EpisodeInfo, rows: Iterable[SourceRow]) -> Trajectory:
    """The trajectory of one episode's ``rows`` (ascending positions)."""
    projector = EpisodeProjector(info)
    for row in rows:
        projector.feed(row)
    return projector.trajectory()


async def project_episode(store: SourcesAt, source: str, episode: str) -> Trajectory:
    """The trajectory of one imported episode; :class:`NotFoundError` when there is none."""
    info = await SourceStore(store).episode(source, episode)
    return await project_info(store, info)


async def project_info(store: SourcesAt, info: EpisodeInfo) -> Trajectory:
    """The trajectory of the episode ``info`` describes (as a listing found it): its own
    records only, read through the episode index."""
    projector = EpisodeProjector(info)
    rows = SourceStore(store).rows(info.source, episode=info.episode)
    async with aclosing(rows) as found:
        async for row in found:
            projector.feed(row)
    return projector.trajectory()


async def source_trajectories(
    store: SourcesAt, source: str | None = None
) -> AsyncIterator[Trajectory]:
    """The trajectory of every imported episode (of ``source``, or of every source), in
    source order, then in the order episodes began."""
    sources = SourceStore(store)
    names = [source] if source is not None else [health.source for health in await sources.health()]
    for name in names:
        try:
            episodes = await sources.episodes(name)
        except NotFoundError:
            if source is not None:
                raise
            continue  # a source whose imports were all refused has no episodes
        for info in episodes:
            projector = EpisodeProjector(info)
            async with aclosing(sources.rows(name, episode=info.episode)) as rows:
                async for row in rows:
                    projector.feed(row)
            yield projector.trajectory()
