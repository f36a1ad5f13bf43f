"""The Compare page: two sessions side by side, turn by turn, and their scores.

It shows what :meth:`~envharness.service.access.Access.compare` found — the harness's own
``envharness.runtime.compare``, read as the caller may read — the observations, executed
actions and environment outcomes that differ in each turn both sessions reached, with the
fields that differ marked, and each metric of their score reports. When one session is the
other's branch, the page says from which checkpoint and with which intervention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
from starlette.responses import Response

from envharness.service.pages.html import DASH, Html, html, join, number, value
from envharness.service.pages.layout import page, status_badge
from envharness.service.pages.lineage_view import checkpoint_text
from envharness.service.pages.turns import TURNS_PER_PAGE
from envharness.service.params import MAX_INTEGER
from envharness.service.problems import HTTPProblem
from envharness.service.routing import ANYONE, Call, Endpoint, viewer_page
from envharness.service.wire.sessions import (
    BranchLink,
    ComparisonOut,
    ScoreDifference,
    SessionSummary,
    TurnDifference,
)

__all__ = ["COMPARE_PAGES", "ComparePageQuery"]

_KIND_LABELS = {
    "observation": "observation",
    "action.executed": "executed action",
    "outcome": "outcome",
}
_KIND_ORDER = {"observation": 0, "action.executed": 1, "outcome": 2}


# -- the Compare page ------------------------------------------------------------------------


class ComparePageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    left: Annotated[str, msgspec.Meta(description="A session id (ses_…), exact.")]
    right: Annotated[str, msgspec.Meta(description="Another session id, exact.")]
    turn: Annotated[
        int,
        msgspec.Meta(ge=1, le=MAX_INTEGER, description="First compared turn shown (20 to a page)."),
    ] = 1


async def compare_page(call: Call[ComparePageQuery]) -> Response:
    query = call.query
    access = call.access
    found = await access.compare(query.left, query.right)
    left, right = found.left, found.right
    relation = join([await _environments(call, found),
                     await _relation(call, left.id, right.id)])  # fmt: skip
    shown = [turn for turn in found.turns_compared if turn >= query.turn][:TURNS_PER_PAGE]
    if query.turn > 1 and not shown:
        raise HTTPProblem(404, f"no compared turn from turn {query.turn} on", parameter="turn")
    body = html(
        '<div class="compare"><div class="page-head"><div class="crumbs"><a href="/sessions">'
        'Sessions</a> /</div><h1>Compare sessions</h1><p class="sub">{sub} <a href="/compare?'
        'left={r}&amp;right={l}">⇄ swap sides</a></p></div>'
        '<div class="columns sides">{lcard}{rcard}</div>{relation}{scores}{turns}</div>',
        sub=_verdict(found),
        l=left.id,
        r=right.id,
        lcard=_side_card("Left", left),
        rcard=_side_card("Right", right),
        relation=relation,
        scores=_scores(found.scores, access.sees_everything),
        turns=_turns(found, shown, query),
    )
    return page(call.service, call.principal, title="Compare", body=body, active="sessions")


def _verdict(found: ComparisonOut) -> str:
    if not found.turns_compared:
        return "The sessions reached no turn in common, so no turn is compared."
    turns = _span(found.turns_compared)
    if found.identical:
        return f"Turns {turns} compared: no differences, and the same scores."
    differing = len({d.turn for d in found.differences})
    return (
        f"Turns {turns} compared (the turns both sessions reached): {differing} of "
        f"{len(found.turns_compared)} differ."
    )


def _span(turns: Sequence[int]) -> str:
    if not turns:
        return ""
    first, last = turns[0], turns[-1]
    if last - first + 1 == len(turns):
        return str(first) if first == last else f"{first}\u2013{last}"
    return ", ".join(map(str, turns))


def _side_card(side: str, summary: SessionSummary) -> Html:
    records = (
        html(" · {n} records", n=f"{summary.records:,}") if summary.records is not None else ""
    )
    return html(
        '<section class="card side"><div class="side-label">{side}</div>'
        '<div><a class="mono" href="/sessions/{id}">{id}</a> {badge}</div>'
        '<div class="muted small">scenario <b>{scenario}</b> · {turns} turns{records}</div>'
        "</section>",
        side=side,
        id=summary.id,
        badge=status_badge(summary.status),
        scenario=summary.scenario_id,
        turns=summary.turns_completed,
        records=records,
    )


async def _environments(call: Call[ComparePageQuery], found: ComparisonOut) -> Html:
    """What can and cannot be aligned when the two sessions ran different environments (only
    for a caller that may read configurations: a participant's pages do not name them)."""
    if not call.access.sees_everything:
        return Html("")
    left, right = found.left.id, found.right.id
    facts = await call.service.store.session_facts(among=(left, right))
    ours, theirs = facts.get(left), facts.get(right)
    if ours is None or theirs is None or ours.environment == theirs.environment:
        return Html("")
    return html(
        '<div class="callout warn environments-apart">These sessions ran different '
        "environments: <b>{l}</b> (left) and <b>{r}</b> (right). Turns are still lined up by "
        "number and their observations, actions and outcomes shown side by side, but the same "
        "field may mean different things in each, so a difference says little; scores line up "
        "only for metrics both reports name. Compare sessions of one environment, or a session "
        "and its branch, for differences that mean something.{lists}</div>",
        l=ours.environment or "unknown",
        r=theirs.environment or "unknown",
        lists=_alignment_lists(found),
    )


def _alignment_lists(found: ComparisonOut) -> Html:
    """What lined up, and what only one side has (and so is compared with nothing)."""
    alignment = found.alignment
    if alignment is None:
        return Html("")
    turns = _span(found.turns_compared) or "none"

    def names(items: Sequence[str]) -> str:
        return ", ".join(items) or "none"

    alone = [
        html("{what} only the {side} has: <b>{listed}</b>", what=what, side=side, listed=listed)
        for what, side, listed in (
            ("participants", "left", ", ".join(alignment.left_only_participants)),
            ("participants", "right", ", ".join(alignment.right_only_participants)),
            ("metrics", "left", ", ".join(alignment.left_only_metrics)),
            ("metrics", "right", ", ".join(alignment.right_only_metrics)),
            ("turns", "left", _span(alignment.left_only_turns)),
            ("turns", "right", _span(alignment.right_only_turns)),
        )
        if listed
    ]  # fmt: skip
    cannot = html("<li>Not compared: {items}.</li>", items=join(alone, "; ")) if alone else ""
    return html(
        '<ul class="alignment"><li>Lined up: turns <b>{turns}</b>, participants <b>{who}</b>, '
        "metrics <b>{metrics}</b>.</li>{cannot}</ul>",
        turns=turns,
        who=names(alignment.participants),
        metrics=names(alignment.metrics),
        cannot=cannot,
    )


async def _relation(call: Call[ComparePageQuery], left: str, right: str) -> Html:
    """How the two sessions are related, when one is the other's branch."""
    lineage = await call.access.lineage(right)
    parent = lineage.parent
    if parent is not None and parent.session.id == left:
        return _branch_note("Right", "left", left, parent)
    lineage = await call.access.lineage(left)
    parent = lineage.parent
    if parent is not None and parent.session.id == right:
        return _branch_note("Left", "right", right, parent)
    return Html(
        '<div class="callout plain">These sessions are not a parent and its branch: turns are '
        "aligned by number, which may mean little.</div>"
    )


def _branch_note(child: str, parent: str, parent_id: str, link: BranchLink) -> Html:
    change = Html("")
    if link.intervention is not None:
        reason = html(" (“{r}”)", r=link.reason) if link.reason else ""
        change = html(", with intervention {i}{r}", i=value(link.intervention), r=reason)
    return html(
        '<div class="callout branch-note"><span class="tag tag-branch">branch</span> '
        "<b>{child}</b> is a branch of <b>{parent}</b>, made from {checkpoint}{change}. Both "
        "number turns from the parent's start; the turns before the checkpoint are the "
        "parent's alone (a branch refers to them instead of copying them).</div>",
        child=child,
        parent=parent,
        checkpoint=checkpoint_text(parent_id, link),
        change=change,
    )


def _scores(scores: list[ScoreDifference], full: bool) -> Html:
    if not scores:
        text = (
            "Neither session has a score report."
            if full
            else "Scores are about every participant, so a participant does not see them."
        )
        return html('<section class="card"><h2>Scores</h2><p class="muted">{t}</p></section>',
                    t=text)  # fmt: skip
    rows = join(
        html(
            '<tr{css}><td>{metric}</td><td class="num">{left}</td><td class="num">{right}</td>'
            '<td class="num delta">{delta}</td></tr>',
            css=Html(' class="differs"') if score.left != score.right else Html(""),
            metric=score.metric,
            left=number(score.left),
            right=number(score.right),
            delta=_delta(score.left, score.right),
        )
        for score in scores
    )
    return html(
        '<section class="card"><h2>Scores</h2><p class="muted small">Each metric of the last '
        "score report of each session.</p>"
        '<table class="table compact scores-diff"><thead><tr><th>Metric</th>'
        '<th class="num">Left</th><th class="num">Right</th><th class="num">Right &minus; left</th>'
        "</tr></thead><tbody>{rows}</tbody></table></section>",
        rows=rows,
    )


def _delta(left: float | None, right: float | None) -> Html:
    if left is None or right is None:
        return Html(DASH)
    change = right - left
    if change == 0:
        return Html('<span class="muted">0</span>')
    css = "up" if change > 0 else "down"
    return html('<span class="{css}">{sign}{n}</span>', css=css, sign="+" if change > 0 else "",
                n=number(change))  # fmt: skip


def _turns(found: ComparisonOut, shown: list[int], query: ComparePageQuery) -> Html:
    if not shown:
        return Html("")
    by_turn: dict[int, list[TurnDifference]] = {}
    for difference in found.differences:
        by_turn.setdefault(difference.turn, []).append(difference)
    cards = join(_turn_card(found, turn, by_turn.get(turn, [])) for turn in shown)
    return html(
        '<h2 class="section-title">Turn by turn</h2>{cards}{pager}',
        cards=cards,
        pager=_pager(found, shown, query),
    )


def _turn_card(found: ComparisonOut, turn: int, differences: list[TurnDifference]) -> Html:
    links = html(
        '<span class="turn-links"><a href="{l}">left</a> · <a href="{r}">right</a></span>',
        l=_turn_href(found.left.id, turn),
        r=_turn_href(found.right.id, turn),
    )
    if not differences:
        return html(
            '<section class="turn card same" id="turn-{t}"><header><h3>Turn {t}</h3>'
            '<span class="muted small">no differences</span>{links}</header></section>',
            t=turn,
            links=links,
        )
    ordered = sorted(
        differences,
        key=lambda d: (d.participant is None, d.participant or "", _KIND_ORDER.get(d.kind, 9)),
    )
    rows = join(
        html(
            '<tr><th scope="row">{who}<div class="what">{what}</div></th>'
            '<td class="c-left">{left}</td><td class="c-right">{right}</td></tr>',
            who=difference.participant or Html('<span class="muted">environment</span>'),
            what=_KIND_LABELS.get(difference.kind, difference.kind),
            left=_compared(difference.kind, difference.left, difference.right),
            right=_compared(difference.kind, difference.right, difference.left),
        )
        for difference in ordered
    )
    return html(
        '<section class="turn card" id="turn-{t}"><header><h3>Turn {t}</h3>'
        '<span class="muted small">{n} difference{s}</span>{links}</header>'
        '<table class="grid diff"><thead><tr><th>Who · what</th><th>Left</th><th>Right</th>'
        "</tr></thead><tbody>{rows}</tbody></table></section>",
        t=turn,
        n=len(differences),
        s="" if len(differences) == 1 else "s",
        links=links,
        rows=rows,
    )


def _turn_href(session_id: str, turn: int) -> str:
    start = max(1, turn - (turn - 1) % TURNS_PER_PAGE)
    return f"/sessions/{session_id}/turns?turn={start}#turn-{turn}"


def _compared(kind: str, data: Any, other: Any) -> Html:
    """One side of a difference, with what differs from the other side marked."""
    if data is None:
        missing = {
            "action.executed": "not executed (blocked, or no action)",
            "observation": "no observation (not in this session, or not this turn)",
        }.get(kind, "no such record")
        return html('<span class="absent">{t}</span>', t=missing)
    if kind == "action.executed" and isinstance(data, dict) and set(data) == {"action", "outcome"}:
        theirs = other if isinstance(other, dict) else {}
        return html(
            '<div class="pair"><span class="muted small">action</span> {a}</div>'
            '<div class="pair"><span class="muted small">outcome</span> {o}</div>',
            a=_marked(data["action"], theirs.get("action")),
            o=_marked(data["outcome"], theirs.get("outcome")),
        )
    if kind == "outcome" and isinstance(data, dict) and set(data) == {"done", "signals"}:
        theirs = other if isinstance(other, dict) else {}
        done = Html(' <span class="tag tag-done">done</span>') if data["done"] else Html("")
        return html(
            "{signals}{done}", signals=_marked(data["signals"], theirs.get("signals")), done=done
        )
    return _marked(data, other)


def _marked(data: Any, other: Any) -> Html:
    """:func:`value`, but a flat object's fields that differ from ``other``'s are marked."""
    if not (isinstance(data, dict) and isinstance(other, dict)):
        rendered = value(data)
        if data != other and not isinstance(data, dict | list):
            return html('<span class="changed">{v}</span>', v=rendered)
        return rendered
    if not data or len(data) > 8 or any(isinstance(item, dict) for item in data.values()):
        return value(data)
    chips = join(
        html(
            '<span class="kv{css}"><span class="k">{k}</span>{v}</span>',
            css=" changed" if key not in other or other[key] != item else "",
            k=key,
            v=value(item),
        )
        for key, item in data.items()
    )
    return html('<span class="kvs">{chips}</span>', chips=chips)


def _pager(found: ComparisonOut, shown: list[int], query: ComparePageQuery) -> Html:
    turns = list(found.turns_compared)
    if len(turns) <= TURNS_PER_PAGE:
        return Html("")
    start = turns.index(shown[0])
    base = f"/compare?left={found.left.id}&right={found.right.id}&turn="
    earlier = (
        html('<a href="{b}{n}">← Earlier turns</a>', b=base,
             n=turns[max(0, start - TURNS_PER_PAGE)])
        if start > 0
        else Html("<span></span>")
    )  # fmt: skip
    later_at = start + len(shown)
    later = (
        html('<a href="{b}{n}">Later turns →</a>', b=base, n=turns[later_at])
        if later_at < len(turns)
        else Html("<span></span>")
    )
    return html(
        '<nav class="pager">{earlier}<span>turns {a}&ndash;{z} of {n} compared</span>{later}</nav>',
        earlier=earlier,
        a=shown[0],
        z=shown[-1],
        n=len(turns),
        later=later,
    )


COMPARE_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/compare", compare_page, "comparePage",
        "Two sessions side by side: per-turn differences and score differences",
        roles=ANYONE, query=ComparePageQuery, errors=(404, 422),
    ),
)  # fmt: skip
