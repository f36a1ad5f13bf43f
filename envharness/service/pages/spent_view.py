"""What was spent, drawn alike on an experiment's page and a session's Overview: the totals as
tiles, in a card whose table says who spent them; and the mark of something its budget stopped.

The figures are :mod:`envharness.service.spending`'s, formatted as ``envharness experiments
show`` prints them (dollars to four places, times in seconds or, past ten minutes, minutes).
"""

from __future__ import annotations

from envharness.service.pages.html import DASH, Html, html, join
from envharness.service.spending import stopped_by_budget
from envharness.service.wire.sessions import CostsOut

__all__ = ["budget_tag", "cost_cells", "duration", "money", "spent_card"]

COST_HEAD = Html(
    '<th class="num">Calls</th><th class="num">Tokens</th><th class="num">USD</th>'
    '<th class="num">Call time</th>'
)
"""The header cells of :func:`cost_cells` (without wall time)."""


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def money(costs: CostsOut) -> str:
    """Dollars spent, or a dash when no call had a price."""
    return f"${costs.usd:.4f}" if costs.priced else DASH


def _unpriced(costs: CostsOut) -> str:
    unpriced = costs.calls - costs.priced
    if not costs.priced:
        return "no call had a price"
    if unpriced:
        return f"+ {unpriced:,} unpriced call{'' if unpriced == 1 else 's'}"
    return "every call priced"


def _tile(key: str, figure: str, label: str, detail: str) -> Html:
    return html(
        '<div class="stat" data-cost="{key}"><div class="stat-n">{figure}</div>'
        '<div class="stat-l">{label}</div><div class="stat-d">{detail}</div></div>',
        key=key,
        figure=figure,
        label=label,
        detail=detail,
    )


def cost_cells(costs: CostsOut) -> Html:
    """A table row's cells under :data:`COST_HEAD`: calls, tokens, money and call time."""
    return html(
        '<td class="num">{calls}</td><td class="num" title="{io}">{tokens}</td>'
        '<td class="num">{usd}</td><td class="num">{seconds}</td>',
        calls=f"{costs.calls:,}",
        io=f"{costs.input_tokens:,} in / {costs.output_tokens:,} out",
        tokens=f"{costs.tokens:,}",
        usd=money(costs),
        seconds=duration(costs.seconds),
    )


def spent_card(costs: CostsOut, *, title: str, ran: str, below: str = "") -> Html:
    """The totals of ``costs`` as tiles, and ``below`` them who spent what; ``ran`` names the
    wall time (shown only where ``costs`` has it). With no cost reported, a line says so."""
    wall = costs.wall_seconds
    if not costs.calls:
        ran_for = f" · {ran} {duration(wall)}" if wall is not None else ""
        return html(
            '<section class="card spent" id="spent"><h2>{title}</h2><p class="muted">No costs '
            "reported{ran_for}. Model agents report each call's tokens, time and price; other "
            "agents can, with <code>AgentReply(action, cost=Cost(…))</code>.</p></section>",
            title=title,
            ran_for=ran_for,
        )
    tiles = [
        _tile(
            "tokens", f"{costs.tokens:,}", "Tokens",
            f"{costs.input_tokens:,} in · {costs.output_tokens:,} out",
        ),
        _tile("usd", money(costs), "Money", _unpriced(costs)),
        _tile(
            "calls", f"{costs.calls:,}", "Calls",
            f"{duration(costs.seconds)} in calls",
        ),
    ]  # fmt: skip
    if wall is not None:
        tiles.append(_tile("wall", duration(wall), "Wall time", ran))
    return html(
        '<section class="card spent" id="spent"><div class="card-head"><h2>{title}</h2>'
        '<span class="muted">as the agents reported it, when this page was made</span></div>'
        '<div class="stats">{tiles}</div>{below}</section>',
        title=title,
        tiles=join(tiles),
        below=below,
    )


def budget_tag(status: str, reason: str | None) -> Html:
    """A *budget* tag for a session or experiment its budget stopped (the reason on hover);
    nothing otherwise."""
    if not stopped_by_budget(status, reason):
        return Html("")
    return html('<span class="tag tag-budget" title="{r}">budget</span>', r=reason or "")
