"""How the viewer shows a trajectory: its states, segments, digest binding and check, reward
chain and provenance; and the table that lists trajectories.

Shared by the Trajectories destination, a trajectory's own page and a session's Trajectory
tab. Everything here renders what :class:`~envharness.service.trajectory_access.
TrajectoryAccess` gave this reader: a participant's summary arrives with its private fields
``None`` and without the projection, and these functions show only what they are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from envharness.service.pages.html import DASH, Html, html, join, value
from envharness.service.pages.layout import status_badge, when
from envharness.service.pages.render import record_link
from envharness.service.pages.widgets import kv_card, kv_rows, table
from envharness.service.wire.trajectories import EvidenceCheck, SegmentOut, TrajectorySummary
from envharness.trajectories import Trajectory

__all__ = [
    "STATE_HELP",
    "check_callout",
    "segments_table",
    "state_tag",
    "trajectory_href",
    "trajectory_link",
    "trajectory_sections",
    "trajectory_table",
]

STATE_HELP = {
    "collection": "Is every record here?",
    "execution": "Where did it get to?",
    "termination": "How did it end?",
    "outcome": "Did a verifier check it?",
}
"""The question each of the four independent states answers (docs/trajectories.md)."""


def state_tag(kind: str, state: str | None) -> Html:
    """A state as a coloured tag: ``st-complete``, ``st-gaps``, ``st-verified`` …"""
    if state is None:
        return Html(DASH)
    return html(
        '<span class="tag st st-{s}" title="{k}: {s}">{label}</span>',
        k=kind,
        s=state,
        label=state.replace("_", " "),
    )


def trajectory_href(trajectory_id: str) -> str:
    """The URL of a trajectory's page. An imported episode's id is the source's own text (it
    may hold ``?``, ``#`` or ``%``), so it is percent-encoded; ``/`` and ``:`` stay readable."""
    return "/trajectories/" + quote(trajectory_id, safe="/:@")


def trajectory_link(trajectory_id: str) -> Html:
    return html(
        '<a class="mono" href="{href}">{id}</a>', href=trajectory_href(trajectory_id),
        id=trajectory_id,
    )  # fmt: skip


def _origin(summary: TrajectorySummary) -> Html:
    if summary.origin == "imported":
        return html(
            '<span class="tag tag-imported">imported</span> <a class="mono small" '
            'href="/sources#{s}">{s}</a>',
            s=summary.source or "",
        )
    return Html('<span class="tag tag-native">native</span>')


def _outcome(summary: TrajectorySummary) -> Html:
    if summary.outcome is None:
        return Html(DASH)
    verdict = ""
    if summary.outcome == "verified" and summary.passed is not None:
        verdict = " passed" if summary.passed else " not passed"
    return html(
        '{tag}<span class="small{css}">{verdict}</span>',
        tag=state_tag("outcome", summary.outcome),
        css=" bad-text" if summary.passed is False else "",
        verdict=verdict,
    )


def _snapshots(found: list[str] | None) -> Html:
    if found is None:
        return Html(DASH)
    if not found:
        return Html('<span class="muted">none</span>')
    return join(
        (
            html(
                '<a class="mono small" href="/snapshots/{id}" title="{id}">{short}</a>',
                id=snapshot,
                short=snapshot[:12] + "…",
            )
            for snapshot in found
        ),
        " ",
    )


def trajectory_table(found: Sequence[TrajectorySummary]) -> Html:
    head = Html(
        "<th>Trajectory</th><th>Origin</th><th>Execution</th><th>Collection</th>"
        '<th>Termination</th><th>Verified outcome</th><th class="num">Segments</th>'
        '<th class="num">Turns</th><th class="num">Records</th><th>Snapshots</th>'
    )
    rows = (
        html(
            '<tr><td>{link}<div class="small muted">{scenario}</div></td><td>{origin}</td>'
            '<td>{execution} <span class="small muted">{status}</span></td>'
            "<td>{collection}</td><td>{termination}</td><td>{outcome}</td>"
            '<td class="num">{segments}</td><td class="num">{turns}</td>'
            '<td class="num">{records}</td><td>{snapshots}</td></tr>',
            link=trajectory_link(summary.id),
            scenario=summary.scenario_id or "",
            origin=_origin(summary),
            execution=state_tag("execution", summary.execution),
            status=summary.status,
            collection=state_tag("collection", summary.collection),
            termination=state_tag("termination", summary.termination),
            outcome=_outcome(summary),
            segments=summary.segments,
            turns=summary.turns,
            records=f"{summary.records:,}" if summary.records is not None else DASH,
            snapshots=_snapshots(summary.snapshots),
        )
        for summary in found
    )
    return table(head, rows, css="table trajectories")


def check_callout(check: EvidenceCheck | None, *, what: str, link: Html | None = None) -> Html:
    """The digest check's verdict; ``link`` offers to run it when it was not."""
    if check is None:
        return html(
            '<div class="callout plain">The evidence was not re-checked for this page. {link}'
            "</div>",
            link=link or Html(""),
        )
    if check.ok:
        counted = f"{check.records:,} records re-read: " if check.records is not None else ""
        return html(
            '<div class="callout ok" id="check"><b>Intact.</b> {counted}every digest was '
            "recomputed from the stored bytes, every record links to the one before it, and "
            "{what} ends at the bound head.</div>",
            counted=counted,
            what=what,
        )
    where = Html("")
    if check.trajectory and check.seq is not None and check.trajectory.startswith("ses_"):
        where = html(" At {link}.", link=record_link(check.trajectory, check.seq))
    return html(
        '<div class="callout bad" id="check"><b>Does not match its binding.</b> {problem}{where}'
        "<p>Exports, snapshots and datasets refuse this evidence until it is restored; "
        "<code>envharness verify</code> checks the whole store.</p></div>",
        problem=check.problem or "",
        where=where,
    )


def segments_table(segments: Sequence[SegmentOut], session_id: str | None) -> Html:
    if not segments:
        return Html('<p class="muted">No segment was recorded.</p>')
    seqs = any(segment.first_seq is not None for segment in segments)

    def seq_range(segment: SegmentOut) -> Html:
        if segment.first_seq is None or segment.last_seq is None:
            return Html(DASH)
        if session_id is None:
            return html("{a} to {b}", a=segment.first_seq, b=segment.last_seq)
        return html(
            "{a} to {b}",
            a=record_link(session_id, segment.first_seq),
            b=record_link(session_id, segment.last_seq),
        )

    rows = (
        html(
            '<tr><td class="num">{index}</td><td>{cause}{previous}</td>{seqs}<td>{turns}</td>'
            "<td>{started}</td><td>{ended}</td><td>{status}</td><td>{changes}</td></tr>",
            index=segment.index,
            cause=html('<span class="tag tag-cause">{c}</span>', c=segment.cause),
            previous=html(' <span class="small muted">after segment {p}</span>', p=segment.previous)
            if segment.previous is not None
            else Html(""),
            seqs=html("<td>{r}</td>", r=seq_range(segment)) if seqs else Html(""),
            turns=_turns(segment),
            started=when(segment.started_at),
            ended=when(segment.ended_at) if segment.ended_at else Html(DASH),
            status=status_badge(segment.status) if segment.status else Html(DASH),
            changes=join(html("<div>{c}</div>", c=c) for c in segment.changes or ()) or Html(DASH),
        )
        for segment in segments
    )
    head = html(
        '<th class="num">#</th><th>Cause</th>{seqs}<th>Turns</th><th>Started</th><th>Ended</th>'
        "<th>How it ended</th><th>Declared changes</th>",
        seqs=Html("<th>Records (seq)</th>") if seqs else Html(""),
    )
    return table(head, rows, css="table segments")


def _turns(segment: SegmentOut) -> str:
    if segment.end_turn is None:
        return f"after turn {segment.start_turn}, none completed"
    if segment.end_turn == segment.start_turn:
        return f"after turn {segment.start_turn}, none completed"
    if segment.end_turn == segment.start_turn + 1:
        return f"turn {segment.end_turn}"
    return f"{segment.start_turn + 1} to {segment.end_turn}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _states(summary: TrajectorySummary, trajectory: Trajectory | None) -> Html:
    boxes = []
    collection_detail = Html("")
    termination_detail = Html("")
    outcome_detail = Html("")
    execution_detail = html('<p class="small muted">session status {s}</p>', s=summary.status)
    if trajectory is not None:
        collection = trajectory.collection
        gaps = ", ".join(f"{gap.first} to {gap.last}" for gap in collection.gaps)
        collection_detail = html(
            '<p class="small">{d}{g}</p>',
            d=collection.detail,
            g=f" Missing: {gaps}." if gaps else "",
        )
        termination = trajectory.termination
        parts = [html("{n} complete", n=_count(termination.turns, "turn"))]
        if termination.reason:
            parts.append(html('<span class="why">{r}</span>', r=termination.reason))
        if termination.error is not None:
            parts.append(
                html(
                    '<span class="mono">{t}: {m}</span>',
                    t=termination.error.type,
                    m=termination.error.message,
                )
            )
        if termination.seq is not None and trajectory.provenance.origin == "native":
            parts.append(html("said by {l}", l=record_link(trajectory.session_id, termination.seq)))
        termination_detail = html('<p class="small">{p}</p>', p=join(parts, " · "))
        outcome = trajectory.outcome
        facts = []
        if outcome.verifier_version:
            facts.append(html("verifier <b>{v}</b>", v=outcome.verifier_version))
        if outcome.passed is not None:
            facts.append(Html("passed") if outcome.passed else Html("not passed"))
        if outcome.detail:
            facts.append(html("{d}", d=outcome.detail))
        outcome_detail = html('<p class="small">{f}</p>', f=join(facts, " · "))
    else:
        termination_detail = html(
            '<p class="small">{n} complete</p>', n=_count(summary.turns, "turn")
        )
    shown = [
        ("collection", "Collection", summary.collection, collection_detail),
        ("execution", "Execution", summary.execution, execution_detail),
        ("termination", "Termination", summary.termination, termination_detail),
        ("outcome", "Verified outcome", summary.outcome, outcome_detail),
    ]
    for key, label, state, detail in shown:
        if state is None:
            detail = Html(
                '<p class="small muted">not shown to a participant: scores are about everyone</p>'
            )
        boxes.append(
            html(
                '<div class="state"><div class="state-q">{q}</div><div class="state-l">{label}'
                "</div><div>{tag}</div>{detail}</div>",
                q=STATE_HELP[key],
                label=label,
                tag=state_tag(key, state),
                detail=detail,
            )
        )
    return html(
        '<section class="card"><h2>States</h2><div class="states">{boxes}</div></section>',
        boxes=join(boxes),
    )


def _binding(trajectory: Trajectory, check: EvidenceCheck | None, recheck: str) -> Html:
    journal = trajectory.journal
    native = trajectory.provenance.origin == "native"
    head = record_link(journal.chain, journal.last_seq) if native else Html(str(journal.last_seq))
    rows = [
        ("Chain", html('<span class="mono">{c}</span>', c=journal.chain)),
        ("Algorithm", html('<span class="mono">{a}</span>', a=journal.algorithm)),
        (
            "Range",
            html("{a} to {b} ({n} records)", a=journal.first_seq, b=head, n=f"{journal.records:,}"),
        ),
        ("Head digest", html('<span class="mono digest">{d}</span>', d=journal.head_digest)),
    ]
    link = html('<a href="{h}">Check it now</a>.', h=recheck)
    return html(
        '<section class="card"><h2>Digest binding</h2><p class="muted small">The head digest '
        "covers, through each record's <code>prev</code>, every record of the range: one "
        "changed byte anywhere breaks the chain up to it.</p>"
        '<table class="table kv-table">{rows}</table>{check}</section>',
        rows=kv_rows(rows),
        check=check_callout(check, what="the chain", link=link),
    )


def _reward(trajectory: Trajectory) -> Html:
    chain = trajectory.outcome.reward
    if chain is None:
        return Html("")
    native = trajectory.provenance.origin == "native"

    def link(seq: int) -> Html:
        return record_link(trajectory.session_id, seq) if native else Html(f"position {seq}")

    rows = [
        ("Score record", link(chain.score_seq)),
        ("Score digest", html('<span class="mono digest">{d}</span>', d=chain.score_digest)),
        ("Scorer", html("<b>{v}</b>", v=chain.scorer_version or DASH)),
        ("Metrics", value(chain.metrics)),
        ("Passed", DASH if chain.passed is None else ("yes" if chain.passed else "no")),
        ("Rests on", join((link(seq) for seq in chain.cites), " ") or Html(DASH)),
        (
            "Resolved",
            Html('<span class="tag tag-ok">resolved</span>')
            if chain.resolved
            else Html(
                '<span class="tag tag-blocked">unresolved</span> <span class="small">'
                "it cites no evidence inside the range</span>"
            ),
        ),
    ]
    return kv_card("Reward chain", rows)


def _provenance(trajectory: Trajectory) -> Html:
    provenance = trajectory.provenance
    if provenance.origin == "native":
        return Html("")
    rows = [
        ("Source", html('<a class="mono" href="/sources#{s}">{s}</a>', s=provenance.source or "")),
        ("Format", provenance.format or DASH),
        ("Importer", provenance.importer or DASH),
        (
            "Source position",
            DASH if provenance.source_position is None else str(provenance.source_position),
        ),
        (
            "Source hash",
            html('<span class="mono digest">{h}</span>', h=provenance.source_hash or ""),
        ),
        ("Training", "declared by the source" if provenance.training else "not declared"),
    ]
    return kv_card("Provenance", rows)


def _who(trajectory: Trajectory) -> Html:
    if not trajectory.participants:
        return Html("")
    rows = (
        html('<tr><td><b>{n}</b></td><td class="mono">{i}</td></tr>', n=name, i=implementation)
        for name, implementation in trajectory.participants.items()
    )
    return html(
        '<section class="card"><h2>Participants</h2>{t}</section>',
        t=table(Html("<th>Name</th><th>Implementation</th>"), rows, css="table compact"),
    )


def _membership(summary: TrajectorySummary) -> Html:
    if summary.snapshots is None:
        return Html("")
    if summary.snapshots:
        items = join(
            html('<li><a class="mono" href="/snapshots/{id}">{id}</a></li>', id=snapshot)
            for snapshot in summary.snapshots
        )
        listed = html('<ul class="plain-list">{items}</ul>', items=items)
    else:
        listed = html(
            '<p class="muted">In no snapshot yet. Freeze it with <code>envharness snapshot '
            "create {id}</code> (or <code>POST /api/snapshots</code>).</p>",
            id=summary.id,
        )
    return html('<section class="card"><h2>Snapshots</h2>{l}</section>', l=listed)


def trajectory_sections(
    summary: TrajectorySummary,
    segments: Sequence[SegmentOut],
    trajectory: Trajectory | None,
    check: EvidenceCheck | None,
    *,
    recheck: str,
) -> Html:
    """Everything a trajectory page shows below its head (``recheck``: the URL that runs the
    digest check when this page did not)."""
    session_id = summary.session_id if trajectory is not None else None
    parts = [_states(summary, trajectory)]
    if trajectory is not None:
        parts.append(_binding(trajectory, check, recheck))
    parts.append(
        html(
            '<section class="card"><h2>Segments</h2><p class="muted small">Each uninterrupted '
            "stretch of execution, and what caused it.</p>{t}</section>",
            t=segments_table(segments, session_id),
        )
    )
    if trajectory is not None:
        parts += [_reward(trajectory), _provenance(trajectory), _who(trajectory)]
        parts.append(_membership(summary))
    else:
        parts.append(
            Html(
                '<section class="card"><h2>Your part</h2><p>As a participant you see the states '
                "every participant shares. The digest binding, the verified outcome and the "
                "snapshots are about everyone's records; your own records are on the Turns tab."
                "</p></section>"
            )
        )
    return join(parts)
