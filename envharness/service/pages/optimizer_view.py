"""Drawing pieces of the Harnesses pages: patch code, diffs, figures, verdicts, measurements.

Patch code is engineer-written text — a model may have written it, and a string in it may hold
``</pre><script>`` — so it is only ever inserted through :func:`~.html.html`,
escaped, inside ``<pre><code>``; nothing here marks patch text as :class:`Html`.
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.optimizer import CodeHook, LedgerEntry, MeasurementSummary
from envharness.records import CandidateVerdict
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.widgets import table, tabs
from envharness.service.wire.optimizer import MeasurementFigure

__all__ = [
    "code_hooks_block",
    "diff_block",
    "experiment_link",
    "figure_text",
    "harness_nav",
    "hooks_fired",
    "ledger_table",
    "reward_text",
    "run_link",
    "verdict_tag",
    "version_link",
]

_PARTS = (
    ("versions", "Versions", "/harnesses"),
    ("runs", "Optimizer runs", "/harnesses/runs"),
    ("diff", "Diff", "/harnesses/diff"),
)
_VERDICT_TAGS = {
    "accepted": "tag-ok",
    "rejected": "tag-blocked",
    "invalid": "tag-hint",
    "failed": "tag-hint",
    "infrastructure": "",
}


def harness_nav(active: str) -> Html:
    """Versions, Optimizer runs, Diff: the parts of the Harnesses destination."""
    return tabs(_PARTS, active)


def version_link(version: str | None, *, unpatched: str = "the unpatched harness") -> Html:
    if version is None:
        return html('<span class="muted">{u}</span>', u=unpatched)
    if version.startswith("harness-v"):
        return html('<a class="nowrap" href="/harnesses/versions/{v}">{v}</a>', v=version)
    return html('<span class="mono">{v}</span>', v=version)


def run_link(run_id: str, label: str | None = None) -> Html:
    return html('<a class="mono" href="/harnesses/runs/{id}">{l}</a>', id=run_id, l=label or run_id)


def experiment_link(experiment_id: str | None) -> Html:
    if experiment_id is None:
        return Html(DASH)
    return html('<a class="mono" href="/experiments/{e}">{e}</a>', e=experiment_id)


def figure_text(found: MeasurementFigure | MeasurementSummary | None) -> Html:
    """``5/12 passed · mean 0.417``."""
    if found is None:
        return Html(DASH)
    return html(
        '<span class="fig"><b>{p}</b>/{t} passed · mean {m}</span>',
        p=found.passed,
        t=found.total,
        m=f"{found.mean_reward:.3f}",
    )


def reward_text(
    mean: float | None, interval: tuple[float, float] | None, p_value: float | None
) -> Html:
    """``+0.417 [+0.167, +0.667]`` and the sign test's p-value, as the CLI prints them."""
    if mean is None:
        return Html(DASH)
    tone = "up" if mean > 0 else "down" if mean < 0 else ""
    shown = html('<span class="delta"><span class="{t}">{m}</span></span>', t=tone,
                 m=f"{mean:+.3f}")  # fmt: skip
    if interval is not None:
        shown = html(
            '{s} <span class="muted">[{lo}, {hi}]</span>',
            s=shown,
            lo=f"{interval[0]:+.3f}",
            hi=f"{interval[1]:+.3f}",
        )
    if p_value is not None:
        shown = html('{s} <span class="small muted">p={p}</span>', s=shown, p=f"{p_value:.3g}")
    return shown


def verdict_tag(verdict: CandidateVerdict | None) -> Html:
    if verdict is None:
        return Html('<span class="tag">pending</span>')
    return html(
        '<span class="tag verdict {c}">{s}</span>',
        c=_VERDICT_TAGS.get(verdict.status, ""),
        s=verdict.status,
    )


def code_hooks_block(hooks: Sequence[CodeHook], *, inherited: int = 0, parent: str = "") -> Html:
    """Each code hook under a caption naming it (and why it is there), its source escaped; the
    first ``inherited`` came from ``parent``, the others are new in this patch."""
    if not hooks:
        return Html('<p class="muted">No code hooks: the unpatched harness.</p>')
    return join(
        html(
            '<figure class="hook-code"><figcaption><span class="tag">{hook}</span> '
            'hook {n}{origin}{why}</figcaption><pre class="code"><code>{code}</code></pre>'
            "</figure>",
            hook=hook.hook,
            n=index,
            origin=(
                html(' <span class="muted">from {p}</span>', p=parent)
                if index <= inherited
                else Html(' <span class="tag tag-ok">new</span>')
                if inherited or parent
                else ""
            ),
            why=html(" — {d}", d=hook.description) if hook.description else "",
            code=hook.code.rstrip("\n"),
        )
        for index, hook in enumerate(hooks, 1)
    )


def diff_block(lines: Sequence[str]) -> Html:
    """A unified diff, a line per line, added and removed lines marked (and escaped)."""

    def kind(line: str) -> str:
        if line.startswith(("+++", "---")):
            return "diff-file"
        if line.startswith("@@"):
            return "diff-hunk"
        if line.startswith("+"):
            return "diff-add"
        if line.startswith("-"):
            return "diff-del"
        return "diff-same"

    return html(
        '<pre class="code diff"><code>{lines}</code></pre>',
        lines=join(
            (html('<span class="{k}">{t}</span>', k=kind(line), t=line) for line in lines), "\n"
        ),
    )


def hooks_fired(summary: MeasurementSummary | None) -> Html:
    """Which hooks intervened in a rerun, how often, and how many hook calls failed."""
    if summary is None:
        return Html('<p class="muted">Not measured.</p>')
    rows = (
        html(
            '<tr><td class="mono">{name}</td><td class="mono">{effect}</td>'
            '<td class="num">{n}</td></tr>',
            name=name.partition(":")[0],
            effect=name.partition(":")[2] or DASH,
            n=count,
        )
        for name, count in sorted(summary.hooks.items())
    )
    errors = html(
        '<p class="{c}">{n} hook call(s) failed (a failed hook counts as the patch\'s failure)</p>',
        c="bad-text" if summary.hook_errors else "muted small",
        n=summary.hook_errors,
    )
    if not summary.hooks:
        return html('<p class="muted">No hook intervened in this rerun.</p>{e}', e=errors)
    head = Html('<th>Hook</th><th>Effect</th><th class="num">Times</th>')
    return html("{t}{e}", t=table(head, rows, css="table compact"), e=errors)


def ledger_table(ledger: Sequence[LedgerEntry], run_id: str, *, empty: str) -> Html:
    """The regression ledger: each previously solved scenario a candidate broke."""
    if not ledger:
        return html('<p class="muted">{e}</p>', e=empty)
    head = Html(
        '<th class="num">Iteration</th><th class="num">Candidate</th><th>Scenario broken</th>'
        "<th>Suite</th>"
    )
    rows = (
        html(
            '<tr><td class="num"><a href="/harnesses/runs/{r}#iteration-{i}">{i}</a></td>'
            '<td class="num"><a href="/harnesses/runs/{r}#candidate-{i}-{c}">{c}</a></td>'
            "<td><b>{s}</b></td><td>{suite}</td></tr>",
            r=run_id,
            i=entry.iteration,
            c=entry.candidate,
            s=entry.scenario,
            suite=entry.suite.replace("_", "-"),
        )
        for entry in ledger
    )
    return table(head, rows, css="table compact")


def value_text(found: float | None) -> Html:
    return Html(DASH) if found is None else html("{v}", v=number(found))
