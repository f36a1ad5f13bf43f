"""Comparing two sessions turn by turn: what each participant saw, did and got, and scores.

Sessions are aligned by turn number and participant, which is what makes a branch comparable
to its parent: both number their turns from the parent's start.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.records import ActionExecuted, Observation, Outcome, Record, Score
from envharness.store import RecordFilter, Store

__all__ = ["Comparison", "TurnDifference", "compare_sessions"]

_COMPARED = ("observation", "action.executed", "outcome", "score")


class TurnDifference(msgspec.Struct, frozen=True, kw_only=True):
    """One aligned value that differs (``None`` on a side that has no such record)."""

    turn: int
    participant: str | None
    kind: str
    left: Any
    right: Any


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    left: str
    right: str
    turns_compared: tuple[int, ...]
    differences: tuple[TurnDifference, ...]
    scores: dict[str, tuple[float | None, float | None]]
    """Each metric in either score report: (left, right)."""

    unmatched_turns: tuple[int, ...] = ()
    """Turns only one of the two sessions played: they make the sessions differ too."""

    @property
    def identical(self) -> bool:
        return (
            not self.differences
            and not self.unmatched_turns
            and all(a == b for a, b in self.scores.values())
        )


async def compare_sessions(store: Store, left: str, right: str) -> Comparison:
    left_info, right_info = await store.session(left), await store.session(right)
    ours, theirs = await _aligned(store, left_info.id), await _aligned(store, right_info.id)
    left_turns, right_turns = {key[0] for key in ours} - {0}, {key[0] for key in theirs} - {0}
    turns = sorted(left_turns & right_turns)
    differences = [
        TurnDifference(
            turn=key[0], participant=key[1], kind=key[2], left=ours.get(key), right=theirs.get(key)
        )
        for key in sorted(set(ours) | set(theirs), key=lambda k: (k[0], k[1] or "", k[2]))
        if key[0] in turns and ours.get(key) != theirs.get(key)
    ]
    left_score = ours.get((0, None, "score")) or {}
    right_score = theirs.get((0, None, "score")) or {}
    scores = {
        metric: (left_score.get(metric), right_score.get(metric))
        for metric in sorted(set(left_score) | set(right_score))
    }
    return Comparison(
        left=left_info.id,
        right=right_info.id,
        turns_compared=tuple(turns),
        differences=tuple(differences),
        scores=scores,
        unmatched_turns=tuple(sorted(left_turns ^ right_turns)),
    )


async def _aligned(store: Store, session_id: str) -> dict[tuple[int, str | None, str], Any]:
    """(turn, participant, kind) → compared value; the score under turn 0."""
    aligned: dict[tuple[int, str | None, str], Any] = {}
    async for record in store.records(session_id, RecordFilter(kinds=_COMPARED)):
        value = _value(record)
        turn = record.turn if record.turn is not None else 0
        aligned[(turn, record.participant, record.kind)] = value
    return aligned


def _value(record: Record) -> Any:
    payload = record.payload
    if isinstance(payload, Observation):
        return payload.observation
    if isinstance(payload, ActionExecuted):
        return {"action": payload.action, "outcome": payload.outcome}
    if isinstance(payload, Outcome):
        return {"done": payload.done, "signals": payload.signals}
    if isinstance(payload, Score):
        return dict(payload.metrics)
    return msgspec.to_builtins(payload)
