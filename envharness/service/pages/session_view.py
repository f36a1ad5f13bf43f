"""What every page of one session shares: its loaded summary, header, tabs and live marker.

Contextual navigation is data (:data:`TABS`): Overview, Turns, Progression, Trajectory,
Configuration.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from envharness.records import (
    Branch,
    Finding,
    Intervention,
    Record,
    Score,
    SegmentStarted,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    decode_record,
)
from envharness.service.access import Access
from envharness.service.pages.html import Html, html, join
from envharness.service.pages.layout import is_terminal, status_badge, when
from envharness.service.pages.spent_view import budget_tag
from envharness.service.pages.widgets import detail_head, tabs
from envharness.service.routing import Call
from envharness.store import RecordFilter, SessionInfo

__all__ = [
    "TABS",
    "SessionView",
    "live_attributes",
    "load_session",
    "participants_table",
    "record_at",
    "session_head",
]

TABS: tuple[tuple[str, str, str, bool], ...] = (
    ("overview", "Overview", "", False),
    ("turns", "Turns", "/turns", False),
    ("progression", "Progression", "/progression", True),
    ("trajectory", "Trajectory", "/trajectory", False),
    ("config", "Configuration", "/config", True),
)
"""(key, label, path suffix, needs a token that sees everything)."""

_SUMMARY_KINDS = (
    "session.created", "session.status", "score", "finding", "branch", "intervention",
    "segment.started",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionView:
    """One session as its pages show it, loaded once per request for this caller."""

    info: SessionInfo
    access: Access
    config: SessionConfig | None
    scores: list[Record]
    findings: list[Record]
    lineage: list[Record]
    """``branch`` records: where this session came from."""
    interventions: list[Record]
    """Interventions applied to start this branch, or refused when a branch was asked for."""
    last_status: SessionStatus | None
    last_segment: SegmentStarted | None
    branched_after: int | None
    """For a branch, the parent's last complete turn it starts from."""

    @property
    def planned(self) -> int | None:
        """The turn the session was planned to reach: its configuration's, or the target of
        the last segment that changed it (a continued session, a branch)."""
        if self.last_segment is not None and self.last_segment.until is not None:
            return self.last_segment.until
        if self.last_segment is not None and self.last_segment.cause == "branch":
            return None  # a branch plans its turns when it is continued
        return self.config.turns if self.config is not None else None

    @property
    def roster(self) -> list[str]:
        if self.config is not None:
            return list(self.config.participants)
        participant = self.access.principal.participant
        return [participant] if participant else []


async def load_session(call: Call[Any]) -> SessionView:
    """The session named in the path, as this caller may see it (404 otherwise)."""
    access = call.access
    info = await access.session(call.path("session_id"))
    config: SessionConfig | None = None
    scores: list[Record] = []
    findings: list[Record] = []
    lineage: list[Record] = []
    interventions: list[Record] = []
    last_status: SessionStatus | None = None
    last_segment: SegmentStarted | None = None
    branched_after: int | None = None
    if access.sees_everything:
        selection = RecordFilter(kinds=_SUMMARY_KINDS)
        async with aclosing(call.service.store.records(info.id, selection)) as records:
            async for record in records:
                payload = record.payload
                if isinstance(payload, SessionCreated):
                    config = payload.config
                elif isinstance(payload, SessionStatus):
                    last_status = payload
                elif isinstance(payload, Score):
                    scores.append(record)
                elif isinstance(payload, Finding):
                    findings.append(record)
                elif isinstance(payload, Branch):
                    lineage.append(record)
                elif isinstance(payload, Intervention):
                    interventions.append(record)
                elif isinstance(payload, SegmentStarted):
                    last_segment = payload
                    if payload.cause == "branch":
                        branched_after = payload.turn
    return SessionView(
        info, access, config, scores, findings, lineage, interventions, last_status,
        last_segment, branched_after,
    )  # fmt: skip


def session_head(session: SessionView, active: str) -> Html:
    info = session.info
    summary = session.access.summary(info)
    planned = f" of {session.planned}" if session.planned is not None else ""
    facts = [
        html("scenario <b>{s}</b>", s=info.scenario_id),
        html("{n}{planned} turns", n=info.turns_completed, planned=planned),
        html("created {t}", t=when(info.created_at)),
        html("last record {t}", t=when(info.updated_at)),
    ]
    if summary.records is not None:
        facts.insert(2, html("{n} records", n=f"{summary.records:,}"))
    for record in session.lineage:
        if isinstance(branch := record.payload, Branch):
            facts.insert(
                0,
                html(
                    '<span class="tag tag-branch">branch</span> of <a class="mono" '
                    'href="/sessions/{p}">{p}</a>{after}',
                    p=branch.parent_session,
                    after=f" after turn {session.branched_after}"
                    if session.branched_after is not None
                    else "",
                ),
            )
    if info.experiment_id:
        trial = session.config.trial if session.config is not None else None
        facts.insert(
            0,
            html(
                'experiment <a href="/experiments/{e}">{e}</a>{trial}',
                e=info.experiment_id,
                trial=f", trial {trial}" if trial is not None else "",
            ),
        )
    shown = [
        (key, label, f"/sessions/{info.id}{suffix}")
        for key, label, suffix, private in TABS
        if session.access.sees_everything or not private
    ]
    title = html(
        '<span class="mono">{id}</span> <span id="session-status">{badge}</span>{budget}',
        id=info.id,
        badge=status_badge(info.status),
        budget=budget_tag(info.status, summary.reason),  # a participant is not told the reason
    )
    return html(
        "{head}{tabs}",
        head=detail_head([("/sessions", "Sessions")], title, facts),
        tabs=tabs(shown, active),
    )


def live_attributes(info: SessionInfo, after: int, participant: str | None = None) -> Html:
    if is_terminal(info.status):
        return Html("")
    extra = html(' data-participant="{p}"', p=participant) if participant else Html("")
    return html(
        ' data-live="{id}" data-after="{after}"{extra}', id=info.id, after=after, extra=extra
    )


def participants_table(session: SessionView) -> Html:
    config = session.config
    if config is None:
        return Html("")
    rows = join(
        html(
            '<tr><td><b>{name}</b></td><td>{role}</td><td class="mono">{impl}</td>'
            '<td><a href="/sessions/{id}/turns?participant={name}">turns →</a></td></tr>',
            name=name,
            role=ref.role,
            impl=ref.implementation,
            id=session.info.id,
        )
        for name, ref in config.participants.items()
    )
    return html(
        '<section class="card"><h2>Participants</h2><table class="table"><thead><tr>'
        "<th>Name</th><th>Role</th><th>Implementation</th><th></th></tr></thead>"
        "<tbody>{rows}</tbody></table></section>",
        rows=rows,
    )


async def record_at(
    call: Call[Any], access: Access, session_id: str, seq: int, *, exact: bool = True
) -> Record | None:
    """The record at ``seq`` this reader may see (``exact=False``: or the next one after)."""
    selection = access.records(RecordFilter(after=seq - 1, limit=1))
    async with aclosing(call.service.store.rows(session_id, selection)) as rows:
        async for row in rows:
            return decode_record(row) if row.seq == seq or not exact else None
    return None
