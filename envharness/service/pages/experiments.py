"""The Experiments destination: the list of experiments, and one experiment's page.

An experiment's page shows what its sessions share — the configuration frozen when it
started — where each session stands, as a scenarios x trials grid whose cells link to the
sessions, what they spent, and what was frozen from them (:mod:`.frozen_view`). While the
experiment runs, ``viewer.js`` follows its event stream from the position the page was rendered
at and updates the cells, the counts and the status in place; when a session ends it fetches
the page again for the cells' verdicts and turn counts and the results card, which only the
server draws (what was spent is as of the page's rendering).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.records import ExperimentConfig, Status
from envharness.scoring import experiment_report
from envharness.scoring.aggregates import ScoreAggregate
from envharness.service.http.experiments import experiment_config
from envharness.service.pages.config_view import (
    environment_settings,
    operations_table,
    version_settings,
)
from envharness.service.pages.frozen_view import frozen_card
from envharness.service.pages.html import DASH, Html, html, join, json_block, number, value
from envharness.service.pages.layout import is_terminal, page, status_badge, when
from envharness.service.pages.results_view import (
    headline,
    latest_scores,
    rate_class,
    results_card,
    session_verdicts,
    verdict_of,
)
from envharness.service.pages.spent_view import (
    COST_HEAD,
    budget_tag,
    cost_cells,
    duration,
    money,
    spent_card,
)
from envharness.service.pages.store import empty_store
from envharness.service.pages.widgets import detail_head, kv_card, page_head, status_listing, table
from envharness.service.params import NoParameters
from envharness.service.routing import ANYONE, Call, Endpoint, viewer_page
from envharness.service.spending import ExperimentSpent, experiment_spent
from envharness.service.wire.sessions import CostsOut, ExperimentSessionOut
from envharness.store import ExperimentInfo, SessionCounts

__all__ = ["EXPERIMENT_PAGES", "counts_bar"]

EXPERIMENTS_PER_PAGE = 100
BAR_ORDER: tuple[str, ...] = (
    "completed", "failed", "stopped", "interrupted", "running", "paused", "created",
)  # fmt: skip
"""The order of a counts bar's segments (``viewer.js`` draws them the same way)."""
SHOWN_COUNTS: tuple[str, ...] = ("running", "completed", "failed", "stopped", "interrupted")
"""Statuses the experiment page always counts; others appear when a session has them."""
COST_ROWS = 10
"""Sessions the Spent card lists (the most expensive), as ``experiments show`` does."""


class ExperimentsPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    status: Annotated[Status | None, msgspec.Meta(description="Only this status.")] = None
    page: Annotated[int, msgspec.Meta(ge=1, description="Page number, from 1.")] = 1


async def experiments_page(call: Call[ExperimentsPageQuery]) -> Response:
    query = call.query
    access = call.access
    everything = await access.experiments()
    listing = status_listing(
        everything, query.status, query.page, base="/experiments", noun="experiments",
        per_page=EXPERIMENTS_PER_PAGE,
    )  # fmt: skip
    full = access.sees_everything
    results: dict[str, ScoreAggregate | None] = {}
    if full:  # scores are session-level records: a participant's list has no result columns
        for info in listing.shown:
            results[info.id] = headline(await latest_scores(call.service.store, info.id))
    rows = (
        html(
            '<tr><td><a href="/experiments/{id}"><b>{name}</b></a>'
            '<div class="mono muted small">{id}</div></td><td>{status}</td>'
            '<td class="progress-cell">{bar}<span class="muted small">{progress}</span></td>'
            "{results}<td>{created}</td><td>{updated}</td></tr>",
            id=info.id,
            name=info.name,
            status=status_badge(info.status),
            bar=counts_bar(info.sessions, info.total if full else None),
            progress=_progress(info, full),
            results=_result_cells(results.get(info.id)) if full else "",
            created=when(info.created_at),
            updated=when(info.updated_at),
        )
        for info in listing.shown
    )
    found = table(
        html(
            "<th>Experiment</th><th>Status</th><th>Sessions</th>{results}<th>Created (UTC)</th>"
            "<th>Last record (UTC)</th>",
            results=Html(
                '<th>Passed</th><th class="num" title="The first metric of the first score '
                'version, by name">Main metric</th>'
            )
            if full
            else "",
        ),
        rows,
    )
    if not listing.shown:
        if everything:
            found = Html('<p class="empty-state">No experiment has this status.</p>')
        elif await access.sessions():
            found = Html(
                '<p class="empty-state">No experiments yet: every session here is standalone. '
                "<code>harness.experiment(name, scenarios, trials=…)</code> runs one.</p>"
            )
        else:
            found = empty_store()
    what = (
        "The experiments you have sessions in, newest first."
        if not full
        else "Each expands one frozen configuration over scenarios \u00d7 trials. Newest first."
    )
    body = html(
        '{head}{filters}<section class="card">{table}</section>{pager}',
        head=page_head("Experiments", what),
        filters=listing.filters,
        table=found,
        pager=listing.pager,
    )
    return page(call.service, call.principal, title="Experiments", body=body, active="experiments")


def _result_cells(found: ScoreAggregate | None) -> Html:
    """Pass count and the main metric's mean (see ``results_view.main_result``)."""
    rate = found.pass_rate if found is not None else None
    passed = Html('<td class="muted">no verdict</td>')
    if rate is not None:
        passed = html(
            '<td><span class="results-rate {v}" data-passed="{k}" data-judged="{n}">'
            "{k} / {n}</span></td>",
            v=rate_class(rate),
            k=rate.passed,
            n=rate.judged,
        )
    metric = found.metrics[0] if found is not None and found.metrics else None
    mean = html('<td class="num">{m}</td>', m=DASH)
    if metric is not None:
        mean = html(
            '<td class="num">{mean} <span class="muted small">{name}</span></td>',
            mean=number(metric.mean),
            name=metric.name,
        )
    return join([passed, mean])


def _progress(info: ExperimentInfo, full: bool) -> str:
    recorded = info.sessions.recorded
    ended = info.sessions.ended
    if full:
        return f"{ended} of {info.total} ended" + (
            f", {recorded - ended} running" if recorded > ended else ""
        )
    return f"{ended} of your {recorded} ended"


def counts_bar(counts: SessionCounts, total: int | None) -> Html:
    """Sessions by status as one stacked bar, scaled to ``total`` (planned) when known.

    An SVG with plain attributes, not inline styles: the viewer's Content-Security-Policy
    admits only this server's own stylesheet.
    """
    recorded = counts.recorded
    scale = max(total or 0, recorded, 1)
    segments = []
    x = 0
    for status in BAR_ORDER:  # every status, even at width 0: viewer.js only resizes them
        n = getattr(counts, status)
        segments.append(
            html(
                '<rect class="seg-{status}" data-status="{status}" x="{x}" width="{n}" '
                'height="1"><title>{n} {status}</title></rect>',
                status=status,
                x=x,
                n=n,
            )
        )
        x += n
    label = ", ".join(
        f"{getattr(counts, status)} {status}" for status in BAR_ORDER if getattr(counts, status)
    )
    return html(
        '<svg class="bar" viewBox="0 0 {scale} 1" preserveAspectRatio="none" role="img" '
        'aria-label="{label}" data-total="{scale}">{segments}</svg>',
        scale=scale,
        label=label or "no sessions yet",
        segments=join(segments),
    )


async def experiment_page(call: Call[NoParameters]) -> Response:
    access = call.access
    # The position first: whatever commits after it reaches the page through its stream.
    position = await call.service.store.last_position()
    info = await access.experiment(call.path("experiment_id"))
    found = await access.experiment_sessions(info.id)
    spent = await experiment_spent(access, info.id, [member.session for member in found])
    members = [
        msgspec.structs.replace(access.experiment_session(m), costs=spent.sessions[m.session.id])
        for m in found
    ]
    config = await experiment_config(access, info.id)
    full = access.sees_everything
    live = Html("")
    if not is_terminal(info.status):
        live = html(' data-live-experiment="{id}" data-after="{pos}"', id=info.id, pos=position)
    verdicts: dict[str, bool | None] | None = None
    parts: list[Html] = []
    # Scores and findings are session-level: withheld from a participant (whose config is
    # None). A reader's is None only for a damaged chain, which `verify` explains.
    if config is not None:
        report = await experiment_report(call.service.store, info.id)
        verdicts = session_verdicts(await latest_scores(call.service.store, info.id))
        parts.append(results_card(report))
    parts += [
        _stats(info, full),
        _grid(info, config, members, verdicts),
        _spent(spent, members, full),
    ]
    if config is not None:
        parts.append(await frozen_card(call.service.store, info.id, len(members)))
        parts.append(_configuration(config))
    else:
        parts.append(
            html(
                '<section class="card"><h2>Your part</h2><p>As participant <b>{p}</b> you see '
                "your own sessions of this experiment. Its configuration, and the sessions of "
                "others, are not shown to a participant.</p></section>",
                p=access.principal.participant or "",
            )
        )
    body = html(
        '<div class="experiment"{live}>{head}{parts}</div>',
        live=live,
        head=_head(info, config),
        parts=join(parts),
    )
    return page(call.service, call.principal, title=info.name, body=body, active="experiments")


def _head(info: ExperimentInfo, config: ExperimentConfig | None) -> Html:
    facts = [html('<span class="mono">{id}</span>', id=info.id)]
    if config is not None:
        facts += [
            html(
                "<b>{s}</b> scenario{ps} &times; <b>{t}</b> trial{pt}",
                s=len(config.scenarios),
                ps="" if len(config.scenarios) == 1 else "s",
                t=config.trials,
                pt="" if config.trials == 1 else "s",
            ),
            html("{n} turns each", n=config.turns),
            html("seed <b>{seed}</b>", seed=config.seed),
        ]
    facts += [
        html("created {t}", t=when(info.created_at)),
        html("last record {t}", t=when(info.updated_at)),
    ]
    reason = Html("")
    budget = Html("")
    if info.reason and config is not None:  # a participant sees neither
        reason = html('<p class="facts muted">{r}</p>', r=info.reason)
        budget = budget_tag(info.status, info.reason)
    return detail_head(
        [("/experiments", "Experiments")],
        html('{name} <span id="experiment-status">{badge}</span>{budget}', name=info.name,
             badge=status_badge(info.status), budget=budget),
        facts,
        reason,
    )  # fmt: skip


def _stats(info: ExperimentInfo, full: bool) -> Html:
    counts = info.sessions
    recorded = html(
        '<div class="stat"><div class="stat-n"><span data-count="recorded">{n}</span>{of}</div>'
        '<div class="stat-l">{label}</div></div>',
        n=counts.recorded,
        of=html('<span class="of"> / {t}</span>', t=info.total) if full else "",
        label="Sessions" if full else "Your sessions",
    )
    shown = [
        *SHOWN_COUNTS,
        *(status for status in ("created", "paused") if getattr(counts, status)),
    ]
    stats = [
        html(
            '<div class="stat"><div class="stat-n status-{status}{zero}" data-count="{status}">'
            '{n}</div><div class="stat-l">{label}</div></div>',
            status=status,
            zero="" if getattr(counts, status) else " zero",
            n=getattr(counts, status),
            label=status.capitalize(),
        )
        for status in shown
    ]
    return html(
        '<div class="stats">{recorded}{stats}</div>'
        '<div class="bar-wrap" id="experiment-bar">{bar}</div>',
        recorded=recorded,
        stats=join(stats),
        bar=counts_bar(counts, info.total if full else None),
    )


def _grid(
    info: ExperimentInfo,
    config: ExperimentConfig | None,
    members: list[ExperimentSessionOut],
    verdicts: dict[str, bool | None] | None,
) -> Html:
    """Scenarios (in the configuration's order) by trials; a participant's grid has only the
    rows and columns of its own sessions."""
    scenarios = [scenario.id for scenario in config.scenarios] if config is not None else []
    for member in members:
        if member.scenario_id not in scenarios:
            scenarios.append(member.scenario_id)
    trials = config.trials if config is not None else 0
    trials = max([trials, *((member.trial or 0) + 1 for member in members)])
    cells: dict[tuple[str, int], list[ExperimentSessionOut]] = {}
    for member in members:
        cells.setdefault((member.scenario_id, member.trial or 0), []).append(member)
    waiting = "never ran" if is_terminal(info.status) else "not started"
    planned = config.turns if config is not None else None
    head = join(html('<th class="trial">Trial {n}</th>', n=trial) for trial in range(trials))
    rows = join(
        html(
            '<tr><th scope="row" class="mono">{scenario}</th>{cells}</tr>',
            scenario=scenario,
            cells=join(
                html(
                    '<td class="cell" data-scenario="{scenario}" data-trial="{trial}">{runs}</td>',
                    scenario=scenario,
                    trial=trial,
                    runs=join(
                        _run(member, verdict_of(verdicts, member.id), planned)
                        for member in cells.get((scenario, trial), [])
                    )
                    or html('<span class="run pending">{w}</span>', w=waiting),
                )
                for trial in range(trials)
            ),
        )
        for scenario in scenarios
    )
    if not scenarios:
        return Html(
            '<section class="card"><h2>Sessions</h2><p class="muted">No session has started '
            "yet.</p></section>"
        )
    return html(
        '<section class="card"><div class="card-head"><h2>Sessions by scenario and trial</h2>'
        '<span class="muted">each cell links to its session · <a href="/trajectories?'
        'experiment={id}">their trajectories →</a></span></div>'
        '<div class="matrix-wrap"><table class="table matrix" id="experiment-grid"><thead><tr>'
        "<th>Scenario</th>{head}</tr></thead><tbody>{rows}</tbody></table></div></section>",
        id=info.id,
        head=head,
        rows=rows,
    )


_VERDICTS = {"passed": "passed", "failed": "not passed", "none": "no verdict", "withheld": ""}


def _run(member: ExperimentSessionOut, verdict: str, planned: int | None) -> Html:
    """One session in its cell, coloured by its verdict (passed, not passed, no verdict) with
    its status a small mark beside it: a completed session that failed its checks must not look
    like one that passed. The tooltip holds what this reader may know of it."""
    facts = [member.id, f"trial {member.trial}", f"{member.turns_completed} turns"]
    if member.seed is not None:
        facts.insert(2, f"seed {member.seed}")
    if member.costs is not None and member.costs.calls:
        facts.append(_spent_fact(member.costs))
    if member.reason is not None:
        facts.append(member.reason)
    label = _VERDICTS[verdict]
    turn = f"turn {member.turns_completed}" + (f"/{planned}" if planned is not None else "")
    return html(
        '<a class="run" href="/sessions/{id}" data-session="{id}" data-status="{status}" '
        'data-verdict="{verdict}" title="{title}">{label}{badge}{budget}'
        '<span class="run-id mono">{short}</span>'
        '<span class="results-turn muted small">{turn}</span></a>',
        verdict=verdict,
        label=html('<span class="results-verdict">{v}</span>', v=label) if label else "",
        turn=turn,
        id=member.id,
        status=member.status,
        title=" · ".join(facts),
        badge=status_badge(member.status),
        budget=budget_tag(member.status, member.reason),
        short="…" + member.id[-6:],
    )


def _spent_fact(costs: CostsOut) -> str:
    usd = f" · {money(costs)}" if costs.priced else ""
    return f"{costs.tokens:,} tokens{usd} in {costs.calls:,} call{'' if costs.calls == 1 else 's'}"


def _spent(spent: ExperimentSpent, members: list[ExperimentSessionOut], full: bool) -> Html:
    """The experiment's totals, and its most expensive sessions (a participant's: its own
    calls in its own sessions, without wall time)."""
    costs = spent.total
    if not costs.calls:
        return spent_card(costs, title="Spent" if full else "Your spending", ran="ran")
    placed = {member.id: member for member in members}
    ranked = spent.most_expensive()
    wall_head = Html('<th class="num">Wall time</th>') if full else Html("")
    rows = [_cost_row(placed[sid], its) for sid, its in ranked[:COST_ROWS]]
    more = Html("")
    if len(ranked) > COST_ROWS:
        more = html(
            '<p class="muted small">… {n} more: <code>envharness experiments show --json</code> '
            "and the API (<code>costs</code> of each session) list every one.</p>",
            n=len(ranked) - COST_ROWS,
        )
    below = html(
        "<h3>{what}</h3>{table}{more}",
        what="The most expensive sessions" if full else "Your sessions",
        table=table(
            html(
                "<th>Session</th><th>Scenario</th><th>Trial</th><th>Status</th>{head}{wall}",
                head=COST_HEAD,
                wall=wall_head,
            ),
            rows,
            css="table compact",
        ),
        more=more,
    )
    if full:
        return spent_card(costs, title="Spent", ran="how long it ran", below=below)
    own = Html(
        '<p class="muted small">Your own calls only: what the others spent, and how long the '
        "sessions ran, is about everyone.</p>"
    )
    return spent_card(costs, title="Your spending", ran="", below=join([below, own]))


def _cost_row(member: ExperimentSessionOut, costs: CostsOut) -> Html:
    wall = Html("")
    if costs.wall_seconds is not None:
        wall = html('<td class="num">{w}</td>', w=duration(costs.wall_seconds))
    return html(
        '<tr><td><a class="mono" href="/sessions/{id}">{id}</a></td><td class="mono">{scenario}'
        "</td><td>{trial}</td><td>{badge}{budget}</td>{cells}{wall}</tr>",
        id=member.id,
        scenario=member.scenario_id,
        trial=DASH if member.trial is None else member.trial,
        badge=status_badge(member.status),
        budget=budget_tag(member.status, member.reason),
        cells=cost_cells(costs),
        wall=wall,
    )


def _configuration(config: ExperimentConfig) -> Html:
    settings = [
        *environment_settings(config.environment),
        ("Turns per session", str(config.turns)),
        ("Trials per scenario", str(config.trials)),
        ("Experiment seed", f"{config.seed} (each session's is derived from it)"),
        ("Max concurrency", str(config.max_concurrency)),
        *version_settings(config),
    ]
    participants = table(
        Html("<th>Name</th><th>Role</th><th>Implementation</th>"),
        (
            html(
                '<tr><td><b>{name}</b></td><td>{role}</td><td class="mono">{impl}</td></tr>',
                name=name,
                role=ref.role,
                impl=ref.implementation,
            )
            for name, ref in config.participants.items()
        ),
    )
    scenarios = table(
        Html("<th>Scenario</th><th>Input</th><th>Reference</th><th>Metadata</th>"),
        (
            html(
                '<tr><td class="mono">{id}</td><td>{input}</td><td>{reference}</td>'
                "<td>{metadata}</td></tr>",
                id=scenario.id,
                input=value(scenario.input),
                reference=value(scenario.reference),
                metadata=value(scenario.metadata),
            )
            for scenario in config.scenarios
        ),
    )
    return html(
        '<h2 class="section-title">Configuration shared by every session</h2>'
        '<div class="columns">{run}<section class="card"><h2>Participants</h2>{participants}'
        "<h3>Operations</h3>{operations}</section></div>"
        '<section class="card"><h2>Scenarios</h2>{scenarios}</section>'
        '<details class="card raw"><summary>The frozen configuration as recorded (JSON)'
        "</summary>{raw}</details>",
        run=kv_card("Run", settings),
        participants=participants,
        operations=operations_table(config.operations),
        scenarios=scenarios,
        raw=json_block(msgspec.to_builtins(config), limit=None),
    )


EXPERIMENT_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/experiments", experiments_page, "experimentsPage",
        "Experiments, newest first, with their sessions by status",
        roles=ANYONE, query=ExperimentsPageQuery, errors=(404, 422),
    ),
    viewer_page(
        "/experiments/{experiment_id}", experiment_page, "experimentPage",
        "An experiment: shared configuration, scenarios x trials grid, live counts",
        roles=ANYONE, errors=(404,),
    ),
)  # fmt: skip
