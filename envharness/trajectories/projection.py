"""Project a journal into a :class:`~envharness.trajectories.model.Trajectory`.

The projection is a fold over stored rows in ``seq`` order: it keeps a few summaries (the open
segment, the last status, the score records), never the rows, so a session of any length is
projected in constant memory. It reads only the rows — never the session index — so the same
rows always give the same trajectory, and a trajectory can be recomputed from an export.

Only the kinds that shape a trajectory are decoded; the others are counted and chained.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from envharness.errors import NotFoundError
from envharness.records import (
    Branch,
    Finding,
    Outcome,
    RecordRow,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionCreated,
    SessionStatus,
)
from envharness.trajectories.model import (
    CollectionState,
    CollectionStatus,
    ExecutionState,
    ExecutionStatus,
    Gap,
    JournalRange,
    Provenance,
    RewardChain,
    Segment,
    SegmentCause,
    Termination,
    TerminationCause,
    Trajectory,
    Transcribed,
    VerifiedOutcome,
)

__all__ = ["EXECUTION_OF", "Projector", "project_rows", "project_stream"]

EXECUTION_OF: dict[str, ExecutionState] = {
    "created": "running",
    "running": "running",
    "completed": "finished",
    "failed": "finished",
    "stopped": "interrupted",
    "interrupted": "interrupted",
    "paused": "interrupted",
}
"""Session status → execution state: finished means it ran to its end (well or not);
interrupted means it can be resumed or continued."""

_TERMINATION_OF: dict[str, TerminationCause] = {
    "failed": "failed",
    "stopped": "stopped",
    "interrupted": "interrupted",
    "paused": "paused",
}

_SHAPING = frozenset(
    {
        "session.created",
        "session.status",
        "segment.started",
        "segment.ended",
        "outcome",
        "score",
        "finding",
        "branch",
    }
)
_ANSWERING = frozenset({"action.attempted", "transcript"})
"""Kinds counted (never decoded) to say how much of each participant's conversation its agent
recorded (:class:`Transcribed`)."""
_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    "session.created": msgspec.json.Decoder(SessionCreated),
    "session.status": msgspec.json.Decoder(SessionStatus),
    "segment.started": msgspec.json.Decoder(SegmentStarted),
    "segment.ended": msgspec.json.Decoder(SegmentEnded),
    "outcome": msgspec.json.Decoder(Outcome),
    "score": msgspec.json.Decoder(Score),
    "finding": msgspec.json.Decoder(Finding),
    "branch": msgspec.json.Decoder(Branch),
}


class _OpenSegment:
    __slots__ = (
        "cause", "changes", "end_turn", "first_seq", "index", "previous", "start_turn", "started_at"
    )  # fmt: skip

    def __init__(self, payload: SegmentStarted, seq: int, at: str) -> None:
        self.started_at = at
        self.index = payload.segment
        self.cause: SegmentCause = payload.cause
        self.previous = payload.previous
        self.first_seq = seq
        self.start_turn = payload.turn
        self.end_turn: int | None = None
        self.changes = payload.changes


class _ScoreSeen:
    __slots__ = ("cites", "digest", "payload", "seq")

    def __init__(self, seq: int, digest: str, payload: Score, cites: tuple[int, ...]) -> None:
        self.seq = seq
        self.digest = digest
        self.payload = payload
        self.cites = cites


class _Answers:
    """One participant's answers so far, and how many came with their transcript."""

    __slots__ = ("answers", "awaiting", "transcribed", "transcripts")

    def __init__(self) -> None:
        self.answers = 0
        self.transcribed = 0
        self.transcripts = 0
        self.awaiting = False
        """Its last answer has no transcript yet (one follows its ``action.attempted``)."""

    def add(self, kind: str) -> None:
        if kind == "action.attempted":
            self.answers += 1
            self.awaiting = True
            return
        self.transcripts += 1
        if self.awaiting:
            self.transcribed += 1
            self.awaiting = False


class Projector:
    """Fold rows of one chain, in ``seq`` order, into a trajectory.

    ``feed`` each row, then call :meth:`trajectory`. Rows must come in ascending ``seq``; a
    missing position is recorded as a gap (collection ``gaps``), never filled in. An importer
    feeds the rows it wrote and passes its :class:`Provenance`.
    """

    def __init__(self, chain: str, provenance: Provenance | None = None) -> None:
        self.chain = chain
        self.provenance = provenance or Provenance()
        self._first: int | None = None
        self._last = -1
        self._head = ""
        self._count = 0
        self._expected = 0
        self._gaps: list[Gap] = []
        self._started_at: str | None = None
        self._last_at = ""
        self._created: SessionCreated | None = None
        self._parent: str | None = None
        self._status: tuple[int, str, SessionStatus] | None = None
        self._segments: list[Segment] = []
        self._open: _OpenSegment | None = None
        self._turns = 0
        self._last_outcome: tuple[int, Outcome] | None = None
        self._scores: list[_ScoreSeen] = []
        self._answers: dict[str, _Answers] = {}

    def feed(self, row: RecordRow) -> None:
        if row.seq < self._expected:
            raise ValueError(
                f"rows of {self.chain} must come in ascending seq: {row.seq} after "
                f"{self._expected - 1}"
            )
        if row.seq > self._expected:
            self._gaps.append(Gap(first=self._expected, last=row.seq - 1))
        if self._first is None:
            self._first = row.seq
            self._started_at = row.at
        self._expected = row.seq + 1
        self._last = row.seq
        self._head = row.digest
        self._last_at = row.at
        self._count += 1
        if row.kind in _SHAPING:
            self._shape(row, _decoders[row.kind].decode(row.payload))
        elif row.kind in _ANSWERING and row.participant is not None:
            answers = self._answers.get(row.participant)
            if answers is None:
                answers = self._answers[row.participant] = _Answers()
            answers.add(row.kind)

    def _shape(self, row: RecordRow, payload: Any) -> None:
        if isinstance(payload, SessionCreated):
            self._created = payload
        elif isinstance(payload, SessionStatus):
            self._status = (row.seq, row.at, payload)
        elif isinstance(payload, SegmentStarted):
            self._close(None, row)  # a segment whose end was never recorded
            self._open = _OpenSegment(payload, row.seq, row.at)
            self._turns = payload.turn
        elif isinstance(payload, SegmentEnded):
            self._close(payload.status, row)
        elif isinstance(payload, Outcome):
            if row.turn is not None:
                self._turns = max(self._turns, row.turn)
                if self._open is not None:
                    self._open.end_turn = max(self._open.end_turn or 0, row.turn)
            self._last_outcome = (row.seq, payload)
        elif isinstance(payload, Score):
            cites = (self._last_outcome[0],) if self._last_outcome is not None else ()
            self._scores.append(_ScoreSeen(row.seq, row.digest, payload, cites))
        elif isinstance(payload, Finding):
            if self._scores and payload.cites:  # a score's findings follow it
                latest = self._scores[-1]
                latest.cites = tuple(sorted({*latest.cites, *payload.cites}))
        elif isinstance(payload, Branch):
            self._parent = payload.parent_session

    def _close(self, status: str | None, row: RecordRow) -> None:
        opened, self._open = self._open, None
        if opened is None:
            return
        self._segments.append(
            Segment(
                index=opened.index,
                cause=opened.cause,
                previous=opened.previous,
                first_seq=opened.first_seq,
                last_seq=row.seq if status is not None else row.seq - 1,
                start_turn=opened.start_turn,
                end_turn=opened.end_turn,
                started_at=opened.started_at,
                ended_at=row.at if status is not None else None,
                status=status,
                changes=opened.changes,
            )
        )

    def trajectory(self) -> Trajectory:
        """The trajectory of everything fed so far."""
        if self._first is None:
            raise NotFoundError(f"chain {self.chain} has no records to project")
        segments = list(self._segments)
        if self._open is not None:
            opened = self._open
            segments.append(
                Segment(
                    index=opened.index,
                    cause=opened.cause,
                    previous=opened.previous,
                    first_seq=opened.first_seq,
                    last_seq=self._last,
                    start_turn=opened.start_turn,
                    end_turn=opened.end_turn,
                    started_at=opened.started_at,
                )
            )
        status = self._status[2].status if self._status is not None else "created"
        execution: ExecutionState = EXECUTION_OF.get(status, "running")
        config = self._created.config if self._created is not None else None
        return Trajectory(
            session_id=self.chain,
            provenance=self.provenance,
            journal=JournalRange(
                chain=self.chain,
                first_seq=self._first,
                last_seq=self._last,
                records=self._count,
                head_digest=self._head,
            ),
            environment=(
                f"{config.environment.name}@{config.environment.version}" if config else None
            ),
            scenario_id=config.scenario.id if config else None,
            experiment_id=config.experiment_id if config else None,
            participants=(
                {name: ref.implementation for name, ref in config.participants.items()}
                if config
                else {}
            ),
            parent=self._parent,
            segments=tuple(segments),
            collection=self._collection(execution),
            execution=ExecutionStatus(state=execution, status=status),
            termination=self._termination(status),
            outcome=self._outcome(),
            started_at=self._started_at,
            ended_at=self._status[1] if self._status and execution != "running" else None,
            transcripts=self._transcribed(),
        )

    def _transcribed(self) -> dict[str, Transcribed] | UnsetType:
        """How much of each participant's conversation its agent recorded; absent when no
        agent recorded any (the trajectory keeps the bytes it had before transcripts)."""
        found = {
            participant: Transcribed(answers=seen.answers, transcribed=seen.transcribed)
            for participant, seen in sorted(self._answers.items())
            if seen.transcripts
        }
        return found or UNSET

    def _collection(self, execution: ExecutionState) -> CollectionStatus:
        state: CollectionState
        if self._gaps:
            missing = sum(gap.last - gap.first + 1 for gap in self._gaps)
            return CollectionStatus(
                state="gaps",
                gaps=tuple(self._gaps),
                detail=f"{missing} record(s) missing from the chain",
            )
        if self._created is None and self.provenance.origin == "native":
            state, detail = "partial", "the chain does not start with session.created"
        elif execution == "running":
            state, detail = "partial", "still running: more records may follow"
        elif self._open is not None:
            state, detail = "partial", f"segment {self._open.index} has no recorded end"
        else:
            state, detail = "complete", ""
        return CollectionStatus(state=state, detail=detail)

    def _termination(self, status: str) -> Termination:
        seen = self._status
        if seen is None or EXECUTION_OF.get(status, "running") == "running":
            return Termination(cause="not_ended", status=status, turns=self._turns)
        seq, _, payload = seen
        cause: TerminationCause
        if status == "completed":
            last = self._last_outcome[1] if self._last_outcome is not None else None
            if last is not None and last.done:
                cause = "done"
            elif last is not None and last.truncated is True:
                cause = "truncated"
            else:
                cause = "turn_limit"
        else:
            cause = _TERMINATION_OF.get(status, "imported")
        return Termination(
            cause=cause,
            status=status,
            reason=payload.reason,
            error=payload.error,
            seq=seq,
            turns=self._turns,
        )

    def _outcome(self) -> VerifiedOutcome:
        if not self._scores:
            return VerifiedOutcome(state="unverified", detail="no score record")
        latest = self._scores[-1]
        first = self._first if self._first is not None else 0
        reward = RewardChain(
            score_seq=latest.seq,
            score_digest=latest.digest,
            scorer_version=latest.payload.version,
            metrics=dict(latest.payload.metrics),
            passed=latest.payload.passed,
            cites=latest.cites,
            resolved=bool(latest.payload.version)
            and bool(latest.cites)
            and all(first <= seq <= self._last for seq in latest.cites),
            per_participant=_copied(latest.payload.per_participant),
        )
        verdicts = {score.payload.passed for score in self._scores} - {None}
        if len(verdicts) > 1:
            seqs = ", ".join(
                f"seq {score.seq} ({score.payload.version}: passed={score.payload.passed})"
                for score in self._scores
            )
            return VerifiedOutcome(
                state="disputed",
                verifier_version=latest.payload.version,
                passed=None,
                reward=reward,
                detail=f"score records disagree: {seqs}",
            )
        return VerifiedOutcome(
            state="verified",
            verifier_version=latest.payload.version,
            passed=latest.payload.passed,
            reward=reward,
        )


def _copied(
    per_participant: dict[str, dict[str, float | None]] | UnsetType,
) -> dict[str, dict[str, float | None]] | UnsetType:
    """A score's per-participant metrics, copied; absent stays absent (not ``{}``)."""
    if isinstance(per_participant, UnsetType):
        return UNSET
    return {participant: dict(metrics) for participant, metrics in per_participant.items()}


def project_rows(
    chain: str, rows: Iterable[RecordRow], provenance: Provenance | None = None
) -> Trajectory:
    """The trajectory of ``rows`` (one chain, ascending ``seq``)."""
    projector = Projector(chain, provenance)
    for row in rows:
        projector.feed(row)
    return projector.trajectory()


async def project_stream(
    chain: str, rows: AsyncIterable[RecordRow], provenance: Provenance | None = None
) -> Trajectory:
    """The trajectory of a paged row stream (``Store.rows``), in constant memory."""
    projector = Projector(chain, provenance)
    async for row in rows:
        projector.feed(row)
    return projector.trajectory()
