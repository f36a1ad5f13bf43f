"""What a principal may see, applied where records are read — never in a template.

Admin and viewer tokens see every session and every record. A participant token sees:

- the sessions whose frozen roster names its participant (and, if the token is bound to some
  sessions, only those) — a query over ``session.created``;
- in them, only records whose ``participant`` column is its own name: its observations,
  attempted actions, executed or blocked outcomes, hints and costs. The filter is part of the
  SQL of every read (``RecordFilter.participant``), for pages, JSON, export and live streams.

Session-level records (``participant`` null: the configuration, environment outcomes with
their shared signals and state digests, scores, findings, status reasons) are withheld from a
participant: they can describe the other participants, and a record cannot be redacted
without breaking its digest. What a participant learns about the session as a whole comes
from the session summary, reduced to status, turns and times (:meth:`Access.summary`).

A session a participant may not see answers exactly like one that does not exist (404).

Experiments follow from sessions: a participant sees the experiments in which it has a session,
and in them only its own sessions (the store applies the set of visible sessions in the SQL of
each read); their configuration and the reasons and totals that speak of everyone are withheld.
An experiment a participant may not see answers like one that does not exist.

Lineage and comparisons follow the same rules. A participant sees a session's parent and
branches only where it may see them, and not the checkpoint and ``branch`` records (they are
session level). A comparison is ``compare_sessions`` reading through :class:`_NarrowedStore`,
so for a participant its reads carry the participant filter in their SQL: it compares only
that participant's observations and actions, and finds no scores.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TypeVar, cast

import msgspec

from envharness.errors import NotFoundError
from envharness.records import (
    TERMINAL_STATUSES,
    Branch,
    Checkpoint,
    Record,
    RecordRow,
    decode_record,
)
from envharness.runtime.compare import compare_sessions
from envharness.service.auth import Principal, confirm_in, refused
from envharness.service.problems import HTTPProblem, not_found
from envharness.service.state import Service
from envharness.service.wire.sessions import (
    BranchLink,
    ComparisonOut,
    ExperimentSessionOut,
    ExperimentSummary,
    LineageOut,
    ScoreDifference,
    SessionSummary,
)
from envharness.store import (
    BranchRef,
    ExperimentInfo,
    ExperimentMember,
    RecordFilter,
    SessionInfo,
    Store,
)
from envharness.store.named_reads import NamedReads, ReadAhead, read_named

__all__ = ["Access"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Access:
    """One principal's view of one service's store."""

    service: Service
    principal: Principal

    @property
    def sees_everything(self) -> bool:
        return self.principal.role != "participant"

    async def visible_sessions(self) -> frozenset[str] | None:
        """The ids a participant may see; ``None`` for a token that sees every session."""
        principal = self.principal
        if principal.participant is None or self.sees_everything:
            return None
        return await self.service.tokens.participant_sessions(
            principal.participant, among=principal.sessions
        )

    async def sessions(
        self,
        *,
        status: str | None = None,
        experiment_id: str | None = None,
        scenario_id: str | None = None,
    ) -> list[SessionInfo]:
        found = await self.service.store.sessions(status=status, experiment_id=experiment_id)
        visible = await self.visible_sessions()
        return [
            info
            for info in found
            if (visible is None or info.id in visible)
            and (scenario_id is None or info.scenario_id == scenario_id)
        ]

    async def session(self, session_id: str) -> SessionInfo:
        """The session with exactly this id, if this principal may see it; 404 otherwise."""
        info, _ = await self.page(session_id, None)
        return info

    async def page(
        self, session_id: str, requested: RecordFilter | None
    ) -> tuple[SessionInfo, list[RecordRow]]:
        """The session (as :meth:`session`) and its rows that ``requested``, narrowed by
        :meth:`records`, picks (none when ``None``).

        Every query — the token's pending check, the session, the participant's roster, the
        page — is made in one worker-thread call on one reader: the hop costs more than they
        do; on PostgreSQL they are read ahead in one statement, one round trip. The answers
        keep their order: a revoked token's 401, then the session's 404, then a participant's
        404 for another participant's records.
        """
        refusal: HTTPProblem | None = None
        selection: RecordFilter | None = None
        if requested is not None:
            try:
                selection = self.records(requested)
            except HTTPProblem as problem:
                refusal = problem
        principal = self.principal

        pending = principal.pending
        ahead = ReadAhead(
            session_id,
            token=None if pending is None or pending.confirmed else pending.digest,
            participant=None if self.sees_everything else principal.participant,
            page=selection,
        )

        def read(reads: NamedReads) -> tuple[bool, SessionInfo | None, list[RecordRow]]:
            reads.read_ahead(ahead)
            if not confirm_in(reads, principal):
                return False, None, []
            info = self._visible(reads, session_id)
            if info is None or selection is None:
                return True, info, []
            return True, info, reads.page(session_id, selection)

        active, info, rows = await self._read(read)
        if not active:
            raise refused(self.service, principal)
        if info is None:
            raise not_found(f"session {session_id!r}")
        if refusal is not None:
            raise refusal
        return info, rows

    def _visible(self, reads: NamedReads, session_id: str) -> SessionInfo | None:
        """The session with exactly this id if this principal may see it (blocking). The API
        names sessions exactly: a prefix names none."""
        info = reads.session(session_id)
        if info is None or self.sees_everything:
            return info
        bound = self.principal.sessions
        if bound is not None and session_id not in bound:
            return None
        participant = self.principal.participant or ""
        mine = reads.participant_sessions(participant, [session_id])
        return info if session_id in mine else None

    async def _read(self, work: Callable[[NamedReads], _T]) -> _T:
        return await read_named(self.service.store.backend, work)

    def records(self, requested: RecordFilter) -> RecordFilter:
        """``requested`` narrowed to what this principal may read.

        A participant asking for another participant's records gets a 404, not an empty
        answer: the same as asking about a participant that does not exist.
        """
        if self.sees_everything:
            return requested
        own = self.principal.participant
        if requested.participant is not None and requested.participant != own:
            raise not_found(f"participant {requested.participant!r}")
        return msgspec.structs.replace(requested, participant=own)

    def summary(self, info: SessionInfo) -> SessionSummary:
        full = self.sees_everything
        return SessionSummary(
            id=info.id,
            experiment_id=info.experiment_id,
            scenario_id=info.scenario_id,
            status=info.status,  # type: ignore[arg-type]
            terminal=info.status in TERMINAL_STATUSES,
            reason=info.reason if full else None,
            created_at=info.created_at,
            updated_at=info.updated_at,
            turns_completed=info.turns_completed,
            records=info.records if full else None,
        )

    # -- lineage and comparison ----------------------------------------------------------------

    async def lineage(self, session_id: str) -> LineageOut:
        """The session's parent and branches that this principal may see (404 for a session
        it may not see)."""
        info = await self.session(session_id)
        found = await self.service.store.lineage(info.id)
        visible = await self.visible_sessions()
        parent = None
        if found.parent is not None and (visible is None or found.parent.session_id in visible):
            parent = await self._link(found.parent, parent=found.parent.session_id, child=info.id)
        children = [
            await self._link(ref, parent=info.id, child=ref.session_id)
            for ref in found.children
            if visible is None or ref.session_id in visible
        ]
        return LineageOut(session_id=info.id, parent=parent, children=children)

    async def _link(self, ref: BranchRef, *, parent: str, child: str) -> BranchLink:
        """``ref``'s end of a branch from ``parent`` to ``child``, with the checkpoint and the
        declared intervention where this principal may read them."""
        other = await self.service.store.session(ref.session_id)
        checkpoint: Checkpoint | None = None
        branch: Branch | None = None
        if self.sees_everything:
            at = await self._first(parent, RecordFilter(after=ref.checkpoint_seq - 1, limit=1))
            if at is not None and at.seq == ref.checkpoint_seq:
                checkpoint = at.payload if isinstance(at.payload, Checkpoint) else None
            made = await self._first(child, RecordFilter(kinds=("branch",), limit=1))
            branch = made.payload if made is not None and isinstance(made.payload, Branch) else None
        return BranchLink(
            session=self.summary(other),
            checkpoint_seq=ref.checkpoint_seq,
            checkpoint_turn=checkpoint.turn if checkpoint is not None else None,
            checkpoint_label=checkpoint.label if checkpoint is not None else None,
            intervention=branch.intervention if branch is not None else None,
            reason=branch.reason if branch is not None else None,
        )

    async def _first(self, session_id: str, selection: RecordFilter) -> Record | None:
        # Rows, closed here: leaving ``store.records`` early would strand its inner reader.
        async with aclosing(self.service.store.rows(session_id, selection)) as rows:
            async for row in rows:
                return decode_record(row)
        return None

    async def compare(self, left: str, right: str) -> ComparisonOut:
        """``compare_sessions`` over two sessions this principal may see, reading only the
        records it may read (404 if it may not see either)."""
        ours, theirs = await self.session(left), await self.session(right)
        found = await compare_sessions(cast(Store, _NarrowedStore(self)), ours.id, theirs.id)
        return ComparisonOut(
            left=self.summary(ours),
            right=self.summary(theirs),
            turns_compared=list(found.turns_compared),
            differences=list(found.differences),
            scores=[
                ScoreDifference(metric=metric, left=pair[0], right=pair[1])
                for metric, pair in found.scores.items()
            ],
            identical=found.identical,
            alignment=found.alignment,
        )

    # -- experiments ---------------------------------------------------------------------------

    async def experiments(self) -> list[ExperimentInfo]:
        """The experiments this principal may see, oldest first, their sessions counted as it
        may see them."""
        return await self.service.store.experiments(among=await self.visible_sessions())

    async def experiment(self, experiment_id: str) -> ExperimentInfo:
        """The experiment with exactly this id, if this principal may see it; 404 otherwise."""
        try:
            info = await self.service.store.experiment(
                experiment_id, among=await self.visible_sessions()
            )
        except NotFoundError:
            raise not_found(f"experiment {experiment_id!r}") from None
        if info.id != experiment_id:  # a prefix matched: the API names experiments exactly
            raise not_found(f"experiment {experiment_id!r}")
        return info

    async def experiment_sessions(self, experiment_id: str) -> list[ExperimentMember]:
        return await self.service.store.experiment_sessions(
            experiment_id, among=await self.visible_sessions()
        )

    def experiment_summary(self, info: ExperimentInfo) -> ExperimentSummary:
        full = self.sees_everything
        return ExperimentSummary(
            id=info.id,
            name=info.name,
            status=info.status,  # type: ignore[arg-type]
            terminal=info.status in TERMINAL_STATUSES,
            reason=info.reason if full else None,
            total=info.total if full else None,
            sessions=info.sessions,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )

    def experiment_session(self, member: ExperimentMember) -> ExperimentSessionOut:
        full = self.sees_everything
        info = member.session
        return ExperimentSessionOut(
            id=info.id,
            scenario_id=info.scenario_id,
            trial=member.trial,
            seed=member.seed if full else None,
            status=info.status,  # type: ignore[arg-type]
            terminal=info.status in TERMINAL_STATUSES,
            reason=info.reason if full else None,
            turns_completed=info.turns_completed,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )


@dataclass(frozen=True, slots=True)
class _NarrowedStore:
    """The two reads ``compare_sessions`` makes, as one principal may make them: sessions by
    exact id that it may see, and records narrowed by :meth:`Access.records` (in the SQL)."""

    access: Access

    async def session(self, session_id: str) -> SessionInfo:
        return await self.access.session(session_id)

    def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncGenerator[Record, None]:
        narrowed = self.access.records(selection or RecordFilter())
        return self.access.service.store.records(session_id, narrowed)
