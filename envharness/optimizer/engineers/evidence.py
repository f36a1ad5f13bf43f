"""What the optimizer reads back from a rerun's evidence: one :class:`SessionTrace` per session.

Everything comes from the journal through the store's readers — the failure packet, the
per-scenario scores, which hooks fired, how many tokens the agents spent — so a measurement
says nothing the evidence does not.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Cost,
    HookCalled,
    Outcome,
    Score,
    SegmentStarted,
    SessionCreated,
    SessionStatus,
    decode_payload,
)
from envharness.store.locate import AnyStore

__all__ = ["RawStep", "SessionTrace", "experiment_traces", "read_trace"]


@dataclass(slots=True)
class RawStep:
    """One attempt of one participant; ``state`` is the digest of the state it was made in."""

    turn: int
    participant: str
    action: Any
    state: str | None
    outcome: Any = None
    executed: bool = False
    blocked: str | None = None
    blocked_by: str | None = None


@dataclass(slots=True)
class SessionTrace:
    session_id: str
    scenario_id: str
    trial: int | None
    status: str = "created"
    reason: str | None = None
    error_type: str | None = None
    passed: bool | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    steps: list[RawStep] = field(default_factory=list)
    hooks: list[HookCalled] = field(default_factory=list)
    tokens: int = 0
    scenario_input: Any = None
    last_outcome_ended: bool = False
    """Whether the last outcome recorded ended the episode (``done`` or ``truncated``)."""

    @property
    def cut_by_turn_limit(self) -> bool:
        """The session completed because its ``turns`` ran out, not because the environment
        ended the episode: its score judges a game that was cut short."""
        return self.status == "completed" and not self.last_outcome_ended

    def value(self, metric: str | None) -> float:
        """The session's score: its pass (1.0 or 0.0), or ``metric``; a failed session is 0."""
        if metric is None:
            return 1.0 if self.passed else 0.0
        found = self.metrics.get(metric)
        return float(found) if found is not None and self.status == "completed" else 0.0


_FOLDED_KINDS = (
    "session.created",
    "segment.started",
    "outcome",
    "action.attempted",
    "action.blocked",
    "action.executed",
    "hook",
    "cost",
    "score",
    "session.status",
)
"""The kinds a trace is folded from; an experiment's traces read only these (observations,
the bulk of a session's bytes, are never decoded)."""

_PAGE = 2000
"""Records per read of an experiment's traces: every page is one short read transaction."""


class _Folding:
    """One session's trace, folded from its records in ``seq`` order."""

    __slots__ = ("open_steps", "state", "trace")

    def __init__(self, session_id: str) -> None:
        self.trace = SessionTrace(session_id=session_id, scenario_id="", trial=None)
        self.state: str | None = None
        self.open_steps: dict[str, RawStep] = {}

    def add(self, turn: int | None, participant: str | None, payload: object) -> None:
        trace = self.trace
        if isinstance(payload, SessionCreated):
            trace.scenario_id = payload.config.scenario.id
            trace.trial = payload.config.trial
            trace.scenario_input = payload.config.scenario.input
        elif isinstance(payload, SegmentStarted):
            self.state = payload.state or self.state
        elif isinstance(payload, Outcome):
            self.state = payload.state
            trace.last_outcome_ended = payload.done or payload.truncated is True
        elif isinstance(payload, ActionAttempted) and participant is not None:
            step = RawStep(
                turn=turn or 0, participant=participant, action=payload.action, state=self.state
            )
            trace.steps.append(step)
            self.open_steps[participant] = step
        elif isinstance(payload, ActionBlocked) and participant is not None:
            ended = _take(self.open_steps, participant)
            if ended is not None:
                ended.blocked = payload.reason
                ended.blocked_by = payload.by
        elif isinstance(payload, ActionExecuted) and participant is not None:
            ended = _take(self.open_steps, participant)
            if ended is not None:
                ended.outcome = payload.outcome
                ended.executed = True
        elif isinstance(payload, HookCalled):
            trace.hooks.append(payload)
        elif isinstance(payload, Cost):
            trace.tokens += (payload.input_tokens or 0) + (payload.output_tokens or 0)
        elif isinstance(payload, Score):
            trace.passed = payload.passed
            trace.metrics = dict(payload.metrics)
        elif isinstance(payload, SessionStatus):
            trace.status = payload.status
            trace.reason = payload.reason
            trace.error_type = payload.error.type if payload.error is not None else None


async def read_trace(store: AnyStore, session_id: str) -> SessionTrace:
    """One session's evidence, folded into steps, its score, hooks and token costs."""
    folding = _Folding(session_id)
    async for record in store.records(session_id):
        folding.add(record.turn, record.participant, record.payload)
    return folding.trace


async def experiment_traces(store: AnyStore, experiment_id: str) -> list[SessionTrace]:
    """Every session of an experiment, ordered by scenario and trial as recorded.

    One pass over the experiment's records in commit order, a page at a time, rather than one
    read per session: the optimizer reads every rerun back, and on the driver that runs the
    reruns' sessions elsewhere those reads were a sixth of its CPU. A session's records commit
    in ``seq`` order, so each session folds exactly as :func:`read_trace` folds it. Sessions
    that appear after the experiment's sessions are listed are left out."""
    members = await store.experiment_sessions(experiment_id)
    folding = {member.session.id: _Folding(member.session.id) for member in members}
    rows = store.experiment_rows_so_far(experiment_id, kinds=_FOLDED_KINDS, page=_PAGE)
    async with aclosing(rows):
        async for row in rows:
            session = folding.get(row.session_id)
            if session is not None:
                session.add(row.turn, row.participant, decode_payload(row.payload))
    traces = [session.trace for session in folding.values()]
    traces.sort(key=lambda t: (t.scenario_id, t.trial or 0))
    return traces


def _take(steps: dict[str, RawStep], participant: str) -> RawStep | None:
    """The participant's attempt still waiting for its ending (blocked or executed), if any."""
    return steps.pop(participant) if participant in steps else None
