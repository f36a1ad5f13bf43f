"""The banner over a session's latest turns: where a running session is, and follow mode.

It is complete without script. ``?follow=1`` opens the latest turns and makes the page reload
itself every :data:`FOLLOW_RELOAD` seconds, landing on the newest turn (``#live-end``): the
reload is a ``<meta refresh>`` inside ``<noscript>``, so it never fires where ``viewer.js``
runs. Where it runs, the script takes over over the session's event stream: it keeps the
banner's turn current, keeps the newest turn in view while following, makes the link a toggle
(the address keeps ``follow=1`` in step, so a reload follows too), and when the session ends
says how — status, and the verdict where this reader may see scores — without a reload.

A participant is told no verdict: scores are session-level records (:mod:`..access`).
"""

from __future__ import annotations

from urllib.parse import urlencode

from envharness.records import Record, Score
from envharness.service.pages.html import Html, html
from envharness.service.pages.layout import is_terminal
from envharness.service.pages.results_view import session_verdicts, verdict_of

__all__ = ["FOLLOW_RELOAD", "VERDICT_TEXT", "live_banner", "session_verdict", "turns_href"]

FOLLOW_RELOAD = 5
"""Seconds between reloads of a followed page in a browser without script."""
VERDICT_TEXT = {"passed": "passed", "failed": "not passed", "none": "no verdict"}
"""What the banner says of each verdict (``viewer.js`` says the same)."""


def session_verdict(session_id: str, scores: list[Record] | None) -> str:
    """``passed``, ``failed``, ``none`` (no verdict yet) or ``withheld`` (``scores`` is
    ``None``: a participant's view), by the rule the experiment grid uses: the latest report
    per score version, the first version (by name) that gives a verdict."""
    if scores is None:
        return "withheld"
    latest: dict[str, Score] = {}
    for record in scores:
        if isinstance(record.payload, Score):
            latest[record.payload.version] = record.payload
    reports = [latest[version] for version in sorted(latest)]
    return verdict_of(session_verdicts({session_id: reports} if reports else {}), session_id)


def turns_href(session_id: str, *, participant: str | None, follow: bool, turn: int | None) -> str:
    params: list[tuple[str, str | int]] = []
    if turn is not None:
        params.append(("turn", turn))
    if participant is not None:
        params.append(("participant", participant))
    if follow:
        params.append(("follow", 1))
    query = f"?{urlencode(params)}" if params else ""
    return f"/sessions/{session_id}/turns{query}"


def live_banner(
    session_id: str,
    status: str,
    *,
    turn: int,
    planned: int | None,
    verdict: str,
    follow: bool,
    participant: str | None,
    reload_turn: int | None = None,
) -> Html:
    """``running · turn 26 of 120 · follow`` while the session runs; once it has ended (shown
    to someone who was following), ``completed at turn 120 · passed``.

    DOM contract (viewer.js and the browser tests use it): ``#live-banner`` with
    ``data-state`` (``live`` or ``ended``), ``data-follow`` (``on``/``off``), ``data-verdict``
    (absent for a participant) and ``data-planned``; ``#live-status``, ``#live-turn`` and
    ``#live-follow`` (the toggle, ``aria-pressed``) inside it.

    ``reload_turn``: the ``turn`` the reload's address carries. A browser takes a refresh to
    its own address plus a ``#fragment`` as a jump within the page, not a reload, so
    successive reloads alternate between the address with ``turn`` and without it (following
    ignores ``turn``: the two show the same).
    """
    verdict_attr = html(' data-verdict="{v}"', v=verdict) if verdict != "withheld" else Html("")
    planned_attr = html(' data-planned="{n}"', n=planned) if planned is not None else Html("")
    if is_terminal(status):
        said = VERDICT_TEXT.get(verdict)
        return html(
            '<div class="live-banner ended" id="live-banner" data-state="ended" '
            'data-follow="off"{verdict_attr}{planned_attr} role="status">'
            '<span id="live-banner-text"><b id="live-status">{status}</b> at turn '
            '<span id="live-turn">{turn}</span>{said}</span></div>',
            verdict_attr=verdict_attr,
            planned_attr=planned_attr,
            status=status,
            turn=turn,
            said=html(" · {v}", v=said) if said else "",
        )
    toggle = turns_href(session_id, participant=participant, follow=not follow, turn=None)
    reload = Html("")
    if follow:
        here = turns_href(session_id, participant=participant, follow=True, turn=reload_turn)
        reload = html(
            '<noscript><meta http-equiv="refresh" content="{s}; url={u}#live-end"></noscript>',
            s=FOLLOW_RELOAD,
            u=here,
        )
    return html(
        '<div class="live-banner" id="live-banner" data-state="live" data-follow="{f}"'
        '{verdict_attr}{planned_attr} role="status"><span class="pulse" aria-hidden="true">'
        '</span><span id="live-banner-text"><b id="live-status">{status}</b> · turn '
        '<span id="live-turn">{turn}</span>{of}</span> · <a id="live-follow" href="{toggle}" '
        'aria-pressed="{pressed}">{label}</a>{reload}</div>',
        f="on" if follow else "off",
        verdict_attr=verdict_attr,
        planned_attr=planned_attr,
        status=status,
        turn=turn,
        of=html(" of {n}", n=planned) if planned is not None else "",
        toggle=toggle,
        pressed="true" if follow else "false",
        label="following · stop" if follow else "follow",
        reload=reload,
    )
