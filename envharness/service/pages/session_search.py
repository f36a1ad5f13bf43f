"""Finding sessions in the Sessions list: search, filters, sort and paging as GET parameters.

Everything is in the URL, so a filtered list can be bookmarked and shared and works without
JavaScript. Every session considered is one the caller may see (``Access.sessions``), and the
facts searched are read only for those, so neither a match nor a count says anything about a
session the caller may not see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal
from urllib.parse import urlencode

import msgspec

from envharness.records import Status
from envharness.service.access import Access
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.layout import status_badge, when
from envharness.service.pages.widgets import table
from envharness.service.problems import HTTPProblem
from envharness.service.search import Found, Order, Passed, SessionSearch, Sort, find_sessions

__all__ = [
    "SessionsPageQuery",
    "compare_hidden",
    "compare_note",
    "find_listed",
    "found_table",
    "human_title",
    "no_results",
    "order_line",
    "page_href",
    "result_cell",
    "search_form",
]

MAX_SEARCH = 200


class SessionsPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    q: Annotated[
        str,
        msgspec.Meta(
            max_length=MAX_SEARCH,
            description="Words that must all appear in the scenario, a participant, the "
            "environment or the experiment; or the start of a session id.",
        ),
    ] = ""
    status: Annotated[
        Status | Literal[""], msgspec.Meta(description="Only this status (empty: any).")
    ] = ""
    experiment: Annotated[str, msgspec.Meta(description="Only this experiment's id.")] = ""
    passed: Annotated[
        Passed | Literal[""],
        msgspec.Meta(description="yes, no, or none (no verdict): by the latest score."),
    ] = ""
    sort: Annotated[Sort, msgspec.Meta(description="What to order by.")] = "created"
    order: Annotated[Order, msgspec.Meta(description="desc (most first) or asc.")] = "desc"
    page: Annotated[int, msgspec.Meta(ge=1, description="Page number, from 1.")] = 1
    compare: Annotated[
        list[str], msgspec.Meta(description="Session ids ticked to compare; exactly two.")
    ] = []


def search_of(query: SessionsPageQuery) -> SessionSearch:
    return SessionSearch(
        q=query.q,
        status=query.status,
        experiment=query.experiment,
        passed=query.passed,
        sort=query.sort,
        order=query.order,
    )


async def find_listed(query: SessionsPageQuery, access: Access) -> tuple[list[Found], list[Found]]:
    """The sessions the caller may see, and those the query keeps; a 422 for an experiment
    that is not among the caller's (the same answer whether it exists or not)."""
    everything, kept = await find_sessions(search_of(query), access)
    known = {found.info.experiment_id for found in everything if found.info.experiment_id}
    if query.experiment and query.experiment not in known:
        raise HTTPProblem(
            422,
            f"query parameter 'experiment': no experiment {query.experiment!r} among those you "
            "may see; /experiments lists them (give the exact id)",
            parameter="experiment",
        )
    return everything, kept


# -- what the list shows ----------------------------------------------------------------------


def human_title(found: Found) -> Html:
    """scenario · participants · experiment: what a person recognises a session by."""
    parts = [html("<b>{s}</b>", s=found.info.scenario_id)]
    if found.facts is not None and found.facts.participants:
        parts.append(html("{p}", p=", ".join(found.facts.participants)))
    if found.info.experiment_id is not None:
        parts.append(html("{e}", e=found.experiment_name or found.info.experiment_id))
    else:
        parts.append(Html('<span class="muted">standalone</span>'))
    return html('<span class="search-title">{t}</span>', t=join(parts, " · "))


def result_cell(found: Found) -> Html:
    """The latest score's verdict and its first metric (the one the report leads with)."""
    facts = found.facts
    if facts is None or not facts.scored:
        return Html('<span class="tag tag-plain">no verdict</span>')
    label, css = {
        True: ("passed", "tag-ok"),
        False: ("not passed", "tag-blocked"),
        None: ("no verdict", "tag-plain"),
    }[facts.passed]
    metric = Html("")
    if facts.metrics:
        name, value = next(iter(facts.metrics.items()))
        metric = html(
            ' <span class="search-metric"><span class="muted">{n}</span> {v}</span>',
            n=name,
            v=number(value),
        )
    return html('<span class="tag {css}">{label}</span>{metric}', css=css, label=label,
                metric=metric)  # fmt: skip


def query_pairs(query: SessionsPageQuery, **changes: object) -> list[tuple[str, str]]:
    """The query's filters as URL parameters (defaults left out), with ``changes`` applied."""
    values: dict[str, object] = {
        "q": query.q,
        "status": query.status,
        "experiment": query.experiment,
        "passed": query.passed,
        "sort": "" if query.sort == "created" else query.sort,
        "order": "" if query.order == "desc" else query.order,
        "page": "" if query.page == 1 else query.page,
    }
    values.update(changes)
    return [(name, str(value)) for name, value in values.items() if value not in ("", None, 1)]


def page_href(query: SessionsPageQuery, **changes: object) -> str:
    pairs = query_pairs(query, **changes)
    return "/sessions" + ("?" + urlencode(pairs) if pairs else "")


def search_form(
    query: SessionsPageQuery, everything: Sequence[Found], experiments: dict[str, str], full: bool
) -> Html:
    """The search box and filters: a plain GET form, so the result is a shareable URL."""
    statuses = sorted({found.info.status for found in everything} | {query.status} - {""})
    shown_experiments = sorted(
        {found.info.experiment_id for found in everything if found.info.experiment_id}
    )
    fields = [
        html(
            '<label class="search-q">Search <input type="search" name="q" value="{q}" '
            'placeholder="scenario, participant, environment, experiment or ses_…"></label>',
            q=query.q,
        ),
        _select("Status", "status", query.status, [("", "any"), *((s, s) for s in statuses)]),
        _select(
            "Experiment",
            "experiment",
            query.experiment,
            [("", "any"), *((e, experiments.get(e, e)) for e in shown_experiments)],
        ),
    ]
    if full:
        fields.append(
            _select(
                "Result",
                "passed",
                query.passed,
                [("", "any"), ("yes", "passed"), ("no", "not passed"), ("none", "no verdict")],
            )
        )
    fields.append(
        _select(
            "Sort by",
            "sort",
            query.sort,
            [("created", "created"), ("updated", "last record"), ("turns", "turns")],
        )
    )
    fields.append(
        _select("Order", "order", query.order, [("desc", "descending"), ("asc", "ascending")])
    )
    clear = Html(' <a href="/sessions">clear</a>') if query_pairs(query, page="") else ""
    return html(
        '<form class="card search-form" method="get" action="/sessions" role="search">'
        '{fields}<button type="submit">Find</button>{clear}</form>',
        fields=join(fields),
        clear=clear,
    )


def _select(label: str, name: str, chosen: str, options: list[tuple[str, str]]) -> Html:
    return html(
        '<label>{label} <select name="{name}">{options}</select></label>',
        label=label,
        name=name,
        options=join(
            html(
                '<option value="{v}"{sel}>{t}</option>',
                v=value,
                t=text,
                sel=" selected" if value == chosen else "",
            )
            for value, text in options
        ),
    )


def order_line(query: SessionsPageQuery) -> str:
    """The page's subtitle: how the listed sessions are grouped and ordered."""
    order = {
        ("created", "desc"): "newest first",
        ("created", "asc"): "oldest first",
        ("updated", "desc"): "most recently active first",
        ("updated", "asc"): "least recently active first",
        ("turns", "desc"): "most turns first",
        ("turns", "asc"): "fewest turns first",
    }[(query.sort, query.order)]
    return f"Grouped by experiment; standalone sessions last. {order.capitalize()}."


def compare_note(chosen: Sequence[str]) -> Html:
    """Why "compare selected" did not open the Compare page (anything but two sessions)."""
    if not chosen:
        return Html("")
    return html(
        '<div class="callout warn search-compare-note">Compare takes exactly two sessions; '
        "{n} {were} ticked. Tick two and press <b>Compare selected</b>.</div>",
        n=len(chosen),
        were="was" if len(chosen) == 1 else "were",
    )


def no_results(query: SessionsPageQuery) -> Html:
    return html(
        '<p class="empty-state search-empty">No session matches {what}. '
        '<a href="/sessions">Show every session</a>.</p>',
        what=html("“{q}” with these filters", q=query.q) if query.q else "these filters",
    )


def compare_hidden(query: SessionsPageQuery) -> Html:
    """The filters, kept in the compare form so a refused choice shows the same list."""
    return join(
        html('<input type="hidden" name="{n}" value="{v}">', n=name, v=value)
        for name, value in query_pairs(query)
    )


def checkbox(found: Found, chosen: Sequence[str]) -> Html:
    return html(
        '<input type="checkbox" class="search-pick" name="compare" value="{id}" '
        'form="search-compare" aria-label="compare {id}"{on}>',
        id=found.info.id,
        on=" checked" if found.info.id in chosen else "",
    )


def found_table(rows: Sequence[Found], full: bool, chosen: Sequence[str]) -> Html:
    """The listed sessions: a box to tick for Compare, the id and a human title, the result."""
    body = (
        html(
            '<tr><td class="search-pick-cell">{box}</td><td><a class="mono" href="/sessions/{id}">'
            '{id}</a><div class="small">{title}</div></td><td>{status}</td>{result}'
            '<td class="num">{turns}</td><td class="num">{records}</td><td>{created}</td>'
            "<td>{updated}</td></tr>",
            box=checkbox(found, chosen),
            id=found.info.id,
            title=human_title(found),
            status=status_badge(found.info.status),
            result=html("<td>{r}</td>", r=result_cell(found)) if full else "",
            turns=found.info.turns_completed,
            records=f"{found.info.records:,}" if full else DASH,
            created=when(found.info.created_at),
            updated=when(found.info.updated_at),
        )
        for found in rows
    )
    head = html(
        '<th><span class="search-sr">Compare</span></th><th>Session</th><th>Status</th>{result}'
        '<th class="num">Turns</th><th class="num">Records</th><th>Created (UTC)</th>'
        "<th>Last record (UTC)</th>",
        result=Html("<th>Result</th>") if full else "",
    )
    return table(head, body, css="table search-results")
