"""Comparing two sessions turn by turn: what each participant saw, did and got, and scores.

Sessions are aligned by turn number and participant, which is what makes a branch comparable
to its parent: both number their turns from the parent's start. Two sessions of different
environments line up by the same names, which may mean different things in each:
:class:`Alignment` says what lined up and what only one side has, and :func:`alignment_note`
says it in a sentence, as the Compare page and ``envharness compare`` print it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.records import ActionExecuted, Observation, Outcome, Record, Score
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore

__all__ = ["Alignment", "Comparison", "TurnDifference", "alignment_note", "compare_sessions"]

_COMPARED = ("observation", "action.executed", "outcome", "score")


class TurnDifference(msgspec.Struct, frozen=True, kw_only=True):
    """One aligned value that differs (``None`` on a side that has no such record)."""

    turn: int
    participant: str | None
    kind: str
    left: Any
    right: Any


class Alignment(msgspec.Struct, frozen=True, kw_only=True):
    """What the two sessions have in common, and what only one of them has: a participant or
    metric of one side alone has nothing to be compared with."""

    participants: tuple[str, ...] = ()
    """Participants that acted or observed in both sessions (their records line up)."""
    left_only_participants: tuple[str, ...] = ()
    right_only_participants: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    """Metrics both score reports name."""
    left_only_metrics: tuple[str, ...] = ()
    right_only_metrics: tuple[str, ...] = ()
    left_only_turns: tuple[int, ...] = ()
    """Turns only the left session reached (they have nothing to be compared with)."""
    right_only_turns: tuple[int, ...] = ()


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    left: str
    right: str
    turns_compared: tuple[int, ...]
    differences: tuple[TurnDifference, ...]
    scores: dict[str, tuple[float | None, float | None]]
    """Each metric in either score report: (left, right)."""

    unmatched_turns: tuple[int, ...] = ()
    """Turns only one of the two sessions played: they make the sessions differ too."""

    alignment: Alignment = msgspec.field(default_factory=Alignment)

    @property
    def identical(self) -> bool:
        return (
            not self.differences
            and not self.unmatched_turns
            and all(a == b for a, b in self.scores.values())
        )


async def compare_sessions(store: AnyStore, left: str, right: str) -> Comparison:
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
        alignment=_alignment(ours, theirs, set(left_score), set(right_score)),
    )


def _alignment(
    ours: dict[tuple[int, str | None, str], Any],
    theirs: dict[tuple[int, str | None, str], Any],
    left_metrics: set[str],
    right_metrics: set[str],
) -> Alignment:
    left = {key[1] for key in ours if key[1] is not None}
    right = {key[1] for key in theirs if key[1] is not None}
    left_turns, right_turns = {key[0] for key in ours} - {0}, {key[0] for key in theirs} - {0}
    return Alignment(
        participants=tuple(sorted(left & right)),
        left_only_participants=tuple(sorted(left - right)),
        right_only_participants=tuple(sorted(right - left)),
        metrics=tuple(sorted(left_metrics & right_metrics)),
        left_only_metrics=tuple(sorted(left_metrics - right_metrics)),
        right_only_metrics=tuple(sorted(right_metrics - left_metrics)),
        left_only_turns=tuple(sorted(left_turns - right_turns)),
        right_only_turns=tuple(sorted(right_turns - left_turns)),
    )


def alignment_note(
    comparison: Comparison, left_environment: str, right_environment: str
) -> str | None:
    """What lines up between two sessions that ran different environments, and what cannot;
    ``None`` when they ran the same one (then everything lines up by its own meaning)."""
    if left_environment == right_environment:
        return None
    found = comparison.alignment
    turns = _spans(comparison.turns_compared) or "none"
    aligned = [
        f"turns {turns} (both reached them)",
        f"participants {_listed(found.participants) or 'none'}",
        f"metrics {_listed(found.metrics) or 'none'}",
    ]
    alone = [
        f"{what} only {side} has: {listed}"
        for what, side, listed in (
            ("participants", "A", _listed(found.left_only_participants)),
            ("participants", "B", _listed(found.right_only_participants)),
            ("metrics", "A", _listed(found.left_only_metrics)),
            ("metrics", "B", _listed(found.right_only_metrics)),
            ("turns", "A", _spans(found.left_only_turns)),
            ("turns", "B", _spans(found.right_only_turns)),
        )
        if listed
    ]
    cannot = f"; not compared: {'; '.join(alone)}" if alone else ""
    return (
        f"A ran {left_environment} and B ran {right_environment}: turns, participants and score "
        f"metrics align by name only, and the same value may mean different things in each. "
        f"Lined up: {', '.join(aligned)}{cannot}. Compare sessions of one environment (a branch "
        "with its parent, two trials of a scenario) to see what a change did."
    )


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(names)


def _spans(turns: tuple[int, ...]) -> str:
    """Runs of consecutive turns as ranges (``1-3, 7``, with an en dash)."""
    runs: list[list[int]] = []
    for turn in turns:
        if runs and turn == runs[-1][1] + 1:
            runs[-1][1] = turn
        else:
            runs.append([turn, turn])
    return ", ".join(str(a) if a == b else f"{a}\u2013{b}" for a, b in runs)


async def _aligned(store: AnyStore, session_id: str) -> dict[tuple[int, str | None, str], Any]:
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
