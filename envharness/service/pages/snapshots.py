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

from envharness.service.http.datasets import exact_dataset
from envharness.service.http.snapshots import exact_snapshot, frozen_summaries
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.layout import page, when
from envharness.service.pages.trajectories import evidence_nav
from envharness.service.pages.trajectory_view import (
    check_callout,
    trajectory_href,
    trajectory_table,
)
from envharness.service.pages.widgets import detail_head, kv_rows, page_head, pager, table
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem, trajectory_problems
from envharness.service.routing import READERS, Call, Endpoint, viewer_page
from envharness.service.trajectory_access import check_snapshot, sources_backend
from envharness.store.sources import SourceHealth, SourceStore
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    SnapshotMetadata,
    TrajectoryError,
    dataset_rows,
    list_datasets,
    list_snapshots,
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
    with trajectory_problems():
        found = await list_snapshots(call.service.store)
    rows = [
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
    ]
    head = Html(
        '<th>Snapshot</th><th class="num">Trajectories</th><th class="num">Records</th>'
        "<th>Training</th><th>Created (UTC)</th><th>Export</th>"
    )
    empty = Html(
        '<p class="empty-state">No snapshots yet. Freeze sessions with <code>envharness '
        "snapshot create SESSION…</code> (or <code>POST /api/snapshots</code>).</p>"
    )
    return _evidence_page(
        call,
        tab="snapshots",
        title="Snapshots",
        sub=(
            "Frozen, content-addressed selections of trajectories: the id is the sha256 of the "
            "content, so the same selection always has the same id and nothing in one can change."
        ),
        found=_card_table(head, rows, empty=empty),
    )


def _card_table(head: Html, rows: list[Html], *, empty: Html) -> Html:
    """The table of what a page lists, in a card; ``empty`` says how to make some."""
    return html('<section class="card">{t}</section>', t=table(head, rows) if rows else empty)


def _evidence_page(
    call: Call[NoParameters], *, tab: str, title: str, sub: str, found: Html
) -> Response:
    """A list of what leaves the store, on its tab of the Trajectories destination."""
    body = html(
        "{head}{nav}{found}", head=page_head(title, sub), nav=evidence_nav(tab, True), found=found
    )
    return page(call.service, call.principal, title=title, body=body, active="trajectories")


async def snapshot_page(call: Call[SnapshotPageQuery]) -> Response:
    query = call.query
    metadata = await exact_snapshot(call, call.path("snapshot_id"))
    check = await check_snapshot(call.access, metadata.id) if query.check else None
    shown, _ = await frozen_summaries(call, metadata.id, (query.page - 1) * PER_PAGE, PER_PAGE)
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
    facts = [html("<b>{l}</b>", l=metadata.label), *facts] if metadata.label else facts
    more = html(
        '<p class="facts">{entitled}</p><p><a class="button" href="/api/snapshots/{id}/export">'
        'Export JSON lines</a> <span class="muted small">checked before the first line; the '
        "same lines as <code>envharness export snapshot {id}</code></span></p>",
        id=metadata.id,
        entitled=_entitlement(metadata),
    )
    body = html(
        '{head}{check}<section class="card"><div class="card-head"><h2>Trajectories, as '
        'frozen</h2><span class="muted">states as they were when it was frozen</span></div>'
        '{table}{pager}</section><section class="card"><h2>Datasets made from it</h2>'
        '<ul class="plain-list">{used}</ul></section>',
        head=detail_head(
            [("/snapshots", "Snapshots")],
            html('<span class="mono digest">{id}</span>', id=metadata.id),
            facts,
            more,
        ),
        check=check_html,
        table=trajectory_table(shown),
        pager=pager(
            query.page, pages, lambda n: f"/snapshots/{metadata.id}?page={n}",
            back="← Previous", forward="Next →",
        ),
        used=used,
    )  # fmt: skip
    return page(call.service, call.principal, title=metadata.id[:16], body=body,
                active="trajectories")  # fmt: skip


async def datasets_page(call: Call[NoParameters]) -> Response:
    with trajectory_problems():
        found = await list_datasets(call.service.store)
    rows = [
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
    ]
    head = Html(
        '<th>Dataset</th><th class="num">Snapshots</th><th class="num">Trajectories</th>'
        "<th>Reward</th><th>Created (UTC)</th><th>Export</th>"
    )
    empty = Html(
        '<p class="empty-state">No datasets yet. <code>envharness dataset create NAME '
        "SNAPSHOT…</code> makes one from training-entitled snapshots whose every "
        "trajectory is complete, terminal and rewarded.</p>"
    )
    return _evidence_page(
        call,
        tab="datasets",
        title="Datasets",
        sub=Html(
            "Immutable, ordered selections of snapshots, admitted trajectory by trajectory, "
            "exported in the conversational format TRL's trainers accept."
        ),
        found=_card_table(head, rows, empty=empty),
    )


def _reward(dataset: Dataset) -> Html:
    if dataset.reward:
        return html('metric <span class="mono">{m}</span>', m=dataset.reward)
    return Html('<span class="muted">pass/fail, or the only metric</span>')


async def dataset_page(call: Call[NoParameters]) -> Response:
    dataset = await exact_dataset(call, call.path("dataset"))
    snapshots = [await exact_snapshot(call, snapshot_id) for snapshot_id in dataset.snapshots]
    rows = (
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
    facts = [
        html('<span class="mono">{id}</span>', id=dataset.id),
        html("<b>{t}</b> trajectories", t=dataset.trajectories),
        html("reward {reward}", reward=_reward(dataset)),
        html("created {created}", created=when(dataset.created_at)),
    ]
    more = html(
        '<p><a class="button" href="/api/datasets/{id}/export">Export rows (JSONL)</a> '
        '<span class="muted small">one row per trajectory and participant, checked against '
        "its digests as it is read; Parquet: <code>envharness dataset export {id} --format "
        "parquet -o FILE</code></span></p>",
        id=dataset.id,
    )
    body = html(
        '{head}<section class="card"><h2>Snapshots, in order</h2>{table}</section>{preview}',
        head=detail_head([("/datasets", "Datasets")], dataset.name, facts, more),
        table=table(
            Html(
                '<th class="num">#</th><th>Snapshot</th><th class="num">Trajectories</th>'
                '<th class="num">Records</th><th>Training</th>'
            ),
            rows,
        ),
        preview=await _preview(call, dataset),
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
    items = (
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
        '<section class="card"><h2>First rows</h2>{problem}{table}</section>',
        problem=problem,
        table=table(
            Html(
                '<th>Trajectory</th><th>Participant</th><th class="num">Reward</th>'
                '<th class="num">Messages</th><th>First message</th>'
            ),
            items,
        ),
    )


async def sources_page(call: Call[NoParameters]) -> Response:
    found = await SourceStore(sources_backend(call.service)).health()
    listing = (
        join(_source(health) for health in found)
        if found
        else Html(
            '<section class="card"><p class="empty-state">No imported sources. <code>envharness '
            "import NAMESPACE/NAME FILE</code> (or <code>POST /api/imports</code>) imports "
            "another tool's hash-chained records or OpenTelemetry GenAI spans.</p></section>"
        )
    )
    return _evidence_page(
        call,
        tab="sources",
        title="Sources",
        sub=(
            "External feeds of hash-chained records, imported beside the sessions: where each "
            "stands, and whether anything is missing."
        ),
        found=listing,
    )


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
    return html(
        '<section class="card source" id="{s}"><h2 class="mono">{s}</h2>{alerts}'
        '<table class="table kv-table">{rows}</table></section>',
        s=health.source,
        alerts=join(alerts),
        rows=kv_rows(settings),
    )


SNAPSHOT_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/snapshots", snapshots_page, "snapshotsPage",
        "Snapshots: what each holds, its entitlement, its export",
        roles=READERS, errors=(409,),
    ),
    viewer_page(
        "/snapshots/{snapshot_id}", snapshot_page, "snapshotPage",
        "One snapshot: its trajectories as frozen, its datasets, its check and export",
        roles=READERS, query=SnapshotPageQuery, errors=(404, 409),
    ),
    viewer_page(
        "/datasets", datasets_page, "datasetsPage",
        "Datasets: their snapshots, reward and export",
        roles=READERS, errors=(409,),
    ),
    viewer_page(
        "/datasets/{dataset}", dataset_page, "datasetPage",
        "One dataset: its snapshots in order, its first rows, its export",
        roles=READERS, errors=(404, 409),
    ),
    viewer_page(
        "/sources", sources_page, "sourcesPage",
        "Imported sources' health: head, backlog, gaps, failures",
        roles=READERS,
    ),
)  # fmt: skip
