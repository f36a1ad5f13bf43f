"""Store-wide viewer pages — Overview, Sessions, Verify — and the page shown for an error.

Every page reads through the caller's :class:`~envharness.service.access.Access`, the same as
the JSON API: a participant's pages are built from a participant's query.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from envharness.service.auth import Principal
from envharness.service.pages.html import DASH, Html, html, join
from envharness.service.pages.layout import page, status_badge, when
from envharness.service.pages.session_search import (
    SessionsPageQuery,
    compare_hidden,
    compare_note,
    find_listed,
    found_table,
    no_results,
    order_line,
    page_href,
    search_form,
)
from envharness.service.pages.widgets import page_head, page_slice, pager, table
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import ANYONE, READERS, Call, Endpoint, viewer_page
from envharness.service.search import Found
from envharness.service.state import Service
from envharness.service.wire.sessions import SessionSummary

__all__ = ["STORE_PAGES", "empty_store", "problem_page", "session_table"]

SESSIONS_PER_PAGE = 100
RECENT = 8


async def overview(call: Call[NoParameters]) -> Response:
    access = call.access
    found = await access.sessions()
    statuses = Counter(info.status for info in found)
    full = access.sees_everything
    experiments = await access.experiments()
    stats = [
        _stat("Experiments", f"{len(experiments):,}", "/experiments"),
        _stat("Sessions", f"{len(found):,}", "/sessions"),
        *(
            _stat(status.capitalize(), f"{statuses[status]:,}", f"/sessions?status={status}",
                  css=f"status-{status}")
            for status in ("running", "completed", "failed", "stopped", "interrupted")
            if statuses[status]
        ),
    ]  # fmt: skip
    if full:
        stats.insert(2, _stat("Records", f"{sum(info.records for info in found):,}", None))
    recent = sorted(found, key=lambda info: (info.updated_at, info.id), reverse=True)[:RECENT]
    integrity = Html("")
    if full:
        integrity = Html(
            '<section class="card"><h2>Integrity</h2><p>Every record is sha256-chained to the '
            "one before it. Re-check every chain, the session index and the stored states "
            'and artifacts.</p><p><a class="button" href="/verify">Verify the store</a></p>'
            "</section>"
        )
    body = html(
        '{head}<div class="stats">{stats}</div>'
        '<section class="card"><div class="card-head"><h2>Recently active</h2>'
        '<a href="/sessions">All sessions →</a></div>{recent}</section>{integrity}',
        head=page_head("Overview", _scope_line(call.principal)),
        stats=join(stats),
        recent=session_table([access.summary(info) for info in recent])
        if recent
        else empty_store(),
        integrity=integrity,
    )
    return page(call.service, call.principal, title="Overview", body=body, active="overview")


async def sessions(call: Call[SessionsPageQuery]) -> Response:
    query = call.query
    access = call.access
    if len(query.compare) == 2:
        left, right = query.compare
        return RedirectResponse(
            "/compare?" + urlencode({"left": left, "right": right}), status_code=303
        )
    everything, kept = await find_listed(query, access)
    shown, pages = page_slice(kept, query.page, SESSIONS_PER_PAGE, "sessions")
    names = {experiment.id: experiment.name for experiment in await access.experiments()}
    full = access.sees_everything
    groups: dict[str | None, list[Found]] = {}
    for found in shown:
        groups.setdefault(found.info.experiment_id, []).append(found)
    sections = [
        html(
            '<section class="card"><div class="card-head"><h2>{title}</h2>'
            '<span class="muted">{n} session{s}</span></div>{table}</section>',
            title=_group_title(experiment, names),
            n=len(members),
            s="" if len(members) == 1 else "s",
            table=found_table(members, full, query.compare),
        )
        for experiment, members in sorted(groups.items(), key=lambda item: item[0] is None)
    ]
    if not everything:
        sections = [html('<section class="card">{empty}</section>', empty=empty_store())]
    elif not kept:
        sections = [html('<section class="card">{empty}</section>', empty=no_results(query))]
    compare = Html("")
    if kept:
        compare = html(
            '<form id="search-compare" class="search-compare" method="get" action="/sessions">'
            '{hidden}<button type="submit">Compare selected</button> <span class="muted small">'
            "tick two sessions</span></form>",
            hidden=compare_hidden(query),
        )
    body = html(
        "{head}{form}{note}{count}{compare}{sections}{pager}",
        head=page_head("Sessions", order_line(query)),
        form=search_form(query, everything, names, full),
        note=compare_note(query.compare),
        count=html(
            '<p class="muted search-count">{n} of {total} sessions</p>',
            n=f"{len(kept):,}",
            total=f"{len(everything):,}",
        ),
        compare=compare,
        sections=join(sections),
        pager=pager(query.page, pages, lambda n: page_href(query, page=n)),
    )
    return page(call.service, call.principal, title="Sessions", body=body, active="sessions")


async def verify_page(call: Call[NoParameters]) -> Response:
    report = await call.service.store.verify()
    if report.ok:
        verdict = html(
            '<div class="callout ok"><b>Intact.</b> {sessions} sessions and {records} records '
            "verified: every hash chain, head, state blob and artifact checks out.</div>",
            sessions=f"{report.sessions:,}",
            records=f"{report.records:,}",
        )
    else:
        rows = (
            html(
                '<tr><td><a class="mono" href="/sessions/{sid}">{sid}</a></td>'
                "<td>{seq}</td><td>{problem}</td></tr>",
                sid=found.session_id,
                seq=found.seq if found.seq is not None else DASH,
                problem=found.problem,
            )
            for found in report.breaks
        )
        verdict = html(
            '<div class="callout bad"><b>{n} problem(s)</b> in {sessions} sessions and '
            "{records} records.</div>{table}",
            n=len(report.breaks),
            sessions=f"{report.sessions:,}",
            records=f"{report.records:,}",
            table=table(Html("<th>Session</th><th>Seq</th><th>Problem</th>"), rows),
        )
    body = html(
        '{head}<section class="card">{verdict}</section>',
        head=page_head("Verify", "Re-checked just now, from the stored bytes."),
        verdict=verdict,
    )
    return page(call.service, call.principal, title="Verify", body=body, active="overview")


def session_table(found: list[SessionSummary]) -> Html:
    rows = (
        html(
            '<tr><td><a class="mono" href="/sessions/{id}">{id}</a></td><td>{scenario}</td>'
            '<td>{status}</td><td class="num">{turns}</td><td class="num">{records}</td>'
            "<td>{created}</td><td>{updated}</td></tr>",
            id=info.id,
            scenario=info.scenario_id,
            status=status_badge(info.status),
            turns=info.turns_completed,
            records=f"{info.records:,}" if info.records is not None else DASH,
            created=when(info.created_at),
            updated=when(info.updated_at),
        )
        for info in found
    )
    head = Html(
        '<th>Session</th><th>Scenario</th><th>Status</th><th class="num">Turns</th>'
        '<th class="num">Records</th><th>Created (UTC)</th><th>Last record (UTC)</th>'
    )
    return table(head, rows)


def problem_page(
    request: Request, service: Service, principal: Principal | None, problem: HTTPProblem
) -> Response:
    """An error as a page. A missing credential shows how to sign in, nothing more."""
    if problem.status == 401:
        body = Html(
            '<div class="signin card"><h1>Sign in to the viewer</h1>'
            "<p>The viewer opens through the one-time link that <code>envharness serve</code> "
            "prints when it starts (<code>--open</code> follows it for you). The link works "
            "once, for a few minutes; restart <code>serve</code> for a fresh one.</p>"
            "<p>Scripts use a bearer token instead: "
            "<code>envharness --store PATH token issue --role viewer</code>.</p></div>"
        )
        title = "Sign in"
    else:
        body = html(
            '<div class="card problem"><h1>{status}</h1><p>{message}</p>'
            '<p><a href="/">Back to the overview</a></p></div>',
            status=_REASONS.get(problem.status, f"Error {problem.status}"),
            message=problem.message,
        )
        title = _REASONS.get(problem.status, "Error")
    response = page(service, principal, title=title, body=body, status=problem.status)
    response.headers.update(problem.headers)
    return response


_REASONS = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    422: "Bad parameter",
    503: "Store unavailable",
}


def _scope_line(principal: Principal | None) -> str:
    if principal is not None and principal.role == "participant":
        return f"The sessions participant {principal.participant} takes part in."
    return "Every session in this store."


def _stat(label: str, number: str, link: str | None, css: str = "") -> Html:
    inner = html(
        '<div class="stat-n {css}">{n}</div><div class="stat-l">{label}</div>',
        css=css,
        n=number,
        label=label,
    )
    if link is None:
        return html('<div class="stat">{inner}</div>', inner=inner)
    return html('<a class="stat" href="{link}">{inner}</a>', link=link, inner=inner)


def _group_title(experiment: str | None, names: dict[str, str]) -> Html:
    if experiment is None:
        return Html("Standalone sessions")
    return html(
        'Experiment <a href="/experiments/{id}">{name}</a> <span class="mono muted small">{id}'
        "</span>",
        id=experiment,
        name=names.get(experiment, experiment),
    )


def empty_store() -> Html:
    return Html(
        '<p class="empty-state">No sessions yet. <code>envharness --store PATH quickstart</code> '
        "writes a synthetic store to explore.</p>"
    )


STORE_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/", overview, "overviewPage",
        "Overview: counts by status, recently active sessions",
        roles=ANYONE,
    ),
    viewer_page(
        "/sessions", sessions, "sessionsPage",
        "Sessions grouped by experiment, standalone ones last",
        roles=ANYONE, query=SessionsPageQuery, errors=(404, 422),
    ),
    viewer_page(
        "/verify", verify_page, "verifyPage",
        "Re-check every hash chain and show the result",
        roles=READERS,
    ),
)  # fmt: skip
