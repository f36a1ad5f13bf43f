"""What was frozen from an experiment: the snapshots holding its sessions' trajectories, and
the datasets made from those snapshots, for the experiment's page.

A snapshot records no source experiment — it is a content-addressed selection of
trajectories — so "made from this experiment" is read from what it holds: every snapshot with
at least one of the experiment's sessions, with how many (one indexed query,
:meth:`~envharness.store.snapshots.SnapshotStore.snapshots_of_experiment`), and every dataset
that uses one of them. Snapshots and datasets hold every participant's trajectories, so the
card is for readers who see everything (their pages answer a participant 403).
"""

from __future__ import annotations

from envharness.service.pages.html import Html, html, join
from envharness.service.pages.layout import when
from envharness.service.pages.widgets import table
from envharness.service.problems import trajectory_problems
from envharness.store.locate import AnyStore
from envharness.store.snapshots import SnapshotStore
from envharness.trajectories import list_datasets, list_snapshots

__all__ = ["frozen_card"]


async def frozen_card(store: AnyStore, experiment_id: str, sessions: int) -> Html:
    """The card: each snapshot with how many of the experiment's ``sessions`` it holds, and
    the datasets using them; or how to freeze some."""
    held = await SnapshotStore(store.backend).snapshots_of_experiment(experiment_id)
    if not held:
        return html(
            '<section class="card" id="frozen"><h2>Snapshots and datasets</h2><p class="muted">'
            "Nothing frozen from this experiment yet: <code>envharness snapshot create "
            "--experiment {id}</code> freezes its sessions' trajectories, and <code>envharness "
            "dataset create</code> makes a training set from snapshots.</p></section>",
            id=experiment_id,
        )
    with trajectory_problems():
        snapshots = [found for found in await list_snapshots(store) if found.id in held]
        datasets = [
            found
            for found in await list_datasets(store)
            if any(snapshot in held for snapshot in found.snapshots)
        ]
    snapshot_rows = [
        html(
            '<tr><td><a class="mono" href="/snapshots/{id}">{short}</a><div class="small">'
            '{label}</div></td><td class="num">{mine} of {n}</td><td class="num">{all}</td>'
            "<td>{created}</td></tr>",
            id=found.id,
            short=found.id[:20] + "…",
            label=found.label,
            mine=held[found.id],
            n=sessions,
            all=found.trajectories,
            created=when(found.created_at),
        )
        for found in reversed(snapshots)
    ]
    dataset_rows = [
        html(
            '<tr><td><a href="/datasets/{id}"><b>{name}</b></a></td><td>{used}</td>'
            '<td class="num">{t}</td><td>{created}</td></tr>',
            id=found.id,
            name=found.name,
            used=join(
                (
                    html('<a class="mono" href="/snapshots/{s}">{short}</a>', s=s, short=s[:12])
                    for s in found.snapshots
                    if s in held
                ),
                ", ",
            ),
            t=found.trajectories,
            created=when(found.created_at),
        )
        for found in reversed(datasets)
    ]
    datasets_table = (
        table(
            Html(
                '<th>Dataset</th><th>From snapshots</th><th class="num">Trajectories</th>'
                "<th>Created (UTC)</th>"
            ),
            dataset_rows,
        )
        if dataset_rows
        else Html('<p class="muted">No dataset uses these snapshots yet.</p>')
    )
    return html(
        '<section class="card" id="frozen"><h2>Snapshots and datasets</h2>{snapshots}'
        "<h3>Datasets made from them</h3>{datasets}</section>",
        snapshots=table(
            Html(
                '<th>Snapshot</th><th class="num">This experiment\'s sessions</th>'
                '<th class="num">Trajectories in all</th><th>Created (UTC)</th>'
            ),
            snapshot_rows,
        ),
        datasets=datasets_table,
    )
