"""The Trajectories destination, a trajectory's page, and a session's Trajectory tab.

Each reads through :class:`~envharness.service.trajectory_access.TrajectoryAccess`, as the
JSON API does, and draws with :mod:`.trajectory_view`. The listing projects every trajectory
it may show (each one once per server while its evidence is unchanged, see
:mod:`~envharness.service.projections`) to count them by state, and shows :data:`PER_PAGE` at a
time.
"""

from __future__ import annotations

from collections import Counter
from contextlib import aclosing
from typing import Annotated
from urllib.parse import urlencode

import msgspec
from starlette.responses import Response

from envharness.service.http.trajectories import TrajectoryQuery
from envharness.service.pages.html import Html, html, join
from envharness.service.pages.layout import page, when
from envharness.service.pages.session_view import load_session, session_head
from envharness.service.pages.trajectory_view import (
    state_tag,
    trajectory_href,
    trajectory_sections,
    trajectory_table,
)
from envharness.service.pages.widgets import chip, detail_head, page_head, page_slice, pager, tabs
from envharness.service.problems import HTTPProblem, trajectory_problems
from envharness.service.routing import ANYONE, Call, Endpoint, viewer_page
from envharness.service.trajectory_access import TrajectoryAccess, TrajectoryFilter
from envharness.trajectories import Trajectory
from envharness.trajectories.model import (
    CollectionState,
    ExecutionState,
    Origin,
    TerminationCause,
    VerificationState,
)

__all__ = ["PER_PAGE", "TRAJECTORY_PAGES", "evidence_nav"]

PER_PAGE = 100

_DIMENSIONS = (
    ("origin", "Origin", ("native", "imported")),
    ("execution", "Execution", ("running", "finished", "interrupted")),
    ("collection", "Collection", ("complete", "partial", "gaps")),
    ("outcome", "Verified outcome", ("verified", "unverified", "disputed")),
    ("termination", "Termination", ("done", "turn_limit", "failed", "stopped", "interrupted",
                                    "paused", "imported", "not_ended")),
)  # fmt: skip


_PARTS = (
    ("trajectories", "Trajectories", "/trajectories"),
    ("snapshots", "Snapshots", "/snapshots"),
    ("datasets", "Datasets", "/datasets"),
    ("sources", "Sources", "/sources"),
)


class TrajectoriesPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    origin: Annotated[Origin | None, msgspec.Meta(description="Only this origin.")] = None
    execution: Annotated[
        ExecutionState | None, msgspec.Meta(description="Only this execution state.")
    ] = None
    collection: Annotated[
        CollectionState | None, msgspec.Meta(description="Only this collection state.")
    ] = None
    termination: Annotated[
        TerminationCause | None, msgspec.Meta(description="Only those that ended so.")
    ] = None
    outcome: Annotated[
        VerificationState | None, msgspec.Meta(description="Only this verified outcome.")
    ] = None
    experiment: Annotated[
        str | None, msgspec.Meta(description="Only this experiment's sessions.")
    ] = None
    source: Annotated[str | None, msgspec.Meta(description="Only this source's episodes.")] = None
    page: Annotated[int, msgspec.Meta(ge=1, description="Page number, from 1.")] = 1

    def params(self) -> dict[str, str]:
        found = {
            name: getattr(self, name)
            for name in (
                "origin",
                "execution",
                "collection",
                "termination",
                "outcome",
                "experiment",
                "source",
            )
        }
        return {name: value for name, value in found.items() if value is not None}


def evidence_nav(active: str, full: bool) -> Html:
    """Trajectories, Snapshots, Datasets, Sources: the parts of the Trajectories destination
    (a participant has only the first)."""
    return tabs(_PARTS, active) if full else Html("")


async def trajectories_page(call: Call[TrajectoriesPageQuery]) -> Response:
    query = call.query
    trajectories = TrajectoryAccess(call.access)
    full = trajectories.full
    if query.outcome is not None and not full:
        raise HTTPProblem(
            403, "a participant may not filter by verified outcome: scores are about everyone",
            parameter="outcome",
        )  # fmt: skip
    base = TrajectoryFilter(origin=query.origin, experiment=query.experiment, source=query.source)
    candidates = await trajectories.candidates(base)
    async with aclosing(trajectories.select(candidates, base)) as selected:
        found: list[Trajectory] = [trajectory async for _, trajectory in selected]
    counts: dict[str, Counter[str]] = {
        "origin": Counter(t.provenance.origin for t in found),
        "execution": Counter(t.execution.state for t in found),
        "collection": Counter(t.collection.state for t in found),
        "outcome": Counter(t.outcome.state for t in found),
        "termination": Counter(t.termination.cause for t in found),
    }
    wanted = TrajectoryFilter(
        execution=query.execution, collection=query.collection, termination=query.termination,
        outcome=query.outcome,
    )  # fmt: skip
    kept = [t for t in found if trajectories.keeps(t, wanted)]
    native = [t for t in kept if t.provenance.origin == "native"]
    kept = native[::-1] + [t for t in kept if t.provenance.origin == "imported"]
    shown, pages = page_slice(kept, query.page, PER_PAGE, "trajectories")
    summaries = [await trajectories.summary(t) for t in shown]
    table = (
        trajectory_table(summaries)
        if summaries
        else Html('<p class="empty-state">No trajectory matches these filters.</p>')
        if found
        else Html(
            '<p class="empty-state">No trajectories yet: every session projects into one. '
            "<code>envharness --store PATH quickstart</code> writes a store to explore.</p>"
        )
    )
    what = (
        "Portable, digest-bound projections of every session's journal"
        + (" and of every imported episode" if full else " you take part in")
        + ", each with four independent states."
    )
    params = query.params()
    body = html(
        '{head}{nav}<div class="filters">{filters}</div><section class="card"><div '
        'class="card-head"><h2>{n} trajectories</h2><span class="muted">{order}</span></div>'
        "{table}</section>{pager}",
        head=page_head("Trajectories", what),
        nav=evidence_nav("trajectories", full),
        filters=_filters(query, counts, full),
        n=f"{len(kept):,}",
        order="newest sessions first, then imported episodes",
        table=table,
        pager=pager(query.page, pages, lambda n: _href(params, page=str(n))),
    )
    return page(call.service, call.principal, title="Trajectories", body=body,
                active="trajectories")  # fmt: skip


def _href(params: dict[str, str], **changes: str | None) -> str:
    merged = {**params, **changes}
    kept = {name: value for name, value in merged.items() if value is not None}
    return "/trajectories" + (f"?{urlencode(kept)}" if kept else "")


def _filters(query: TrajectoriesPageQuery, counts: dict[str, Counter[str]], full: bool) -> Html:
    params = query.params()
    rows = []
    for key, label, values in _DIMENSIONS:
        if key == "outcome" and not full:
            continue
        if key == "origin" and not full:
            continue
        current = getattr(query, key)
        chips = [
            html(
                '<a class="chip{a}" href="{h}">All</a>',
                a=" active" if current is None else "",
                h=_href(params, **{key: None}),
            )
        ]
        chips += [
            chip(
                state.replace("_", " "),
                counts[key][state],
                _href(params, **{key: state}),
                current == state,
            )
            for state in values
            if counts[key][state] or current == state
        ]
        rows.append(
            html(
                '<div class="filter-row"><span class="filter-label">{label}</span>'
                '<nav class="chips" aria-label="{label}">{chips}</nav></div>',
                label=label,
                chips=join(chips),
            )
        )
    scoped = []
    if query.experiment is not None:
        scoped.append(
            html(
                'experiment <a class="mono" href="/experiments/{e}">{e}</a> '
                '<a class="small" href="{h}">(all experiments)</a>',
                e=query.experiment,
                h=_href(params, experiment=None),
            )
        )
    if query.source is not None:
        scoped.append(
            html(
                'source <span class="mono">{s}</span> <a class="small" href="{h}">(all)</a>',
                s=query.source,
                h=_href(params, source=None),
            )
        )
    scope = html('<p class="scope">Only {s}</p>', s=join(scoped, "; ")) if scoped else Html("")
    return html("{scope}{rows}", scope=scope, rows=join(rows))


async def trajectory_page(call: Call[TrajectoryQuery]) -> Response:
    trajectories = TrajectoryAccess(call.access)
    with trajectory_problems():
        trajectory = await trajectories.one(call.path("trajectory_id"))
    full = trajectories.full
    summary = await trajectories.summary(trajectory)
    check = await trajectories.check(trajectory) if full and call.query.check else None
    facts = []
    if summary.session_id is not None:
        facts.append(
            html(
                'session <a class="mono" href="/sessions/{s}">{s}</a> (<a href="/sessions/{s}/'
                'turns">turns</a>)',
                s=summary.session_id,
            )
        )
    if summary.source is not None:
        facts.append(html('source <a class="mono" href="/sources#{s}">{s}</a>', s=summary.source))
    if summary.experiment_id is not None:
        facts.append(html('experiment <a href="/experiments/{e}">{e}</a>', e=summary.experiment_id))
    if summary.scenario_id:
        facts.append(html("scenario <b>{s}</b>", s=summary.scenario_id))
    if summary.environment:
        facts.append(html("environment <b>{e}</b>", e=summary.environment))
    if summary.started_at:
        facts.append(html("started {t}", t=when(summary.started_at)))
    if summary.ended_at:
        facts.append(html("ended {t}", t=when(summary.ended_at)))
    body = html(
        '<div class="trajectory">{head}{sections}</div>',
        head=detail_head(
            [("/trajectories", "Trajectories")],
            html('<span class="mono">{id}</span> {origin}', id=summary.id,
                 origin=state_tag("origin", summary.origin)),
            facts,
        ),
        sections=trajectory_sections(
            summary, trajectories.segments(trajectory), trajectory if full else None, check,
            recheck=f"{trajectory_href(summary.id)}?check=true",
        ),
    )  # fmt: skip
    return page(call.service, call.principal, title=summary.id, body=body,
                active="trajectories")  # fmt: skip


async def session_trajectory(call: Call[TrajectoryQuery]) -> Response:
    session = await load_session(call)
    info = session.info
    trajectories = TrajectoryAccess(session.access)
    with trajectory_problems():
        trajectory = await trajectories.one(info.id)
    full = trajectories.full
    summary = await trajectories.summary(trajectory)
    check = await trajectories.check(trajectory) if full and call.query.check else None
    body = html(
        '<div class="session">{head}<p class="muted">The portable, digest-bound projection of '
        'this session\'s journal, as <code>envharness trajectories {id}</code> shows it. '
        '<a href="/trajectories/{id}">Its page among all trajectories →</a></p>{sections}</div>',
        head=session_head(session, "trajectory"),
        id=info.id,
        sections=trajectory_sections(
            summary, trajectories.segments(trajectory), trajectory if full else None, check,
            recheck=f"/sessions/{info.id}/trajectory?check=true",
        ),
    )  # fmt: skip
    return page(call.service, call.principal, title=f"{info.id} · trajectory", body=body,
                active="sessions")  # fmt: skip


TRAJECTORY_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/trajectories", trajectories_page, "trajectoriesPage",
        "Trajectories: the four states, provenance and snapshots of each, filterable",
        roles=ANYONE, query=TrajectoriesPageQuery, errors=(403, 404),
    ),
    viewer_page(
        "/trajectories/{trajectory_id:path}", trajectory_page, "trajectoryPage",
        "One trajectory: states, segments, digest binding and its check",
        roles=ANYONE, query=TrajectoryQuery, errors=(404, 409),
    ),
    viewer_page(
        "/sessions/{session_id}/trajectory", session_trajectory, "sessionTrajectoryPage",
        "A session's trajectory: states, segments, digest binding and its check",
        roles=ANYONE, query=TrajectoryQuery, errors=(404, 409),
    ),
)  # fmt: skip
