"""What the runtime remembers for a session's hooks between calls, and how evidence restores it.

Between hook calls the runtime keeps the notebook, each participant's hints still to be shown
and its recent steps. None of it is a second source of truth: each piece is what the evidence
says, so a resume rebuilds it by reading the session's records (:class:`MemoryReader`), and a
branch starts from the notebook its checkpoint recorded.

The rules the reader applies are the runtime's own: a hint effect (``hook`` record with
``effect="hint"``) waits until the participant is next asked, and every ask is followed by an
``action.attempted``; an executed or blocked action is a step of the recent history; the
notebook is the one the last ``hook`` record with a ``notebook`` digest names.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from envharness.hooks import StepSummary
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    HookCalled,
    Record,
    SegmentStarted,
)

__all__ = ["EMPTY_NOTEBOOK", "HISTORY_STEPS", "MEMORY_KINDS", "HookMemory", "MemoryReader"]

HISTORY_STEPS = 8
"""Steps of a participant's recent history a hook sees (``HookContext.history``)."""

EMPTY_NOTEBOOK = b"{}"

MEMORY_KINDS = ("segment.started", "action.attempted", "action.executed", "action.blocked", "hook")
"""The record kinds the reader needs."""


@dataclass(slots=True)
class HookMemory:
    """The runtime's memory for hooks: the notebook (canonical JSON bytes, or its digest when
    read back from evidence before the blob is fetched), each participant's pending hints
    (text, source) and recent steps, and its last outcome."""

    notebook: bytes = EMPTY_NOTEBOOK
    notebook_digest: str | None = None
    pending: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    history: dict[str, collections.deque[StepSummary]] = field(default_factory=dict)
    last_outcome: dict[str, Any] = field(default_factory=dict)

    def steps(self, participant: str) -> collections.deque[StepSummary]:
        found = self.history.get(participant)
        if found is None:
            found = self.history[participant] = collections.deque(maxlen=HISTORY_STEPS)
        return found


@dataclass(slots=True)
class MemoryReader:
    """Fed a session's records in order; :meth:`memory` says what the hooks' memory was after
    turn ``turn``. Records of turns a later segment replayed are forgotten, as the resume
    point forgets them."""

    _events: list[tuple[int, str | None, Any]] = field(default_factory=list)

    def feed(self, record: Record) -> None:
        payload = record.payload
        if isinstance(payload, SegmentStarted):
            self._events = [e for e in self._events if e[0] <= payload.turn]
        elif isinstance(payload, ActionAttempted | ActionExecuted | ActionBlocked | HookCalled):
            self._events.append((record.turn or 0, record.participant, payload))

    def memory(self, turn: int) -> HookMemory:
        """The memory after ``turn``; its notebook is named by ``notebook_digest`` (still to be
        fetched) when a hook changed it, else it is the one the session started with."""
        memory = HookMemory()
        for event_turn, participant, payload in self._events:
            if event_turn > turn:
                continue
            if isinstance(payload, HookCalled):
                if payload.notebook is not None:
                    memory.notebook_digest = payload.notebook
                if participant is not None and payload.effect == "hint":
                    text = payload.detail.get("text") if isinstance(payload.detail, dict) else None
                    if isinstance(text, str):
                        memory.pending.setdefault(participant, []).append((text, payload.hook))
            elif participant is None:
                continue
            elif isinstance(payload, ActionAttempted):
                memory.pending.pop(participant, None)  # shown at this ask
            elif isinstance(payload, ActionExecuted):
                memory.steps(participant).append(
                    StepSummary(step=event_turn, action=payload.action, outcome=payload.outcome)
                )
                memory.last_outcome[participant] = payload.outcome
            elif isinstance(payload, ActionBlocked):
                memory.steps(participant).append(
                    StepSummary(step=event_turn, action=payload.action, blocked=payload.reason)
                )
        return memory
