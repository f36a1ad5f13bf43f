"""Lineage as the viewer shows it: a session's parent and branches, and links to compare them.

A session's lineage — the session and checkpoint it was branched from, with the declared
intervention, and the branches made from it — is read through
:meth:`~envharness.service.access.Access.lineage`, the same call as the JSON API, and shown on
its Overview and Configuration (:func:`lineage_section`) and in its Turns. Each parent/branch
pair links to the Compare page (:mod:`.compare`).
"""

from __future__ import annotations

from envharness.service.pages.html import DASH, Html, html, join, value
from envharness.service.pages.layout import status_badge
from envharness.service.wire.sessions import (
    BranchLink,
    LineageOut,
)

__all__ = ["checkpoint_text", "compare_link", "intervention_text", "lineage_section"]


def compare_link(left: str, right: str, label: str) -> Html:
    return html(
        '<a class="compare-link" href="/compare?left={left}&amp;right={right}">{label} →</a>',
        left=left,
        right=right,
        label=label,
    )


def intervention_text(link: BranchLink) -> Html:
    """The declared intervention and its reason, or a dash where this reader may not see it."""
    if link.intervention is None and link.reason is None:
        return Html(f'<span class="muted">{DASH}</span>')
    reason = html('<div class="reason">“{r}”</div>', r=link.reason) if link.reason else Html("")
    return html("{v}{reason}", v=value(link.intervention), reason=reason)


def checkpoint_text(session_id: str, link: BranchLink) -> Html:
    """``checkpoint #38 · after turn 3`` with the record linked, in the parent's chain."""
    if link.checkpoint_turn is None:  # a reader that may not read the checkpoint record
        return html("checkpoint #{seq}", seq=link.checkpoint_seq)
    anchor = html(
        '<a href="/sessions/{s}/records/{seq}">checkpoint #{seq}</a>',
        s=session_id,
        seq=link.checkpoint_seq,
    )
    label = (
        html(' <span class="muted">“{l}”</span>', l=link.checkpoint_label)
        if link.checkpoint_label and link.checkpoint_label != f"turn {link.checkpoint_turn}"
        else Html("")
    )
    return html("{a} after turn {t}{label}", a=anchor, t=link.checkpoint_turn, label=label)


def lineage_section(session_id: str, lineage: LineageOut, *, always: bool) -> Html:
    """The Lineage card; for an original session without branches only when ``always``."""
    parent = lineage.parent
    if parent is None and not lineage.children and not always:
        return Html("")
    parts: list[Html] = []
    if parent is not None:
        parts.append(
            html(
                '<div class="branch-from"><div class="branch-line"><span class="tag tag-branch">'
                'branch</span> of <a class="mono" href="/sessions/{p}">{p}</a> {badge} from '
                "{checkpoint}</div>{change}<div>{compare}</div></div>",
                p=parent.session.id,
                badge=status_badge(parent.session.status),
                checkpoint=checkpoint_text(parent.session.id, parent),
                change=html(
                    '<div class="change"><span class="muted">Intervention</span> {i}</div>',
                    i=intervention_text(parent),
                )
                if parent.intervention is not None or parent.reason
                else Html(""),
                compare=compare_link(parent.session.id, session_id, "Compare with parent"),
            )
        )
    elif always:
        parts.append(Html('<p class="muted">An original session: not branched from another.</p>'))
    if lineage.children:
        rows = join(
            html(
                '<tr><td><a class="mono" href="/sessions/{c}">{c}</a></td><td>{badge}</td>'
                '<td class="num">{turns}</td><td>{checkpoint}</td><td>{change}</td>'
                "<td>{compare}</td></tr>",
                c=child.session.id,
                badge=status_badge(child.session.status),
                turns=child.session.turns_completed,
                checkpoint=checkpoint_text(session_id, child),
                change=intervention_text(child),
                compare=compare_link(session_id, child.session.id, "Compare"),
            )
            for child in lineage.children
        )
        parts.append(
            html(
                "<h3>Branches made from this session</h3>"
                '<table class="table branches"><thead><tr><th>Branch</th><th>Status</th>'
                '<th class="num">Turns</th><th>From</th><th>Intervention and reason</th><th></th>'
                "</tr></thead><tbody>{rows}</tbody></table>",
                rows=rows,
            )
        )
    elif always:
        parts.append(Html('<p class="muted">No branches have been made from it.</p>'))
    return html(
        '<section class="card lineage" id="lineage"><h2>Lineage</h2>{parts}</section>',
        parts=join(parts),
    )
