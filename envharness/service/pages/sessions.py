"""A session's Overview, Configuration and record pages, and the table of all its pages.

The Turns page is :mod:`.turns`; what the pages share is :mod:`.session_view`.
"""

from __future__ import annotations

import msgspec
from starlette.responses import Response

from envharness.records import ErrorInfo, Finding, Score
from envharness.service.pages.config_view import (
    environment_settings,
    operations_table,
    version_settings,
)
from envharness.service.pages.html import DASH, Html, html, join, json_block, number
from envharness.service.pages.layout import page
from envharness.service.pages.lineage_view import lineage_section
from envharness.service.pages.render import per_participant_scores, record_extras, record_link
from envharness.service.pages.session_view import (
    SessionView,
    live_attributes,
    load_session,
    participants_table,
    record_at,
    session_head,
)
from envharness.service.pages.spent_view import COST_HEAD, cost_cells, spent_card
from envharness.service.pages.turns import TURNS_PER_PAGE, TurnsQuery, session_turns
from envharness.service.pages.widgets import kv_card, table
from envharness.service.params import MAX_INTEGER, NoParameters
from envharness.service.problems import not_found
from envharness.service.routing import ANYONE, READERS, Call, Endpoint, viewer_page
from envharness.service.spending import SessionSpent, session_spent, stopped_by_budget

__all__ = ["SESSION_PAGES"]

MAX_CITES = 24
"""Cited records looked up per finding (the rest are listed by seq alone)."""


async def session_overview(call: Call[NoParameters]) -> Response:
    session = await load_session(call)
    info = session.info
    parts: list[Html] = []
    failure = _failure(session)
    if failure:
        parts.append(failure)
    lineage = lineage_section(info.id, await session.access.lineage(info.id), always=False)
    spent = _spent(session, await session_spent(session.access, info))
    if session.access.sees_everything:
        parts.append(_scores(session))
        parts.append(await _findings(call, session))
        parts.append(spent)
        parts.append(lineage)
        parts.append(participants_table(session))
    else:
        parts.append(
            html(
                '<section class="card"><h2>Your part</h2><p>As participant <b>{p}</b> you see '
                "your own observations, actions and their outcomes, turn by turn. Scores, "
                'findings and the configuration are about everyone.</p><p><a class="button" '
                'href="/sessions/{id}/turns">Open your turns</a></p></section>',
                p=session.access.principal.participant or "",
                id=info.id,
            )
        )
        parts.append(spent)
        parts.append(lineage)
    body = html(
        '<div class="session"{live}>{head}{parts}</div>',
        live=live_attributes(info, info.records - 1),
        head=session_head(session, "overview"),
        parts=join(parts),
    )
    return page(call.service, call.principal, title=info.id, body=body, active="sessions")


def _failure(session: SessionView) -> Html:
    info = session.info
    if info.status in ("completed", "running", "created") or not session.access.sees_everything:
        return Html("")
    if stopped_by_budget(info.status, info.reason):
        return html(
            '<div class="callout warn budget"><span class="tag tag-budget">budget</span> '
            "<b>Session stopped by its budget.</b> {reason}<p>What it spent is below. It "
            "resumes with a larger budget from where it stopped; what it spent before counts "
            "(<code>envharness resume</code>, or <code>harness.resume(…, budget=…)</code>)."
            "</p></div>",
            reason=info.reason or "",
        )
    error: ErrorInfo | None = session.last_status.error if session.last_status else None
    detail = Html("")
    if error is not None:
        trace = Html("")
        if error.traceback:
            trace = html(
                "<details><summary>Traceback</summary><pre>{t}</pre></details>", t=error.traceback
            )
        detail = html(
            '<p class="mono">{type}: {message}</p>{trace}',
            type=error.type,
            message=error.message,
            trace=trace,
        )
    return html(
        '<div class="callout bad"><b>Session {status}.</b> {reason}{detail}</div>',
        status=info.status,
        reason=info.reason or "",
        detail=detail,
    )


def _spent(session: SessionView, spent: SessionSpent) -> Html:
    """The session's totals and each participant's part (a participant: its own calls)."""
    total = spent.total
    if not session.access.sees_everything:
        own = Html(
            '<p class="muted small">Your own calls only: what the others spent, and how long '
            "the session ran, is about everyone.</p>"
        )
        return spent_card(total, title="Your spending", ran="", below=own if total.calls else "")
    if not total.calls:
        return spent_card(total, title="Spent", ran="ran")
    roster = session.roster

    def placed(name: str) -> tuple[int, str]:
        return (roster.index(name) if name in roster else len(roster), name)

    rows = (
        html(
            "<tr><td><b>{name}</b></td>{cells}</tr>",
            name=name,
            cells=cost_cells(spent.participants[name]),
        )
        for name in sorted(spent.participants, key=placed)
    )
    below = html(
        "<h3>By participant</h3>{table}",
        table=table(html("<th>Participant</th>{head}", head=COST_HEAD), rows, css="table compact"),
    )
    return spent_card(total, title="Spent", ran="its segments, end to end", below=below)


def _scores(session: SessionView) -> Html:
    if not session.scores:
        return Html(
            '<section class="card"><h2>Scores</h2><p class="muted">No score report was '
            "recorded (the environment has no score() or the session did not complete)."
            "</p></section>"
        )
    reports = []
    for record in session.scores:
        score = record.payload
        assert isinstance(score, Score)
        verdict = {
            True: ("passed", "tag-ok"),
            False: ("not passed", "tag-blocked"),
            None: ("no pass/fail", "tag-plain"),
        }[score.passed]
        rows = join(
            html(
                '<tr><td>{name}</td><td class="num">{value}</td>'
                '<td class="num muted">{u}</td></tr>',
                name=name,
                value=number(metric),
                u=f"± {number(score.uncertainty[name])}"
                if score.uncertainty.get(name) is not None
                else "",
            )
            for name, metric in score.metrics.items()
        )
        reports.append(
            html(
                '<div class="score"><div class="score-head"><span class="tag {css}">{verdict}'
                '</span> <span class="muted">version</span> <b>{version}</b> {link}</div>'
                '<table class="table compact"><thead><tr><th>Metric</th><th class="num">Value'
                '</th><th class="num">Uncertainty</th></tr></thead><tbody>{rows}</tbody></table>'
                "{each}</div>",
                css=verdict[1],
                verdict=verdict[0],
                version=score.version,
                link=record_link(session.info.id, record.seq),
                rows=rows,
                each=per_participant_scores(score),
            )
        )
    return html('<section class="card"><h2>Scores</h2>{reports}</section>', reports=join(reports))


async def _findings(call: Call[NoParameters], session: SessionView) -> Html:
    if not session.findings:
        return Html(
            '<section class="card"><h2>Findings</h2><p class="muted">No findings.</p></section>'
        )
    items = []
    for record in session.findings:
        finding = record.payload
        assert isinstance(finding, Finding)
        cited = []
        for seq in finding.cites[:MAX_CITES]:
            target = await record_at(call, session.access, session.info.id, seq)
            label = f"{target.kind}, turn {target.turn}" if target and target.turn else ""
            label = label or (target.kind if target else "")
            cited.append(
                html(
                    '<li>{link} <span class="muted">{label}</span></li>',
                    link=record_link(session.info.id, seq),
                    label=label,
                )
            )
        more = len(finding.cites) - MAX_CITES
        if more > 0:
            cited.append(html('<li class="muted">and {n} more</li>', n=more))
        items.append(
            html(
                '<article class="finding sev-{sev}"><div><span class="tag sev">{sev}</span> '
                "<b>{title}</b> {link}</div><p>{detail}</p>{cites}</article>",
                sev=finding.severity,
                title=finding.title,
                link=record_link(session.info.id, record.seq),
                detail=finding.detail,
                cites=html('<div class="cites">Evidence: <ul>{c}</ul></div>', c=join(cited))
                if cited
                else Html(""),
            )
        )
    return html('<section class="card"><h2>Findings</h2>{items}</section>', items=join(items))


async def session_config(call: Call[NoParameters]) -> Response:
    session = await load_session(call)
    info = session.info
    config = session.config
    if config is None:
        raise not_found(f"configuration of session {info.id!r}")
    settings = [
        *environment_settings(config.environment),
        ("Seed", str(config.seed)),
        (
            "Turns planned",
            str(config.turns)
            if session.planned in (None, config.turns)
            else f"{config.turns}, then continued to turn {session.planned}",
        ),
        *version_settings(config),
        (
            "Experiment",
            html('<a href="/experiments/{e}">{e}</a>', e=config.experiment_id)
            if config.experiment_id
            else "standalone",
        ),
        ("Trial", DASH if config.trial is None else str(config.trial)),
    ]
    lineage = lineage_section(info.id, await session.access.lineage(info.id), always=True)
    scenario = config.scenario
    body = html(
        '<div class="session">{head}<div class="columns">{run}'
        '<section class="card"><h2>Scenario <span class="mono">{sid}</span></h2>'
        "<h3>Input</h3>{input}<h3>Reference</h3>{reference}<h3>Metadata</h3>{metadata}"
        "</section></div>{participants}"
        '<section class="card"><h2>Operations</h2>{ops}</section>{lineage}'
        '<details class="card raw"><summary>The frozen configuration as recorded (JSON)'
        "</summary>{raw}</details></div>",
        head=session_head(session, "config"),
        run=kv_card("Run", settings),
        sid=scenario.id,
        input=json_block(scenario.input),
        reference=json_block(scenario.reference),
        metadata=json_block(scenario.metadata),
        participants=participants_table(session),
        ops=operations_table(config.operations),
        lineage=lineage,
        raw=json_block(msgspec.to_builtins(config), limit=None),
    )
    return page(call.service, call.principal, title=f"{info.id} · configuration", body=body,
                active="sessions")  # fmt: skip


async def record_page(call: Call[NoParameters]) -> Response:
    session = await load_session(call)
    info = session.info
    seq: int = call.path("seq")
    record = None if seq > MAX_INTEGER else await record_at(call, session.access, info.id, seq)
    if record is None:
        raise not_found(f"record {seq} in session {info.id!r}")
    envelope = [
        ("Seq", str(record.seq)),
        ("Kind", record.kind),
        ("Turn", DASH if record.turn is None else str(record.turn)),
        ("Participant", record.participant or f"{DASH} (session level)"),
        ("At (UTC)", record.at.isoformat().replace("+00:00", "Z")),
        ("Prev", record.prev or f"{DASH} (first record)"),
        ("Digest", record.digest),
    ]
    rows = join(
        html('<tr><th>{k}</th><td class="mono">{v}</td></tr>', k=k, v=v) for k, v in envelope
    )
    payload = msgspec.to_builtins(record.payload)
    turn_link = Html("")
    if record.turn is not None:
        start = max(1, record.turn - (record.turn - 1) % TURNS_PER_PAGE)
        turn_link = html(
            '<a href="/sessions/{id}/turns?turn={start}#r{seq}">in turn {turn}</a>',
            id=info.id,
            start=start,
            seq=record.seq,
            turn=record.turn,
        )
    following = await record_at(call, session.access, info.id, seq + 1, exact=False)
    steps = [
        html('<a href="/sessions/{id}/records/{n}">← #{n}</a>', id=info.id, n=seq - 1)
        if seq > 0 and session.access.sees_everything
        else Html(""),
        html('<a href="/sessions/{id}/records/{n}">#{n} →</a>', id=info.id, n=following.seq)
        if following is not None
        else Html(""),
        turn_link,
    ]
    body = html(
        '<div class="session">{head}<section class="card"><div class="card-head"><h2>Record '
        '#{seq} <span class="kind">{kind}</span></h2><span class="steps">{steps}</span></div>'
        '<table class="table kv-table">{rows}</table>{extra}<h3>Payload</h3>{payload}'
        "</section></div>",
        head=session_head(session, ""),
        seq=record.seq,
        kind=record.kind,
        steps=join((step for step in steps if step), " · "),
        rows=rows,
        extra=record_extras(info.id, record),
        payload=json_block(payload, limit=None),
    )
    return page(call.service, call.principal, title=f"{info.id} · #{seq}", body=body,
                active="sessions")  # fmt: skip


_S = "/sessions/{session_id}"

SESSION_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        _S, session_overview, "sessionPage",
        "A session: status, scores with uncertainty, findings linked to evidence",
        roles=ANYONE, errors=(404,),
    ),
    viewer_page(
        f"{_S}/turns", session_turns, "sessionTurnsPage",
        "Turn by turn: each participant's observation, action, result",
        roles=ANYONE, query=TurnsQuery, errors=(404, 422),
    ),
    viewer_page(
        f"{_S}/config", session_config, "sessionConfigPage",
        "The frozen configuration and lineage",
        roles=READERS, errors=(404,),
    ),
    viewer_page(
        f"{_S}/records/{{seq:int}}", record_page, "recordPage",
        "One record: envelope, digest, payload",
        roles=ANYONE, errors=(404,),
    ),
)  # fmt: skip
