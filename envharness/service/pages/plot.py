"""A line chart as inline SVG, drawn on the server: no script, no library, nothing fetched.

The chart takes series already reduced to at most a few hundred points (see
:mod:`.progression`), so its size does not depend on how many turns a session has. Each point
is a bucket of turns: the line joins the buckets' means and, where a bucket holds more than
one turn, a band spans its lowest and highest value. Colours come from classes
(``series-0`` …) in ``viewer.css``: the Content-Security-Policy admits no inline style.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envharness.service.pages.html import Html, html, join, number

__all__ = [
    "HEIGHT",
    "LANE",
    "PALETTE",
    "WIDTH",
    "Mark",
    "Point",
    "Series",
    "line_chart",
    "nice_ticks",
]

WIDTH = 960
HEIGHT = 300
PALETTE = 8
"""Distinct series colours (``series-0`` … ``series-7`` in viewer.css)."""
_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 18, 14, 34
_DOTS_UP_TO = 120
"""Points per series drawn as dots (with a tooltip) when there are this few."""
LANE = 18
"""Height of one lane of event markers under the chart."""


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket of turns ``first`` .. ``last``: the mean of a signal's values, and their
    lowest and highest."""

    first: int
    last: int
    mean: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    colour: int
    points: tuple[Point, ...]
    """In turn order; a bucket with no value is absent (the line breaks there)."""
    step: int = 1
    """Turns per bucket: consecutive points further apart than this are not joined."""


@dataclass(frozen=True, slots=True)
class Mark:
    """An event under the chart at ``turn``: drawn as ``glyph`` in the lane of its ``kind``
    (class ``event-{kind}``), titled ``text``, linking to ``href``."""

    turn: int
    kind: str
    glyph: str
    text: str
    href: str


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values covering ``low`` .. ``high`` (1, 2 or 5 times 10^n apart)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if len(ticks) < 2:
        ticks.append(round(first + step, 12))
    return ticks


def line_chart(
    series: Sequence[Series],
    *,
    first: int,
    last: int,
    done: int | None = None,
    label: str = "",
    marks: Sequence[Mark] = (),
) -> Html:
    """The chart of ``series`` over turns ``first`` .. ``last`` (``done``: the turn the
    environment said the episode was over, marked), with ``marks`` in lanes under the turn
    axis, one lane per kind in the order they first appear."""
    values = [v for s in series for p in s.points for v in (p.low, p.high)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high == low:
        low, high = low - 1, high + 1
    ticks = nice_ticks(low, high)
    low, high = min(low, ticks[0]), max(high, ticks[-1])
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    span = max(1, last - first)

    def x(turn: float) -> float:
        return _LEFT + (turn - first) / span * plot_w if last > first else _LEFT + plot_w / 2

    def y(value: float) -> float:
        return _TOP + (high - value) / (high - low) * plot_h

    parts: list[Html] = []
    for tick in ticks:
        parts.append(
            html(
                '<line class="grid" x1="{x1}" x2="{x2}" y1="{y}" y2="{y}"/>'
                '<text class="tick" x="{tx}" y="{ty}" text-anchor="end">{v}</text>',
                x1=_LEFT,
                x2=WIDTH - _RIGHT,
                y=_f(y(tick)),
                tx=_LEFT - 8,
                ty=_f(y(tick) + 4),
                v=number(tick),
            )
        )
    for turn in _turn_ticks(first, last):
        parts.append(
            html(
                '<line class="xtick" x1="{x}" x2="{x}" y1="{y1}" y2="{y2}"/>'
                '<text class="tick" x="{x}" y="{ty}" text-anchor="middle">{t}</text>',
                x=_f(x(turn)),
                y1=HEIGHT - _BOTTOM,
                y2=HEIGHT - _BOTTOM + 5,
                ty=HEIGHT - _BOTTOM + 18,
                t=turn,
            )
        )
    if done is not None and first <= done <= last:
        parts.append(
            html(
                '<line class="done-line" x1="{x}" x2="{x}" y1="{y1}" y2="{y2}"/>'
                '<text class="done-label" x="{tx}" y="{ty}">done</text>',
                x=_f(x(done)),
                y1=_TOP,
                y2=HEIGHT - _BOTTOM,
                tx=_f(x(done) + 4),
                ty=_TOP + 10,
            )
        )
    for one in series:
        parts.append(_series(one, x, y))
    lanes = list(dict.fromkeys(mark.kind for mark in marks))
    for index, kind in enumerate(lanes):
        parts.append(_lane(index, kind, [m for m in marks if m.kind == kind], x))
    parts.append(
        html(
            '<line class="axis" x1="{l}" x2="{r}" y1="{b}" y2="{b}"/>'
            '<text class="axis-label" x="{cx}" y="{ly}" text-anchor="middle">turn</text>',
            l=_LEFT,
            r=WIDTH - _RIGHT,
            b=HEIGHT - _BOTTOM,
            cx=_LEFT + plot_w / 2,
            ly=HEIGHT - 2,
        )
    )
    return html(
        '<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{label}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{label}</title>'
        "{parts}</svg>",
        w=WIDTH,
        h=HEIGHT + LANE * len(lanes) + (6 if lanes else 0),
        label=label,
        parts=join(parts),
    )


def _lane(index: int, kind: str, marks: Sequence[Mark], x: Callable[[float], float]) -> Html:
    """One row of markers under the axis: a label, a rule, and a linked glyph per mark."""
    middle = HEIGHT + 6 + LANE * index + LANE / 2
    glyphs = join(
        html(
            '<a href="{href}"><text x="{x}" y="{y}" text-anchor="middle">{g}<title>{t}</title>'
            "</text></a>",
            href=mark.href,
            x=_f(x(mark.turn)),
            y=_f(middle + 4),
            g=mark.glyph,
            t=mark.text,
        )
        for mark in marks
    )
    return html(
        '<g class="event event-{kind}" data-kind="{kind}"><line class="event-lane" x1="{l}" '
        'x2="{r}" y1="{y}" y2="{y}"/><text class="tick" x="{tx}" y="{ty}" text-anchor="end">'
        "{kind}</text>{glyphs}</g>",
        kind=kind,
        l=_LEFT,
        r=WIDTH - _RIGHT,
        y=_f(middle),
        tx=_LEFT - 6,
        ty=_f(middle + 4),
        glyphs=glyphs,
    )


def _series(series: Series, x: Callable[[float], float], y: Callable[[float], float]) -> Html:
    css = f"series-{series.colour % PALETTE}"
    runs: list[list[Point]] = []
    for point in series.points:
        if runs and point.first - runs[-1][-1].last <= series.step:
            runs[-1].append(point)
        else:
            runs.append([point])
    shapes: list[Html] = []
    for run in runs:
        if any(point.high > point.low for point in run):
            upper = [f"{_f(x(_mid(p)))},{_f(y(p.high))}" for p in run]
            lower = [f"{_f(x(_mid(p)))},{_f(y(p.low))}" for p in reversed(run)]
            shapes.append(
                html(
                    '<polygon class="band {css}" points="{p}"/>', css=css, p=" ".join(upper + lower)
                )
            )
        if len(run) > 1:
            line = " ".join(f"{_f(x(_mid(p)))},{_f(y(p.mean))}" for p in run)
            shapes.append(html('<polyline class="line {css}" points="{p}"/>', css=css, p=line))
    if len(series.points) <= _DOTS_UP_TO:
        shapes += [
            html(
                '<circle class="dot {css}" cx="{cx}" cy="{cy}" r="3"><title>{t}</title></circle>',
                css=css,
                cx=_f(x(_mid(p))),
                cy=_f(y(p.mean)),
                t=_tooltip(series.name, p),
            )
            for p in series.points
        ]
    return html('<g class="series" data-signal="{n}">{s}</g>', n=series.name, s=join(shapes))


def _mid(point: Point) -> float:
    return (point.first + point.last) / 2


def _tooltip(name: str, point: Point) -> str:
    where = (
        f"turn {point.first}"
        if point.first == point.last
        else f"turns {point.first} to {point.last}"
    )
    if point.low == point.high:
        return f"{name}: {number(point.mean)} ({where})"
    return (
        f"{name}: mean {number(point.mean)}, {number(point.low)} to {number(point.high)} ({where})"
    )


def _turn_ticks(first: int, last: int) -> list[int]:
    if last <= first:
        return [first]
    ticks = nice_ticks(first, last, count=8)
    found = sorted({int(t) for t in ticks if first <= t <= last and t == int(t)})
    return found or [first, last]


def _f(value: float) -> str:
    return f"{value:.1f}"
