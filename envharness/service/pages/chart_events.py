"""Event markers for the Progression chart: where a session was checkpointed, where actions
were blocked, what findings cite, and where an episode was cut short — each linking to its turn.

:class:`ChartEvents` is fed the rows :mod:`.progression` already reads for the range (outcomes,
blocked actions, checkpoints; it says which outcomes were truncated), so the markers cost no
second scan; findings, which are recorded
at the end and cite records by seq, are looked up on their own (at most
:data:`MAX_FINDINGS`, one short read each). Blocked actions fold into one marker per turn, and
at most :data:`MAX_EVENTS` markers are kept, so a long session's strip stays small.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal

from envharness.records import Checkpoint, Finding, RecordRow, decode_payload
from envharness.service.pages.html import Html, html, join
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore

__all__ = [
    "EVENT_KINDS",
    "LISTED_EVENTS",
    "MAX_EVENTS",
    "MAX_FINDINGS",
    "ChartEvent",
    "ChartEvents",
    "events_list",
    "read_findings",
]

EventKind = Literal["checkpoint", "blocked", "finding", "truncated"]
EVENT_KINDS: tuple[EventKind, ...] = ("checkpoint", "blocked", "finding", "truncated")
"""The kinds of marker, in the order of their lanes under the chart."""
GLYPHS: dict[EventKind, str] = {
    "checkpoint": "⚑", "blocked": "✕", "finding": "!", "truncated": "✂",
}  # fmt: skip
MAX_EVENTS = 150
"""Markers kept for one range; more are counted, not drawn (a narrower range shows them)."""
LISTED_EVENTS = 40
"""Markers listed as text under the chart (the strip draws every kept one)."""
MAX_FINDINGS = 20
"""Findings placed on the chart: each costs a read of the record it cites first."""


@dataclass(frozen=True, slots=True)
class ChartEvent:
    turn: int
    kind: EventKind
    text: str
    anchor: str
    """Where in the turn's page it is: ``turn-N`` or a record's ``rSEQ``."""

    @property
    def glyph(self) -> str:
        return GLYPHS[self.kind]

    def href(self, session_id: str) -> str:
        return f"/sessions/{session_id}/turns?turn={self.turn}#{self.anchor}"


@dataclass(slots=True)
class ChartEvents:
    """The markers of turns ``first`` .. ``last``, collected from rows as they stream past."""

    first: int
    last: int
    events: list[ChartEvent] = field(default_factory=list)
    dropped: int = 0
    _blocked: dict[int, int] = field(default_factory=dict)
    """Turn → index in ``events`` of its blocked marker, to count into."""
    _blocked_counts: dict[int, int] = field(default_factory=dict)

    def add_row(self, row: RecordRow) -> None:
        """Note ``row`` if it marks something: an ``action.blocked`` or a ``checkpoint``
        inside the range."""
        if row.kind == "action.blocked" and row.turn is not None:
            self._add_blocked(row)
        elif row.kind == "checkpoint":
            payload = decode_payload(row.payload)
            if isinstance(payload, Checkpoint):
                label = f" “{payload.label}”" if payload.label else ""
                self.add(ChartEvent(payload.turn, "checkpoint",
                                    f"checkpoint{label} after turn {payload.turn}",
                                    f"r{row.seq}"))  # fmt: skip

    def truncated(self, turn: int) -> None:
        """The outcome of ``turn`` says the episode was cut short (progression decodes it)."""
        self.add(ChartEvent(turn, "truncated", f"cut short at turn {turn} (truncated)",
                            f"turn-{turn}"))  # fmt: skip

    def _add_blocked(self, row: RecordRow) -> None:
        turn = row.turn
        assert turn is not None
        if turn in self._blocked:
            count = self._blocked_counts[turn] = self._blocked_counts[turn] + 1
            index = self._blocked[turn]
            self.events[index] = ChartEvent(
                turn, "blocked", f"{count} actions blocked in turn {turn}",
                self.events[index].anchor,
            )  # fmt: skip
            return
        who = f" ({row.participant})" if row.participant else ""
        if self.add(ChartEvent(turn, "blocked", f"action blocked in turn {turn}{who}",
                               f"r{row.seq}")):  # fmt: skip
            self._blocked[turn] = len(self.events) - 1
            self._blocked_counts[turn] = 1

    def add(self, event: ChartEvent) -> bool:
        """Keep ``event`` if it is in the range and there is room; ``False`` if not kept."""
        if not self.first <= event.turn <= self.last:
            return False
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return False
        self.events.append(event)
        return True

    def ordered(self) -> list[ChartEvent]:
        return sorted(self.events, key=lambda e: (e.turn, EVENT_KINDS.index(e.kind)))


async def read_findings(store: AnyStore, session_id: str, found: ChartEvents) -> None:
    """Place the session's findings at the turn of the record each cites first."""
    selection = RecordFilter(kinds=("finding",), limit=MAX_FINDINGS)
    findings: list[Finding] = []
    async with aclosing(store.rows(session_id, selection)) as rows:
        async for row in rows:
            payload = decode_payload(row.payload)
            if isinstance(payload, Finding) and payload.cites:
                findings.append(payload)
    for finding in findings:
        cited = min(finding.cites)
        turn = await _turn_of(store, session_id, cited)
        if turn is not None:
            text = f"finding ({finding.severity}): {finding.title}, at turn {turn}"
            found.add(ChartEvent(turn, "finding", text, f"r{cited}"))


async def _turn_of(store: AnyStore, session_id: str, seq: int) -> int | None:
    async with aclosing(store.rows(session_id, RecordFilter(after=seq - 1, limit=1))) as rows:
        async for row in rows:
            return row.turn if row.seq == seq else None
    return None


def events_list(session_id: str, found: ChartEvents) -> Html:
    """The markers as text under the chart, each a link to its place on the Turns page."""
    events = found.ordered()
    if not events:
        return Html("")
    items = join(
        html(
            '<li class="event-{kind}"><a href="{href}"><span class="event-icon" '
            'aria-hidden="true">{glyph}</span>{text}</a></li>',
            kind=event.kind,
            href=event.href(session_id),
            glyph=event.glyph,
            text=event.text,
        )
        for event in events[:LISTED_EVENTS]
    )
    more = len(events) - LISTED_EVENTS + found.dropped
    tail = (
        html('<li class="muted">… {n} more in this range: narrow it to list them</li>', n=more)
        if more > 0
        else ""
    )
    return html(
        '<ul class="chart-events" aria-label="Events in this range">{items}{tail}</ul>',
        items=items,
        tail=tail,
    )
