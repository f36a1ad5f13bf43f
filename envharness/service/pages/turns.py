"""A session's Turns page: the turn grid, a window of :data:`TURNS_PER_PAGE` turns at a time.

Each window is read with one short query from the first record of its first turn, so a session
of 10,000 turns opens as fast as one of three. A session that has not ended opens on its latest
turns under the banner of :mod:`.live_view` (``?follow=1``: follow mode); when the window is the
live end of a running session, the page carries the last seq it shows and ``viewer.js`` streams
what commits after it.

An observation with a text view shows the text, colours and all, with its JSON one click away;
an artifact shows a link and, for an image or a text, a preview (:mod:`.artifact_view`).

Checkpoints, resumed or continued segments and interventions are session-level records: they
show as markers between the turns where they happened (a checkpoint with the branches made
from it). A branch's first window opens with where it came from; its turns are numbered from
its parent's start, so they begin after the checkpoint's turn.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.records import (
    Branch,
    Checkpoint,
    Intervention,
    Record,
    SessionStatus,
    decode_record,
)
from envharness.service.access import Access
from envharness.service.pages.artifact_view import artifact_previews
from envharness.service.pages.html import Html, html, join, value
from envharness.service.pages.layout import is_terminal, page
from envharness.service.pages.lineage_view import compare_link, intervention_text
from envharness.service.pages.live_view import live_banner, session_verdict
from envharness.service.pages.render import (
    failure_note,
    group_turns,
    is_marker,
    marker,
    record_link,
    turn_section,
)
from envharness.service.pages.session_view import (
    SessionView,
    live_attributes,
    load_session,
    session_head,
)
from envharness.service.params import MAX_INTEGER
from envharness.service.routing import Call
from envharness.service.wire.sessions import BranchLink
from envharness.store import RecordFilter, SessionInfo

__all__ = ["TURNS_PER_PAGE", "TurnsQuery", "session_turns", "withheld_failure_note"]

TURNS_PER_PAGE = 20


class TurnsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    turn: (
        Annotated[
            int,
            msgspec.Meta(
                ge=1, le=MAX_INTEGER,
                description="First turn shown (default: the first; for a session that has "
                "not ended, the latest turns).",
            ),
        ]
        | None
    ) = None  # fmt: skip
    participant: Annotated[
        str | None, msgspec.Meta(description="Only this participant's rows.")
    ] = None
    follow: Annotated[
        bool,
        msgspec.Meta(
            description="Follow a running session: open its latest turns and keep the newest "
            "in view (without script, the page reloads itself every few seconds)."
        ),
    ] = False


async def session_turns(call: Call[TurnsQuery]) -> Response:
    session = await load_session(call)
    info = session.info
    query = call.query
    access = session.access
    live = not is_terminal(info.status)
    latest = query.follow or (query.turn is None and live)
    first = _latest_window(info) if latest else query.turn or 1
    selection = access.records(RecordFilter(participant=query.participant))
    start = await _first_seq_of_turn(call, access, info.id, first, query.participant)
    if start is None and (first == 1 or latest):
        # A branch's turns go on from its parent's: its first turn is not turn 1.
        found = await _first_turn(call, access, info.id, query.participant)
        if found is not None and found[1] >= first:
            start, first = found
    last = first + TURNS_PER_PAGE - 1
    records: list[Record] = []
    markers: list[Record] = []
    after = info.records - 1 if access.sees_everything and query.participant is None else -1
    if start is not None:
        window = msgspec.structs.replace(selection, after=start - 1)
        async with aclosing(call.service.store.rows(info.id, window)) as rows:
            async for row in rows:
                if row.turn is not None and row.turn > last:
                    break
                after = max(after, row.seq)
                if row.turn is not None:
                    records.append(decode_record(row))
                elif row.kind in MARKED:
                    record = decode_record(row)
                    if is_marker(record):
                        markers.append(record)
    views = group_turns(records)
    roster = session.roster
    others = (record for view in views for record in view.others)
    previews = await artifact_previews(call.service.store, info.id, others)
    tail = info.turns_completed <= last
    failure = await _failure_box(call, access, info) if tail else None
    timeline = [
        (view.first_seq,
         turn_section(info.id, view, roster, previews, failure if view is views[-1] else None))
        for view in views
    ]  # fmt: skip
    branches: list[BranchLink] = []
    if any(isinstance(record.payload, Checkpoint) for record in markers):
        branches = (await access.lineage(info.id)).children
    timeline += [(record.seq, _marker(session, record, branches)) for record in markers]
    opening = Html("")
    if session.branched_after is not None and first <= session.branched_after + 1:
        opening = _branch_opening(session)
    empty = Html("")
    if not views and failure is not None:
        empty = html('<section class="card empty-turns">{f}</section>', f=failure)
    elif not views:
        text = f"No records for turn {first} yet." if first > 1 else "No turns recorded yet."
        if info.status == "paused" and session.branched_after is not None:
            text = "No turns yet: the branch is paused until it is continued."
        empty = html(
            '<section class="card empty-turns"><p class="muted">{text}</p></section>', text=text
        )
    sections = html(
        "{opening}{items}{empty}",
        opening=opening,
        items=join(item for _, item in sorted(timeline)),
        empty=empty,
    )
    streamed = live_attributes(info, after, access.principal.participant or query.participant)
    if streamed and not access.sees_everything:
        streamed = html('{s} data-reasons="withheld"', s=streamed)
    banner = Html("")
    if tail and (live or query.follow):
        seen = max((view.turn for view in views), default=0)
        banner = live_banner(
            info.id,
            info.status,
            turn=max(seen, info.turns_completed),
            planned=session.planned,
            verdict=session_verdict(info.id, session.scores if access.sees_everything else None),
            follow=query.follow and live,
            participant=query.participant,
            reload_turn=None if query.turn is not None else first,
        )
    body = html(
        '<div class="session">{head}{filters}{banner}<div id="timeline" data-session="{id}"'
        '{live}>{sections}</div><div id="live-end"></div>{pager}</div>',
        head=session_head(session, "turns"),
        filters=_participant_chips(session, query, first),
        banner=banner,
        id=info.id,
        live=streamed if tail else Html(""),
        sections=sections,
        pager=_turn_pager(info, query.participant, first, tail),
    )
    return page(call.service, call.principal, title=f"{info.id} · turns", body=body,
                active="sessions")  # fmt: skip


STATUS_SCAN = 16
"""Records read from a session's end to find its final status (it is among the last few)."""


def _latest_window(info: SessionInfo) -> int:
    """The first turn of the window that ends with the turn after the last complete one: the
    turn in progress, or the one a session failed or was stopped in."""
    return max(1, info.turns_completed + 1 - TURNS_PER_PAGE + 1)


async def _failure_box(call: Call[TurnsQuery], access: Access, info: SessionInfo) -> Html | None:
    """What a failed session shows on the last turn shown: its error for a reader who may see
    it; for a participant, that it failed there (the reason is session-level, withheld)."""
    if info.status != "failed":
        return None
    if not access.sees_everything:
        return withheld_failure_note()
    found = await _failure(call, access, info)
    return failure_note(info.id, found) if found is not None else None


def withheld_failure_note() -> Html:
    """A failed session's mark for a participant (``viewer.js`` draws the same)."""
    return Html(
        '<div class="kv-failure" role="alert"><span class="tag tag-failed">failed here</span> '
        '<span class="kv-withheld">the session failed in this turn; why is not shown to a '
        "participant</span></div>"
    )


async def _failure(call: Call[TurnsQuery], access: Access, info: SessionInfo) -> Record | None:
    """The ``session.status`` record of a failed session, if this reader may see it: its
    error is drawn on the last turn shown, where the session stopped."""
    if info.status != "failed":
        return None
    selection = access.records(
        RecordFilter(kinds=("session.status",), after=max(info.records - STATUS_SCAN, -1))
    )
    found: Record | None = None
    async with aclosing(call.service.store.rows(info.id, selection)) as rows:
        async for row in rows:
            record = decode_record(row)
            if isinstance(record.payload, SessionStatus) and record.payload.status == "failed":
                found = record
    return found


MARKED = frozenset({"checkpoint", "segment.started", "intervention", "branch"})
"""Kinds of the session-level records shown between turns (see ``render.is_marker``)."""


def _marker(session: SessionView, record: Record, branches: list[BranchLink]) -> Html:
    """A marker, with the branches made from it when it is a checkpoint."""
    children = [c for c in branches if c.checkpoint_seq == record.seq]
    if not isinstance(record.payload, Checkpoint) or not children:
        return marker(session.info.id, record)
    items = join(
        html(
            '<li><span class="tag tag-branch">branch</span> <a class="mono" '
            'href="/sessions/{c}">{c}</a> {change} {compare}</li>',
            c=child.session.id,
            change=intervention_text(child),
            compare=compare_link(session.info.id, child.session.id, "Compare"),
        )
        for child in children
    )
    return marker(session.info.id, record, html('<ul class="branches">{b}</ul>', b=items))


def _branch_opening(session: SessionView) -> Html:
    """Where a branch came from, above its first turn: parent, checkpoint, intervention."""
    parts = []
    for record in session.lineage:
        branch = record.payload
        assert isinstance(branch, Branch)
        parts.append(
            html(
                '<div class="marker marker-branch" id="r{seq}"><span class="marker-icon" '
                'aria-hidden="true">↳</span><div class="marker-body"><div class="marker-line">'
                '{link}<b>Branched</b> from <a class="mono" href="/sessions/{p}">{p}</a> at '
                '<a href="/sessions/{p}/records/{c}">checkpoint #{c}</a>, the state after turn '
                "{turn}</div>{interventions}"
                '<div class="marker-actions">{compare}</div></div></div>',
                seq=record.seq,
                link=record_link(session.info.id, record.seq),
                p=branch.parent_session,
                c=branch.checkpoint_seq,
                turn=session.branched_after,
                interventions=join(
                    _applied(session.info.id, r)
                    for r in session.interventions
                    if isinstance(r.payload, Intervention) and r.payload.rejected is None
                ),
                compare=compare_link(branch.parent_session, session.info.id, "Compare with parent"),
            )
        )
    return join(parts)


def _applied(session_id: str, record: Record) -> Html:
    payload = record.payload
    assert isinstance(payload, Intervention)
    return html(
        '<div class="change">{link}<span class="muted">intervention</span> {v}{r}</div>',
        link=record_link(session_id, record.seq),
        v=value(payload.intervention),
        r=html(' <span class="why">“{r}”</span>', r=payload.reason) if payload.reason else "",
    )


async def _first_turn(
    call: Call[TurnsQuery], access: Access, session_id: str, participant: str | None
) -> tuple[int, int] | None:
    """(seq, turn) of the session's first record in a turn, for this reader: a branch's first
    turn follows the turn of its checkpoint. Looks at the first few records only."""
    selection = access.records(RecordFilter(participant=participant, limit=FIRST_TURN_SCAN))
    async with aclosing(call.service.store.rows(session_id, selection)) as rows:
        async for row in rows:
            if row.turn is not None:
                return row.seq, row.turn
    return None


FIRST_TURN_SCAN = 64
"""Records read from a session's start to find its first turn (a branch has a handful)."""


async def _first_seq_of_turn(
    call: Call[TurnsQuery], access: Access, session_id: str, turn: int, participant: str | None
) -> int | None:
    """The seq where turn ``turn`` begins (for this reader), if it has begun."""
    selection = access.records(RecordFilter(turn=turn, participant=participant, limit=1))
    async with aclosing(call.service.store.rows(session_id, selection)) as rows:
        async for row in rows:
            return row.seq
    return None


def _participant_chips(session: SessionView, query: TurnsQuery, first: int) -> Html:
    if not session.access.sees_everything or len(session.roster) < 2:
        return Html("")
    base = f"/sessions/{session.info.id}/turns?turn={first}"
    chips = [
        html(
            '<a class="chip{a}" href="{href}">Everyone</a>',
            a=" active" if query.participant is None else "",
            href=base,
        )
    ]
    chips += [
        html(
            '<a class="chip{a}" href="{href}&participant={name}">{name}</a>',
            a=" active" if query.participant == name else "",
            href=base,
            name=name,
        )
        for name in session.roster
    ]
    return html('<nav class="chips" aria-label="Participants">{c}</nav>', c=join(chips))


def _turn_pager(info: SessionInfo, participant: str | None, first: int, tail: bool) -> Html:
    if first == 1 and tail:
        return Html("")
    who = f"&participant={participant}" if participant else ""
    base = f"/sessions/{info.id}/turns?turn="
    earlier = (
        html('<a href="{b}{n}{w}">← Turns {n}&ndash;{m}</a>', b=base,
             n=max(1, first - TURNS_PER_PAGE), m=first - 1, w=who)
        if first > 1
        else Html("<span></span>")
    )  # fmt: skip
    later_start = first + TURNS_PER_PAGE
    later = (
        html('<a href="{b}{n}{w}">Turns {n}&ndash; →</a>', b=base, n=later_start, w=who)
        if not tail
        else Html("<span></span>")
    )
    latest = max(1, info.turns_completed - TURNS_PER_PAGE + 1)
    jump = (
        html(' · <a href="{b}{n}{w}">latest</a>', b=base, n=latest, w=who) if not tail else Html("")
    )
    return html(
        '<nav class="pager">{earlier}<span>turns {a}&ndash;{z} of {total}{jump}</span>'
        "{later}</nav>",
        earlier=earlier,
        a=first,
        z=min(first + TURNS_PER_PAGE - 1, max(info.turns_completed, first)),
        total=info.turns_completed,
        jump=jump,
        later=later,
    )
