"""A session's Progression tab: the signals its ``outcome`` records carry, plotted over turns.

The environment's resolution of every turn may carry score signals (``Outcome.signals``:
name → number); this page plots them over a selectable turn range. It reads only the
``outcome`` records of that range, one page at a time from the first one of its first turn,
and folds them into at most :data:`POINTS` buckets per signal as they stream past (mean,
lowest, highest), so a 10,000-turn session draws as fast, and as small, as a short one. The
chart is inline SVG drawn here (:mod:`.plot`); a legend names each signal with its last value
and range, and toggles which are drawn.

Outcomes are session-level records — their shared signals are about every participant — so
the tab is for admin and viewer tokens, like the Configuration tab (a participant gets 403).
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlencode

import msgspec
from starlette.responses import Response

from envharness.service.pages.chart_events import (
    EVENT_KINDS,
    ChartEvents,
    events_list,
    read_findings,
)
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.layout import page
from envharness.service.pages.plot import PALETTE, Mark, Point, Series, line_chart
from envharness.service.pages.session_view import (
    SessionView,
    live_attributes,
    load_session,
    session_head,
)
from envharness.service.params import MAX_INTEGER
from envharness.service.routing import READERS, Call, Endpoint, viewer_page
from envharness.store import RecordFilter

__all__ = [
    "MAX_SERIES",
    "MAX_SIGNALS",
    "POINTS",
    "PROGRESSION_PAGES",
    "ProgressionQuery",
    "Signals",
    "read_signals",
]

POINTS = 400
"""Buckets per signal, at most: a longer range is summarised, never drawn point by point."""
MAX_SERIES = 6
"""Signals drawn at once by default (the first recorded); the legend adds or removes others."""
MAX_SIGNALS = 40
"""Signal names tracked per page; more are counted but not listed."""


class ProgressionQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    start: (
        Annotated[
            int,
            msgspec.Meta(
                ge=0, le=MAX_INTEGER, description="First turn shown (default: the first)."
            ),
        ]
        | None
    ) = msgspec.field(default=None, name="from")
    end: (
        Annotated[
            int,
            msgspec.Meta(ge=0, le=MAX_INTEGER, description="Last turn shown (default: the last)."),
        ]
        | None
    ) = msgspec.field(default=None, name="to")
    signal: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=200)]],
        msgspec.Meta(max_length=PALETTE, description="Signals to draw; repeat for several."),
    ] = []


class _Outcome(msgspec.Struct):
    """What this page reads of an ``outcome`` payload."""

    done: bool = False
    signals: dict[str, float | None] = {}
    truncated: bool | None = None


_outcome = msgspec.json.Decoder(_Outcome)


@dataclass(slots=True)
class _Stat:
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)


@dataclass(slots=True)
class Signals:
    """The signals of turns ``first`` .. ``last``, folded into at most :data:`POINTS` buckets.

    ``drawn`` names the signals that get buckets (the selection, or the first
    :data:`MAX_SERIES` seen); every tracked signal gets its overall statistics and last value.
    """

    first: int
    last: int
    selected: tuple[str, ...] = ()
    names: list[str] = field(default_factory=list)
    overall: dict[str, _Stat] = field(default_factory=dict)
    latest: dict[str, float | None] = field(default_factory=dict)
    buckets: dict[str, list[_Stat | None]] = field(default_factory=dict)
    untracked: int = 0
    outcomes: int = 0
    done: int | None = None

    @property
    def span(self) -> int:
        return self.last - self.first + 1

    @property
    def count(self) -> int:
        return max(1, min(self.span, POINTS))

    @property
    def step(self) -> int:
        """Turns per bucket (the widest)."""
        return -(-self.span // self.count)

    @property
    def drawn(self) -> list[str]:
        return list(self.buckets)

    def add(self, turn: int, outcome: _Outcome) -> None:
        self.outcomes += 1
        if outcome.done and self.done is None:
            self.done = turn
        index = (turn - self.first) * self.count // self.span
        for name, value in outcome.signals.items():
            if name not in self.overall:
                if len(self.names) >= MAX_SIGNALS:
                    self.untracked += 1
                    continue
                self.names.append(name)
                self.overall[name] = _Stat()
                wanted = name in self.selected if self.selected else len(self.buckets) < MAX_SERIES
                if wanted:
                    self.buckets[name] = [None] * self.count
            self.latest[name] = value
            if value is None:
                continue
            self.overall[name].add(value)
            slots = self.buckets.get(name)
            if slots is not None:
                slot = slots[index]
                if slot is None:
                    slot = slots[index] = _Stat()
                slot.add(value)

    def series(self) -> list[Series]:
        order = list(self.selected) if self.selected else self.names
        drawn = [name for name in order if name in self.buckets]
        return [
            Series(
                name=name,
                colour=colour,
                points=tuple(
                    Point(
                        first=self._bucket_first(index),
                        last=self._bucket_first(index + 1) - 1,
                        mean=stat.total / stat.count,
                        low=stat.low,
                        high=stat.high,
                    )
                    for index, stat in enumerate(self.buckets[name])
                    if stat is not None and stat.count
                ),
                step=self.step,
            )
            for colour, name in enumerate(drawn)
        ]

    def _bucket_first(self, index: int) -> int:
        return self.first + -(-index * self.span // self.count)


MARKED_KINDS = ("outcome", "action.blocked", "checkpoint")
"""What the range's scan reads: the outcomes, and the records that become event markers."""


async def read_signals(
    call: Call[ProgressionQuery], session: SessionView, first: int, last: int
) -> tuple[Signals, ChartEvents]:
    """Fold the ``outcome`` records of turns ``first`` .. ``last`` into :class:`Signals`, and
    the blocked actions, checkpoints and truncations among them into :class:`ChartEvents`:
    one scan from the first record of turn ``first`` (a page at a time), then the findings."""
    store = call.service.store
    session_id = session.info.id
    found = Signals(first, last, selected=tuple(dict.fromkeys(call.query.signal)))
    events = ChartEvents(first, last)
    start = -1
    seek = RecordFilter(turn=first, limit=1)
    async with aclosing(store.rows(session_id, seek)) as rows:
        async for row in rows:
            start = row.seq - 1
    selection = RecordFilter(kinds=MARKED_KINDS, after=start)
    async with aclosing(store.rows(session_id, selection)) as rows:
        async for row in rows:
            if row.turn is not None and row.turn > last:
                break
            if row.kind != "outcome":
                events.add_row(row)
                continue
            if row.turn is None or row.turn < first:
                continue
            outcome = _outcome.decode(row.payload)
            found.add(row.turn, outcome)
            if outcome.truncated is True:
                events.truncated(row.turn)
    await read_findings(store, session_id, events)
    return found, events


async def _turn_bounds(call: Call[ProgressionQuery], session: SessionView) -> tuple[int, int]:
    """The first turn with an outcome, and the last complete turn."""
    first = 1
    selection = RecordFilter(kinds=("outcome",), limit=1)
    async with aclosing(call.service.store.rows(session.info.id, selection)) as rows:
        async for row in rows:
            first = row.turn if row.turn is not None else first
    return first, max(first, session.info.turns_completed)


async def progression_page(call: Call[ProgressionQuery]) -> Response:
    session = await load_session(call)
    info = session.info
    query = call.query
    lowest, highest = await _turn_bounds(call, session)
    start = lowest if query.start is None else query.start
    end = highest if query.end is None else query.end
    start, end = min(start, end), max(start, end)
    signals, events = await read_signals(call, session, start, end)
    live = live_attributes(info, info.records - 1)
    if live:  # drawn again by the server as outcomes and markers commit (viewer.js)
        live = html('{a} data-refresh="progression-card" data-kinds="{k}"', a=live,
                    k=" ".join((*MARKED_KINDS, "finding")))  # fmt: skip
    body = html(
        '<div class="session">{head}{controls}<div id="progression-live"{live}>'
        '<section class="card progression" id="progression-card">'
        '<div class="card-head"><h2>Signals, turns {start} to {end}</h2><span class="muted">'
        "{what}</span></div>{chart}{events}{legend}</section></div></div>",
        head=session_head(session, "progression"),
        controls=_controls(info.id, query, start, end, lowest, highest),
        live=live,
        start=start,
        end=end,
        what=_what(signals),
        chart=_chart(info.id, signals, events),
        events=events_list(info.id, events),
        legend=_legend(info.id, query, signals, start, end),
    )
    return page(
        call.service, call.principal, title=f"{info.id} · progression", body=body, active="sessions"
    )


def _what(signals: Signals) -> str:
    if not signals.outcomes:
        return ""
    step = signals.step
    per = "one point per turn" if step == 1 else f"one point per {step} turns (mean, and the range)"
    return f"{signals.outcomes:,} outcome records; {per}"


def _chart(session_id: str, signals: Signals, events: ChartEvents) -> Html:
    series = signals.series()
    if not signals.outcomes:
        return Html(
            '<p class="empty-state">No outcome records in this range: the session has not '
            "resolved a turn here yet.</p>"
        )
    if not signals.names:
        return Html(
            '<p class="empty-state">The environment recorded no signals: its outcomes carry '
            "none (<code>Resolution.signals</code> is empty), so there is nothing to plot.</p>"
        )
    if not any(one.points for one in series):
        return Html(
            '<p class="empty-state">None of the chosen signals has a value in this range.</p>'
        )
    names = ", ".join(one.name for one in series)
    return html(
        '<div class="chart-wrap">{svg}</div>',
        svg=line_chart(
            series,
            first=signals.first,
            last=signals.last,
            done=signals.done,
            label=f"{names} over turns {signals.first} to {signals.last}",
            marks=_marks(session_id, events),
        ),
    )


def _marks(session_id: str, events: ChartEvents) -> list[Mark]:
    """The markers in lanes by kind (checkpoints first), each linking to its turn."""
    return [
        Mark(event.turn, event.kind, event.glyph, event.text, event.href(session_id))
        for event in sorted(events.events, key=lambda e: (EVENT_KINDS.index(e.kind), e.turn))
    ]


def _legend(
    session_id: str, query: ProgressionQuery, signals: Signals, start: int, end: int
) -> Html:
    if not signals.names:
        return Html("")
    drawn = {one.name: one.colour for one in signals.series()}
    current = list(signals.selected) or list(drawn)
    rows = []
    for name in signals.names:
        stat = signals.overall[name]
        if name in drawn:
            toggle = [n for n in current if n != name]
            action = "hide"
        else:
            toggle = [*current, name][-PALETTE:]
            action = "draw"
        link = _href(session_id, start, end, toggle or None)
        swatch = (
            html('<span class="swatch series-{c}"></span>', c=drawn[name] % PALETTE)
            if name in drawn
            else Html('<span class="swatch off"></span>')
        )
        rows.append(
            html(
                '<tr><td>{swatch}<b>{name}</b></td><td class="num">{last}</td>'
                '<td class="num">{low}</td><td class="num">{high}</td><td class="num">{mean}</td>'
                '<td><a href="{link}">{action}</a></td></tr>',
                swatch=swatch,
                name=name,
                last=number(signals.latest.get(name)),
                low=number(stat.low) if stat.count else DASH,
                high=number(stat.high) if stat.count else DASH,
                mean=number(stat.total / stat.count) if stat.count else DASH,
                link=link,
                action=action,
            )
        )
    missing = [name for name in signals.selected if name not in signals.overall]
    notes = []
    if missing:
        notes.append(html("Not recorded in this range: {n}.", n=", ".join(missing)))
    if signals.untracked:
        notes.append(html("{n} values of further signals are not listed.", n=signals.untracked))
    note = html('<p class="muted small">{n}</p>', n=join(notes, " ")) if notes else Html("")
    return html(
        '<table class="table compact legend"><thead><tr><th>Signal</th><th class="num">Last'
        '</th><th class="num">Lowest</th><th class="num">Highest</th><th class="num">Mean</th>'
        "<th></th></tr></thead><tbody>{rows}</tbody></table>{note}",
        rows=join(rows),
        note=note,
    )


def _controls(
    session_id: str, query: ProgressionQuery, start: int, end: int, lowest: int, highest: int
) -> Html:
    width = end - start + 1
    signals = list(query.signal) or None
    links = [
        html('<a class="chip" href="{h}">All turns</a>', h=_href(session_id, None, None, signals))
    ]
    if start > lowest:
        earlier = max(lowest, start - width)
        links.append(
            html(
                '<a class="chip" href="{h}">← Earlier</a>',
                h=_href(session_id, earlier, earlier + width - 1, signals),
            )
        )
    if end < highest:
        later = min(highest, end + width)
        links.append(
            html(
                '<a class="chip" href="{h}">Later →</a>',
                h=_href(session_id, later - width + 1, later, signals),
            )
        )
    if width > 4:
        quarter = width // 4
        links.append(
            html(
                '<a class="chip" href="{h}">Zoom in</a>',
                h=_href(session_id, start + quarter, end - quarter, signals),
            )
        )
    if start > lowest or end < highest:
        links.append(
            html(
                '<a class="chip" href="{h}">Zoom out</a>',
                h=_href(
                    session_id,
                    max(lowest, start - width // 2),
                    min(highest, end + width // 2),
                    signals,
                ),
            )
        )
    hidden = join(
        html('<input type="hidden" name="signal" value="{s}">', s=name) for name in query.signal
    )
    return html(
        '<form class="range" method="get" action="/sessions/{id}/progression">'
        '<label>Turns <input type="number" name="from" min="0" value="{start}"></label>'
        '<label>to <input type="number" name="to" min="0" value="{end}"></label>{hidden}'
        '<button class="button" type="submit">Show</button>'
        '<span class="muted small">recorded: turns {lowest} to {highest}</span></form>'
        '<nav class="chips" aria-label="Turn range">{links}</nav>',
        id=session_id,
        start=start,
        end=end,
        hidden=hidden,
        lowest=lowest,
        highest=highest,
        links=join(links),
    )


def _href(session_id: str, start: int | None, end: int | None, signals: list[str] | None) -> str:
    params: list[tuple[str, str | int]] = []
    if start is not None:
        params.append(("from", start))
    if end is not None:
        params.append(("to", end))
    params += [("signal", name) for name in signals or ()]
    query = f"?{urlencode(params)}" if params else ""
    return f"/sessions/{session_id}/progression{query}"


PROGRESSION_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/sessions/{session_id}/progression",
        progression_page,
        "sessionProgressionPage",
        "The signals of a session's outcomes, plotted over a chosen turn range",
        description=(
            "`from` and `to` choose the turns (default: all); `signal` (repeatable) the "
            "signals drawn. A long range is summarised in at most 400 points per signal."
        ),
        roles=READERS,
        query=ProgressionQuery,
        errors=(404,),
    ),
)
