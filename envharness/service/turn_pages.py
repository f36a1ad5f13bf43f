"""A session's Turns page: the turn grid, a window of :data:`TURNS_PER_PAGE` turns at a time.

Each window is read with one short query from the first record of its first turn, so a session
of 10,000 turns opens as fast as one of three. When the window is the live end of a running
session, the page carries the last seq it shows and ``viewer.js`` streams what commits after it.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.records import Record, decode_record
from envharness.service.access import Access
from envharness.service.html import Html, html, join
from envharness.service.layout import page
from envharness.service.render import group_turns, turn_section
from envharness.service.routing import Call
from envharness.service.session_view import (
    SessionView,
    live_attributes,
    load_session,
    session_head,
)
from envharness.store import RecordFilter, SessionInfo

__all__ = ["TURNS_PER_PAGE", "TurnsQuery", "session_turns"]

TURNS_PER_PAGE = 20


class TurnsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    turn: Annotated[int, msgspec.Meta(ge=1, description="First turn shown.")] = 1
    participant: Annotated[
        str | None, msgspec.Meta(description="Only this participant's rows.")
    ] = None


async def session_turns(call: Call[TurnsQuery]) -> Response:
    session = await load_session(call)
    info = session.info
    query = call.query
    access = session.access
    first, last = query.turn, query.turn + TURNS_PER_PAGE - 1
    selection = access.records(RecordFilter(participant=query.participant))
    start = await _first_seq_of_turn(call, access, info.id, first, query.participant)
    records: list[Record] = []
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
    views = group_turns(records)
    roster = session.roster
    sections = join(turn_section(info.id, view, roster) for view in views)
    if not views:
        sections = html(
            '<section class="card empty-turns"><p class="muted">{text}</p></section>',
            text=f"No records for turn {first} yet." if first > 1 else "No turns recorded yet.",
        )
    tail = info.turns_completed <= last
    live = live_attributes(info, after, access.principal.participant or query.participant)
    body = html(
        '<div class="session">{head}{filters}<div id="timeline" data-session="{id}"{live}>'
        "{sections}</div>{pager}</div>",
        head=session_head(session, "turns"),
        filters=_participant_chips(session, query),
        id=info.id,
        live=live if tail else Html(""),
        sections=sections,
        pager=_turn_pager(info, query, tail),
    )
    return page(call.service, call.principal, title=f"{info.id} · turns", body=body,
                active="sessions")  # fmt: skip


async def _first_seq_of_turn(
    call: Call[TurnsQuery], access: Access, session_id: str, turn: int, participant: str | None
) -> int | None:
    """The seq where turn ``turn`` begins (for this reader), if it has begun."""
    selection = access.records(RecordFilter(turn=turn, participant=participant, limit=1))
    async with aclosing(call.service.store.rows(session_id, selection)) as rows:
        async for row in rows:
            return row.seq
    return None


def _participant_chips(session: SessionView, query: TurnsQuery) -> Html:
    if not session.access.sees_everything or len(session.roster) < 2:
        return Html("")
    base = f"/sessions/{session.info.id}/turns?turn={query.turn}"
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


def _turn_pager(info: SessionInfo, query: TurnsQuery, tail: bool) -> Html:
    if query.turn == 1 and tail:
        return Html("")
    who = f"&participant={query.participant}" if query.participant else ""
    base = f"/sessions/{info.id}/turns?turn="
    earlier = (
        html('<a href="{b}{n}{w}">← Turns {n}&ndash;{m}</a>', b=base,
             n=max(1, query.turn - TURNS_PER_PAGE), m=query.turn - 1, w=who)
        if query.turn > 1
        else Html("<span></span>")
    )  # fmt: skip
    later_start = query.turn + TURNS_PER_PAGE
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
        a=query.turn,
        z=min(query.turn + TURNS_PER_PAGE - 1, max(info.turns_completed, query.turn)),
        total=info.turns_completed,
        jump=jump,
        later=later,
    )
