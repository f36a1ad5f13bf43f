"""Viewer pages for what leaves the store: snapshots, datasets, and imported sources' health.

They sit under the Trajectories destination. Snapshots and datasets hold every participant's
trajectories, and sources other tools' records, so these pages are for admin and viewer
tokens (a participant gets 403, whatever it names). The viewer is read-only: it links each
export (``/api/snapshots/{id}/export``, ``/api/datasets/{name}/export``, which the browser's
sign-in may read) and names the command that freezes or imports, but changes nothing.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness.service.html import DASH, Html, html, join, number
from envharness.service.layout import page, when
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import READERS, Call, Endpoint
from envharness.service.trajectory_access import TrajectoryAccess, check_snapshot
from envharness.service.trajectory_api import exact_dataset, exact_snapshot, trajectory_problem
from envharness.service.trajectory_pages import evidence_nav
from envharness.service.trajectory_schemas import TrajectorySummary
from envharness.service.trajectory_view import check_callout, trajectory_href, trajectory_table
from envharness.sources import AsyncSources
from envharness.store.sources import SourceHealth
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    SnapshotMetadata,
    TrajectoryError,
    dataset_rows,
    list_datasets,
    list_snapshots,
    snapshot_trajectories,
)

__all__ = ["PREVIEW_ROWS", "SNAPSHOT_PAGES"]

PER_PAGE = 100
PREVIEW_ROWS = 3
"""Rows of a dataset shown on its page (the export has them all)."""


class SnapshotPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    check: Annotated[
        bool, msgspec.Meta(description="Verify the snapshot's evidence before showing it.")
    ] = False
    page: Annotated[int, msgspec.Meta(ge=1, description="Page of its trajectories, from 1.")] = 1


def _entitlement(metadata: SnapshotMetadata) -> Html:
    entitlement = metadata.entitlement
    if entitlement is None:
        return Html('<span class="muted">not declared: no dataset can use it</span>')
    by = html(", declared by {w}", w=entitlement.declared_by) if entitlement.declared_by else ""
    return html('<span class="tag tag-ok">training-entitled</span> {b}{by}', b=entitlement.basis,
                by=by)  # fmt: skip


async def snapshots_page(call: Call[NoParameters]) -> Response:
    try:
        found = await list_snapshots(call.service.store)
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    rows = join(
        html(
            '<tr><td><a class="mono" href="/snapshots/{id}">{short}</a><div class="small">'
            '{label}</div></td><td class="num">{t}</td><td class="num">{r}</td><td>{e}</td>'
            '<td>{created}</td><td><a href="/api/snapshots/{id}/export">JSONL</a></td></tr>',
            id=metadata.id,
            short=metadata.id[:20] + "…",
            label=metadata.label,
            t=metadata.trajectories,
            r=f"{metadata.records:,}",
            e=_entitlement(metadata),
            created=when(metadata.created_at),
        )
        for metadata in reversed(found)
    )
    table = (
        html(
            '<table class="table"><thead><tr><th>Snapshot</th><th class="num">Trajectories</th>'
            '<th class="num">Records</th><th>Training</th><th>Created (UTC)</th><th>Export</th>'
            "</tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if found
        else Html(
            '<p class="empty-state">No snapshots yet. Freeze sessions with <code>envharness '
            "snapshot create SESSION…</code> (or <code>POST /api/snapshots</code>).</p>"
        )
    )
    body = html(
        '<div class="page-head"><h1>Snapshots</h1><p class="sub">Frozen, content-addressed '
        "selections of trajectories: the id is the sha256 of the content, so the same selection "
        "always has the same id and nothing in one can change.</p></div>{nav}"
        '<section class="card">{table}</section>',
        nav=evidence_nav("snapshots", True),
        table=table,
    )
    return page(call.service, call.principal, title="Snapshots", body=body,
                active="trajectories")  # fmt: skip


async def snapshot_page(call: Call[SnapshotPageQuery]) -> Response:
    query = call.query
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    check = await check_snapshot(call.access, metadata.id) if query.check else None
    trajectories = TrajectoryAccess(call.access)
    shown: list[TrajectorySummary] = []
    first = (query.page - 1) * PER_PAGE
    try:
        async with aclosing(snapshot_trajectories(call.service.store, metadata.id)) as frozen:
            position = -1
            async for trajectory in frozen:
                position += 1
                if position < first:
                    continue
                if len(shown) == PER_PAGE:
                    break
                shown.append(await trajectories.summary(trajectory))
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    pages = max(1, -(-metadata.trajectories // PER_PAGE))
    if query.page > pages:
        raise HTTPProblem(404, f"this snapshot has {pages} page(s), not {query.page}",
                          parameter="page")  # fmt: skip
    datasets = [d for d in await list_datasets(call.service.store) if metadata.id in d.snapshots]
    facts = [
        html("<b>{n}</b> trajectories", n=metadata.trajectories),
        html("<b>{n}</b> records", n=f"{metadata.records:,}"),
        html("created {t}", t=when(metadata.created_at)),
        html("schema {v}", v=metadata.schema_version),
    ]
    link = html('<a href="/snapshots/{id}?check=true">Check its evidence now</a>', id=metadata.id)
    check_html = check_callout(check, what="each trajectory's chain", link=link)
    used = (
        join(
            html('<li><a href="/datasets/{id}">{name}</a></li>', id=d.id, name=d.name)
            for d in datasets
        )
        if datasets
        else Html('<li class="muted">none</li>')
    )
    pager = Html("")
    if pages > 1:
        pager = html(
            '<nav class="pager">{p}<span>page {n} of {pages}</span>{f}</nav>',
            p=html('<a href="/snapshots/{id}?page={n}">← Previous</a>', id=metadata.id,
                   n=query.page - 1) if query.page > 1 else Html("<span></span>"),
            n=query.page,
            pages=pages,
            f=html('<a href="/snapshots/{id}?page={n}">Next →</a>', id=metadata.id,
                   n=query.page + 1) if query.page < pages else Html("<span></span>"),
        )  # fmt: skip
    body = html(
        '<div class="page-head session-head"><div class="crumbs"><a href="/snapshots">'
        'Snapshots</a> /</div><h1><span class="mono digest">{id}</span></h1>'
        '<p class="facts">{label}{facts}</p><p class="facts">{entitled}</p>'
        '<p><a class="button" href="/api/snapshots/{id}/export">Export JSON lines</a> '
        '<span class="muted small">checked before the first line; the same lines as '
        "<code>envharness export snapshot {id}</code></span></p></div>{check}"
        '<section class="card"><div class="card-head"><h2>Trajectories, as frozen</h2>'
        '<span class="muted">states as they were when it was frozen</span></div>{table}'
        '{pager}</section><section class="card"><h2>Datasets made from it</h2>'
        '<ul class="plain-list">{used}</ul></section>',
        id=metadata.id,
        label=html("<b>{l}</b> · ", l=metadata.label) if metadata.label else "",
        facts=join(facts, " · "),
        entitled=_entitlement(metadata),
        check=check_html,
        table=trajectory_table(shown),
        pager=pager,
        used=used,
    )
    return page(call.service, call.principal, title=metadata.id[:16], body=body,
                active="trajectories")  # fmt: skip


async def datasets_page(call: Call[NoParameters]) -> Response:
    try:
        found = await list_datasets(call.service.store)
    except TrajectoryError as error:
        raise trajectory_problem(error) from None
    rows = join(
        html(
            '<tr><td><a href="/datasets/{id}"><b>{name}</b></a><div class="mono small muted">'
            '{short}</div></td><td class="num">{s}</td><td class="num">{t}</td><td>{reward}</td>'
            '<td>{created}</td><td><a href="/api/datasets/{id}/export">JSONL</a></td></tr>',
            id=dataset.id,
            name=dataset.name,
            short=dataset.id[:20] + "…",
            s=len(dataset.snapshots),
            t=dataset.trajectories,
            reward=_reward(dataset),
            created=when(dataset.created_at),
        )
        for dataset in reversed(found)
    )
    table = (
        html(
            '<table class="table"><thead><tr><th>Dataset</th><th class="num">Snapshots</th>'
            '<th class="num">Trajectories</th><th>Reward</th><th>Created (UTC)</th>'
            "<th>Export</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if found
        else Html(
            '<p class="empty-state">No datasets yet. <code>envharness dataset create NAME '
            "SNAPSHOT…</code> makes one from training-entitled snapshots whose every "
            "trajectory is complete, terminal and rewarded.</p>"
        )
    )
    body = html(
        '<div class="page-head"><h1>Datasets</h1><p class="sub">Immutable, ordered selections '
        "of snapshots, admitted trajectory by trajectory, exported in the conversational "
        'format TRL\'s trainers accept.</p></div>{nav}<section class="card">{table}</section>',
        nav=evidence_nav("datasets", True),
        table=table,
    )
    return page(call.service, call.principal, title="Datasets", body=body,
                active="trajectories")  # fmt: skip


def _reward(dataset: Dataset) -> Html:
    if dataset.reward:
        return html('metric <span class="mono">{m}</span>', m=dataset.reward)
    return Html('<span class="muted">pass/fail, or the only metric</span>')


async def dataset_page(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    snapshots = [await exact_snapshot(call, snapshot_id) for snapshot_id in dataset.snapshots]
    rows = join(
        html(
            '<tr><td class="num">{n}</td><td><a class="mono" href="/snapshots/{id}">{id}</a>'
            '<div class="small">{label}</div></td><td class="num">{t}</td>'
            '<td class="num">{r}</td><td>{e}</td></tr>',
            n=position,
            id=metadata.id,
            label=metadata.label,
            t=metadata.trajectories,
            r=f"{metadata.records:,}",
            e=_entitlement(metadata),
        )
        for position, metadata in enumerate(snapshots)
    )
    preview = await _preview(call, dataset)
    body = html(
        '<div class="page-head session-head"><div class="crumbs"><a href="/datasets">Datasets'
        '</a> /</div><h1>{name}</h1><p class="facts"><span class="mono">{id}</span> · <b>{t}'
        "</b> trajectories · reward {reward} · created {created}</p>"
        '<p><a class="button" href="/api/datasets/{id}/export">Export rows (JSONL)</a> '
        '<span class="muted small">one row per trajectory and participant, checked against '
        "its digests as it is read; Parquet: <code>envharness dataset export {name_q} --format "
        "parquet -o FILE</code></span></p></div>"
        '<section class="card"><h2>Snapshots, in order</h2><table class="table"><thead><tr>'
        '<th class="num">#</th><th>Snapshot</th><th class="num">Trajectories</th>'
        '<th class="num">Records</th><th>Training</th></tr></thead><tbody>{rows}</tbody>'
        "</table></section>{preview}",
        name=dataset.name,
        name_q=dataset.id,
        id=dataset.id,
        t=dataset.trajectories,
        reward=_reward(dataset),
        created=when(dataset.created_at),
        rows=rows,
        preview=preview,
    )
    return page(call.service, call.principal, title=dataset.name, body=body,
                active="trajectories")  # fmt: skip


async def _preview(call: Call[NoParameters], dataset: Dataset) -> Html:
    """The first :data:`PREVIEW_ROWS` rows, read (and checked) like the export reads them."""
    found: list[DatasetRow] = []
    problem = Html("")
    try:
        async with aclosing(dataset_rows(call.service.store, dataset.id)) as rows:
            async for row in rows:
                found.append(row)
                if len(found) == PREVIEW_ROWS:
                    break
    except TrajectoryError as error:
        problem = html('<div class="callout bad">{m}</div>', m=str(error))
    items = join(
        html(
            '<tr><td><a class="mono small" href="{href}">{s}</a></td><td>{p}</td>'
            '<td class="num">{reward}</td><td class="num">{n}</td><td class="small">{first}'
            "</td></tr>",
            href=trajectory_href(row.session_id),
            s=row.session_id,
            p=row.participant,
            reward=number(row.reward),
            n=len(row.messages),
            first=(row.messages[0].content[:160] if row.messages else DASH),
        )
        for row in found
    )
    return html(
        '<section class="card"><h2>First rows</h2>{problem}<table class="table"><thead><tr>'
        '<th>Trajectory</th><th>Participant</th><th class="num">Reward</th>'
        '<th class="num">Messages</th><th>First message</th></tr></thead><tbody>{items}'
        "</tbody></table></section>",
        problem=problem,
        items=items,
    )


async def sources_page(call: Call[NoParameters]) -> Response:
    found = await AsyncSources(call.service.store.directory).health()
    table = (
        join(_source(health) for health in found)
        if found
        else Html(
            '<section class="card"><p class="empty-state">No imported sources. <code>envharness '
            "import NAMESPACE/NAME FILE</code> (or <code>POST /api/imports</code>) imports "
            "another tool's hash-chained records or OpenTelemetry GenAI spans.</p></section>"
        )
    )
    body = html(
        '<div class="page-head"><h1>Sources</h1><p class="sub">External feeds of hash-chained '
        "records, imported beside the sessions: where each stands, and whether anything is "
        "missing.</p></div>{nav}{table}",
        nav=evidence_nav("sources", True),
        table=table,
    )
    return page(call.service, call.principal, title="Sources", body=body,
                active="trajectories")  # fmt: skip


def _source(health: SourceHealth) -> Html:
    alerts = []
    if health.backlog:
        alerts.append(
            html(
                '<div class="callout warn"><b>Backlog:</b> {n} position(s) offered beyond the '
                "head were not stored (a refused import's).</div>",
                n=health.backlog,
            )
        )
    if health.gaps:
        gaps = ", ".join(f"{gap.first} to {gap.last}" for gap in health.gaps)
        alerts.append(
            html(
                '<div class="callout bad"><b>Gaps:</b> positions {g} were never imported.</div>',
                g=gaps,
            )
        )
    if health.capture_failures:
        alerts.append(
            html(
                '<div class="callout warn"><b>{n} capture failure(s)</b> reported by the source. '
                "{last}</div>",
                n=health.capture_failures,
                last=health.last_capture_failure or "",
            )
        )
    if health.refused:
        alerts.append(
            html(
                '<div class="callout bad"><b>{n} import(s) refused</b> since the last one that '
                "stored something. {last}</div>",
                n=health.refused,
                last=health.last_refusal or "",
            )
        )
    if not alerts:
        alerts.append(
            Html(
                '<div class="callout ok"><b>Healthy.</b> No backlog, gap, capture failure or '
                "refused import.</div>"
            )
        )
    settings = [
        ("Head", DASH if health.head_position < 0 else f"position {health.head_position}"),
        ("Head hash", html('<span class="mono digest">{h}</span>', h=health.head_hash or DASH)),
        ("Records", f"{health.records:,}"),
        ("Episodes", html('{n} (<a href="/trajectories?source={s}">their trajectories</a>)',
                          n=health.episodes, s=health.source)),
        ("Formats", ", ".join(health.formats) or DASH),
        ("Imports tried", str(health.imports)),
        ("Last change", when(health.updated_at)),
    ]  # fmt: skip
    table = join(html("<tr><th>{k}</th><td>{v}</td></tr>", k=k, v=v) for k, v in settings)
    return html(
        '<section class="card source" id="{s}"><h2 class="mono">{s}</h2>{alerts}'
        '<table class="table kv-table">{table}</table></section>',
        s=health.source,
        alerts=join(alerts),
        table=table,
    )


SNAPSHOT_PAGES: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/snapshots", handler=snapshots_page, operation="snapshotsPage",
        tag="viewer", summary="Snapshots: what each holds, its entitlement, its export",
        roles=READERS, media_type="text/html", page=True, errors=(409,),
    ),
    Endpoint(
        method="GET", path="/snapshots/{snapshot_id}", handler=snapshot_page,
        operation="snapshotPage", tag="viewer",
        summary="One snapshot: its trajectories as frozen, its datasets, its check and export",
        roles=READERS, query=SnapshotPageQuery, media_type="text/html", page=True,
        errors=(404, 409),
    ),
    Endpoint(
        method="GET", path="/datasets", handler=datasets_page, operation="datasetsPage",
        tag="viewer", summary="Datasets: their snapshots, reward and export",
        roles=READERS, media_type="text/html", page=True, errors=(409,),
    ),
    Endpoint(
        method="GET", path="/datasets/{dataset}", handler=dataset_page, operation="datasetPage",
        tag="viewer", summary="One dataset: its snapshots in order, its first rows, its export",
        roles=READERS, media_type="text/html", page=True, errors=(404, 409),
    ),
    Endpoint(
        method="GET", path="/sources", handler=sources_page, operation="sourcesPage",
        tag="viewer", summary="Imported sources' health: head, backlog, gaps, failures",
        roles=READERS, media_type="text/html", page=True,
    ),
)  # fmt: skip
