"""The Harnesses destination: accepted versions, a version, optimizer runs, a run, a diff.

Each page reads what the JSON API reads (:mod:`~envharness.service.http.optimizer`: the
command line's ``harness_version`` and ``diff_versions``, and a run's history derived from its
chain) and draws it with :mod:`.optimizer_view`. Patch code is untrusted text and is shown
escaped. The rerun experiments are ordinary experiments, so every one links to its experiment
page. Versions and runs are about every scenario, so these pages are for admin and viewer
tokens.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from starlette.responses import Response

from envharness.optimizer import HarnessPatch, MeasurementSummary, PatchError
from envharness.optimizer.history import CandidateRecord, IterationRecord, RunHistory
from envharness.service.http.optimizer import (
    VERSION_PATTERN,
    Versions,
    code_hooks,
    diff,
    exact_run,
    exact_version,
    run_summary,
    version_detail,
)
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.layout import page, status_badge, when
from envharness.service.pages.optimizer_view import (
    code_hooks_block,
    diff_block,
    experiment_link,
    figure_text,
    harness_nav,
    hooks_fired,
    ledger_table,
    reward_text,
    run_link,
    value_text,
    verdict_tag,
    version_link,
)
from envharness.service.pages.widgets import detail_head, kv_card, page_head, table
from envharness.service.params import NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import READERS, Call, Endpoint, viewer_page
from envharness.service.wire.optimizer import HarnessVersionSummary, OptimizerRunSummary

__all__ = ["HARNESS_PAGES"]

_ACTIVE = "harnesses"
_NO_VERSIONS = Html(
    '<p class="empty-state">No harness versions yet. <code>envharness --store PATH selftest'
    "</code> learns one offline (the support-desk demo); <code>envharness --store PATH "
    "optimize …</code> learns them for your agent (docs/optimizer.md).</p>"
)


class DiffPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    old: (
        Annotated[
            str,
            msgspec.Meta(pattern=VERSION_PATTERN, max_length=200,
                         description="The older version (default: the newer one's parent)."),
        ]
        | None
    ) = None  # fmt: skip
    new: (
        Annotated[
            str,
            msgspec.Meta(pattern=VERSION_PATTERN, max_length=200,
                         description="The newer version (default: the latest)."),
        ]
        | None
    ) = None  # fmt: skip


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _listing(
    call: Call[Any], *, tab: str, title: str, head: Html, heading: str, note: str, found: Html
) -> Response:
    """A page of the Harnesses destination: its head and tabs, then one card of what it lists
    under ``heading`` (and a ``note`` on how to read it)."""
    body = html(
        '{head}{nav}<section class="card"><div class="card-head"><h2>{heading}</h2>'
        '<span class="muted">{note}</span></div>{found}</section>',
        head=head,
        nav=harness_nav(tab),
        heading=heading,
        note=note,
        found=found,
    )
    return page(call.service, call.principal, title=title, body=body, active=_ACTIVE)


# -- versions --------------------------------------------------------------------------------


def _version_row(v: HarnessVersionSummary) -> Html:
    return html(
        '<tr><td><a href="/harnesses/versions/{v}"><b>{v}</b></a><div class="mono small muted">'
        '{digest}</div></td><td>{parent}</td><td>{run}<div class="small muted">{env} · '
        "iteration {i}, candidate {c}</div></td><td>{before}</td><td>{after}</td>"
        '<td>{reward}</td><td class="num">{hooks}</td><td>{at}</td></tr>',
        v=v.version,
        digest=v.digest[:12],
        parent=version_link(v.parent, unpatched="unpatched"),
        run=run_link(v.run_id, v.run_name),
        env=v.environment,
        i=v.iteration,
        c=v.candidate,
        before=figure_text(v.before),
        after=figure_text(v.after),
        reward=reward_text(v.mean_reward, v.interval, v.p_value),
        hooks=v.hooks,
        at=when(v.created_at),
    )


async def versions_page(call: Call[NoParameters]) -> Response:
    found = await Versions(call.service.store).summaries()
    head = Html(
        "<th>Version</th><th>Parent</th><th>Optimizer run</th><th>Before</th><th>After</th>"
        '<th>Reward (95% CI, sign test)</th><th class="num">Hooks</th><th>Accepted (UTC)</th>'
    )
    return _listing(
        call,
        tab="versions",
        title="Harnesses",
        head=page_head(
            "Harnesses",
            "Versions of the harness the optimizer accepted: small hook patches around a "
            "frozen agent, each kept only because reruns of the same scenarios with the same "
            "seeds improved and broke nothing that passed.",
        ),
        heading=_count(len(found), "version"),
        note=Html("newest first; before and after over the run's scenarios"),
        found=table(head, (_version_row(v) for v in reversed(found)), css="table harness-versions")
        if found
        else _NO_VERSIONS,
    )


def _measurement_row(what: Html | str, summary: MeasurementSummary | None) -> Html:
    if summary is None:
        return html("<tr><td>{w}</td><td>{d}</td><td></td><td></td></tr>", w=what, d=DASH)
    return html(
        "<tr><td>{w}</td><td>{e}</td><td>{v}</td><td>{f}</td></tr>",
        w=what,
        e=experiment_link(summary.experiment_id),
        v=version_link(summary.version, unpatched="unpatched")
        if summary.version is None or summary.version.startswith("harness-v")
        else html('<span class="mono small">{v}</span>', v=summary.version),
        f=figure_text(summary),
    )


def _scenario_table(before: MeasurementSummary, after: MeasurementSummary | None) -> Html:
    rows = []
    for scenario, old in before.values.items():
        new = after.values.get(scenario) if after is not None else None
        change = (new or 0.0) - (old or 0.0)
        tone = "up" if change > 0 else "down" if change < 0 else ""
        failure = after.failures.get(scenario) if after is not None else None
        rows.append(
            html(
                '<tr><td><b>{s}</b></td><td class="num">{o}</td><td class="num">{n}</td>'
                '<td class="num delta"><span class="{t}">{c}</span></td><td>{f}</td></tr>',
                s=scenario,
                o=value_text(old),
                n=value_text(new) if after is not None else DASH,
                t=tone,
                c=f"{change:+.3g}" if change else "=",
                f=html('<span class="tag tag-blocked">{f}</span>', f=failure) if failure else "",
            )
        )
    head = Html(
        '<th>Scenario</th><th class="num">Before</th><th class="num">After</th>'
        '<th class="num">Change</th><th>Failed because of</th>'
    )
    return table(head, rows, css="table compact")


async def version_page(call: Call[NoParameters]) -> Response:
    store = call.service.store
    detail = await version_detail(store, call.path("version"))
    version, evidence = detail.version, detail.evidence
    inherited = 0
    if version.parent is not None:
        inherited = len(code_hooks(await exact_version(store, version.parent)))
    facts = [
        html("from {p}", p=version_link(version.parent)),
        html(
            "run {r} (iteration {i}, candidate {c})",
            r=run_link(version.run_id, detail.run.name),
            i=version.iteration,
            c=version.candidate,
        ),
        html("environment <b>{e}</b>", e=version.environment or detail.run.environment),
        html("accepted {t}", t=when(version.created_at)),
    ]
    diff_link = (
        html(
            '<a class="button" href="/harnesses/diff?old={p}&amp;new={v}">Diff with {p}</a> ',
            p=version.parent,
            v=version.version,
        )
        if version.parent is not None
        else Html("")
    )
    reward = [
        ("Reward over its parent", reward_text(version.mean_reward, version.interval, None)),
        ("Paired sign test", html("p = {p}", p=f"{version.p_value:.3g}")
         if version.p_value is not None else Html(DASH)),
        ("Before", figure_text(evidence.before)),
        ("After", figure_text(evidence.after)),
        ("Scenarios it improved", ", ".join(evidence.improved) or DASH),
    ]  # fmt: skip
    cost = [
        ("Engineer tokens", f"{version.engineer_tokens:,}"),
        ("Rerun tokens", f"{version.rerun_tokens:,}"),
        ("Wall time", f"{number(version.seconds)} s"),
    ]
    experiments = [
        _measurement_row(
            html("compared with: {v}", v=version_link(version.parent)), evidence.before
        ),
        _measurement_row(Html("<b>its rerun</b>"), evidence.after),
        *(
            _measurement_row(f"its {check.role.replace('_', '-')} check", check)
            for check in evidence.checks
        ),
    ]
    more = html(
        '<p class="facts mono small">{d}</p><p>{diff}<span class="muted small">the same as '
        "<code>envharness harness show {v}</code></span></p>",
        d=version.digest,
        diff=diff_link,
        v=version.version,
    )
    spent = html(
        '<p class="muted small">Spent since {parent}: the engineer\'s answers and every rerun '
        "of the iterations that led here.</p>",
        parent=version.parent or "the start of the run",
    )
    body = html(
        '{head}<div class="columns">{reward}{cost}</div>'
        '<section class="card"><h2>The rerun experiments that justified it</h2>{experiments}'
        '<p class="muted small">The same scenarios, trials and seed as the baseline, so each '
        "scenario is paired with itself.</p></section>"
        '<section class="card"><h2>Scenario by scenario</h2>{scenarios}</section>'
        '<div class="columns"><section class="card"><h2>Hooks fired in its rerun</h2>{fired}'
        '</section><section class="card"><h2>Regressions</h2>{ledger}</section></div>'
        '<section class="card"><div class="card-head"><h2>The patch</h2><span class="muted">'
        "{n} code hook(s), stacked in the order they run</span></div>{code}</section>",
        head=detail_head([("/harnesses", "Harnesses")], version.version, facts, more),
        reward=kv_card("Reward", reward),
        cost=kv_card("Cost", cost, spent),
        experiments=table(
            Html("<th>Measurement</th><th>Experiment</th><th>Harness</th><th>Figures</th>"),
            experiments,
        ),
        scenarios=_scenario_table(evidence.before, evidence.after),
        fired=hooks_fired(evidence.after),
        ledger=ledger_table(
            evidence.ledger,
            version.run_id,
            empty="No candidate broke a previously solved scenario on the way to this version.",
        ),
        n=len(detail.hooks),
        code=code_hooks_block(detail.hooks, inherited=inherited, parent=version.parent or ""),
    )
    return page(call.service, call.principal, title=version.version, body=body, active=_ACTIVE)


# -- runs ------------------------------------------------------------------------------------


def _run_row(run: OptimizerRunSummary) -> Html:
    return html(
        '<tr><td><a href="/harnesses/runs/{id}"><b>{name}</b></a><div class="mono small muted">'
        '{id}</div></td><td>{status}</td><td>{env}<div class="small muted">{eng}</div></td>'
        '<td class="num">{i}</td><td class="num">{c}</td><td>{base}</td><td>{final}</td>'
        "<td>{versions}</td><td>{at}</td></tr>",
        id=run.id,
        name=run.name,
        status=status_badge(run.status),
        env=run.environment,
        eng=run.engineer,
        i=run.iterations,
        c=run.candidates,
        base=figure_text(run.baseline),
        final=figure_text(run.final),
        versions=join((version_link(v) for v in run.versions), ", ") or DASH,
        at=when(run.created_at),
    )


async def runs_page(call: Call[NoParameters]) -> Response:
    store = call.service.store
    found = [run_summary(await exact_run(store, info.id)) for info in await store.optimizer_runs()]
    head = Html(
        '<th>Run</th><th>Status</th><th>Environment, engineer</th><th class="num">Iterations'
        '</th><th class="num">Candidates</th><th>Baseline</th><th>Final</th><th>Versions</th>'
        "<th>Started (UTC)</th>"
    )
    return _listing(
        call,
        tab="runs",
        title="Optimizer runs",
        head=page_head(
            "Optimizer runs",
            "Each run: a baseline, then iterations of candidate patches from an engineer, each "
            "rerun over the same scenarios and judged against the accepted harness.",
        ),
        heading=_count(len(found), "optimizer run"),
        note="newest first",
        found=table(head, (_run_row(run) for run in reversed(found))) if found else _NO_VERSIONS,
    )


def _candidate_row(run_id: str, iteration: int, item: CandidateRecord) -> Html:
    verdict = item.verdict
    reason = verdict.reason if verdict is not None else (item.error or item.problem or "")
    rerun = item.rerun
    return html(
        '<tr id="candidate-{i}-{c}"><td class="num"><a href="#candidate-{i}-{c}">{c}</a></td>'
        '<td>{tag}</td><td>{reward}</td><td>{experiment}<div class="small">{fig}</div></td>'
        '<td class="small">{fired}</td><td class="small">{reason}</td></tr>',
        i=iteration,
        c=item.candidate,
        tag=verdict_tag(verdict),
        reward=reward_text(
            verdict.mean_reward if verdict is not None else None,
            verdict.interval if verdict is not None else None,
            verdict.p_value if verdict is not None else None,
        ),
        experiment=experiment_link(rerun.experiment_id) if rerun is not None else DASH,
        fig=figure_text(rerun) if rerun is not None else "",
        fired=", ".join(f"{name}: {n}" for name, n in sorted(rerun.hooks.items()))
        if rerun is not None and rerun.hooks
        else DASH,
        reason=reason,
    )


def _candidate_code(iteration: int, item: CandidateRecord) -> Html:
    """What the candidate proposed: its patch as code, or the engineer's answer as it came."""
    if item.patch is not None:
        try:
            shown = code_hooks_block(HarnessPatch.from_dict(item.patch).hooks)
        except PatchError as error:
            shown = html('<div class="callout bad">{e}</div>', e=str(error))
    elif item.answer:
        shown = html('<pre class="code"><code>{a}</code></pre>', a=item.answer)
    else:
        shown = html('<p class="muted">{e}</p>', e=item.error or "no answer")
    return html(
        '<details class="raw candidate-code"><summary>Candidate {c}: {what}</summary>{shown}'
        "</details>",
        c=item.candidate,
        what="its patch (before stacking)" if item.patch is not None else "the engineer's answer",
        shown=shown,
    )


def _iteration(run: RunHistory, iteration: IterationRecord) -> Html:
    if not iteration.decided:
        state = Html('<span class="tag">being judged</span>')
    elif iteration.accepted_version is not None:
        state = html('<span class="tag tag-ok">accepted</span> {v}',
                     v=version_link(iteration.accepted_version))  # fmt: skip
    else:
        state = Html('<span class="tag">nothing accepted</span>')
    head = Html(
        '<th class="num">#</th><th>Verdict</th><th>Reward (95% CI, sign test)</th><th>Rerun</th>'
        "<th>Hooks fired</th><th>Reason</th>"
    )
    rows = (_candidate_row(run.id, iteration.iteration, c) for c in iteration.candidates)
    spent = (
        html(
            "engineer {e} tokens · reruns {r} tokens · {s} s",
            e=f"{iteration.engineer_tokens:,}",
            r=f"{iteration.rerun_tokens:,}",
            s=f"{iteration.seconds:.1f}",
        )
        if iteration.decided
        else ""
    )
    return html(
        '<section class="card iteration" id="iteration-{n}"><div class="card-head"><h2>'
        'Iteration {n} {state}</h2><span class="muted">on top of {base} · {spent}</span>'
        "</div><p>{reason}</p>{candidates}{code}</section>",
        n=iteration.iteration,
        state=state,
        base=version_link(iteration.base_version),
        spent=spent,
        reason=iteration.reason or "",
        candidates=table(head, rows, css="table candidates"),
        code=join(_candidate_code(iteration.iteration, c) for c in iteration.candidates),
    )


async def run_page(call: Call[NoParameters]) -> Response:
    run = await exact_run(call.service.store, call.path("run_id"))
    config = run.config
    settings = [
        ("Candidates per iteration", str(config.candidates)),
        ("Iterations at most", str(config.iterations)),
        ("Turns, trials, seed", f"{config.turns}, {config.trials}, {config.seed}"),
        ("Sandbox, capacity", f"{config.sandbox}, {config.capacity} rerun(s) at once"),
        ("Significance gate", f"alpha {config.alpha}" if config.alpha is not None
         else "none (reported only)"),
        ("Scenarios", f"{len(config.scenarios)} training, {len(config.held_out)} held-out, "
                      f"{len(config.regression)} regression"),
        ("Started from", version_link(config.base_version)),
        ("Metric", config.metric or "pass/fail"),
    ]  # fmt: skip
    outcome = [
        ("Baseline", html("{f} · {e}", f=figure_text(run.baseline),
                          e=experiment_link(run.baseline.experiment_id if run.baseline else None))),
        ("Final", html("{f} · {v}", f=figure_text(run.final),
                       v=version_link(run.versions[-1].version if run.versions else None))),
        ("Versions accepted", join((version_link(v.version) for v in run.versions), ", ")
         or Html(DASH)),
    ]  # fmt: skip
    if run.held_out is not None:
        outcome.append(("Held-out split", figure_text(run.held_out)))
    why = (
        html('<div class="callout warn"><b>{s}.</b> {r}</div>', s=run.status, r=run.reason)
        if run.reason and run.status != "completed"
        else Html("")
    )
    iterations = (
        join(_iteration(run, i) for i in run.iterations)
        if run.iterations
        else Html('<section class="card"><p class="muted">No iteration yet.</p></section>')
    )
    facts = [
        html('<span class="mono">{id}</span>', id=run.id),
        html("environment <b>{env}</b>", env=run.environment),
        html("engineer <b>{eng}</b>", eng=run.engineer),
        html("started {t}", t=when(run.created_at)),
        html("last record {t}", t=when(run.updated_at)),
    ]
    body = html(
        '{head}{why}<div class="columns">{outcome}{settings}</div>'
        '<section class="card"><h2>Regression ledger</h2>{ledger}</section>{iterations}',
        head=detail_head(
            [("/harnesses", "Harnesses"), ("/harnesses/runs", "Optimizer runs")],
            html("{name} {status}", name=run.name, status=status_badge(run.status)),
            facts,
        ),
        why=why,
        outcome=kv_card("Outcome", outcome),
        settings=kv_card("Configuration", settings),
        ledger=ledger_table(
            run.ledger, run.id, empty="No candidate broke a previously solved scenario."
        ),
        iterations=iterations,
    )
    return page(call.service, call.principal, title=run.name, body=body, active=_ACTIVE)


# -- diff ------------------------------------------------------------------------------------


async def diff_page(call: Call[DiffPageQuery]) -> Response:
    store = call.service.store
    parents = {info.version: info.parent for info in await store.harness_versions()}
    known = list(parents)
    new = call.query.new or (known[-1] if known else None)
    old = call.query.old or (parents.get(new) if new is not None else None)
    if call.query.new is not None and call.query.new not in parents:
        raise HTTPProblem(404, f"no harness version {call.query.new!r} here", parameter="new")
    result = Html("")
    if not known:
        result = _NO_VERSIONS
    elif old is None or new is None:
        result = html(
            '<p class="muted">{v} stacks on the unpatched harness: <a href="/harnesses/'
            'versions/{v}">its page</a> shows its whole patch. Choose two versions above.</p>',
            v=new or "",
        )
    else:
        found = await diff(store, old, new)
        result = (
            html(
                '<div class="callout plain">{o} and {n} have the same hooks.</div>',
                o=found.old,
                n=found.new,
            )
            if found.same
            else diff_block(found.lines)
        )

    def options(chosen: str | None) -> Html:
        return join(
            html(
                '<option value="{v}"{s}>{v}</option>',
                v=v,
                s=Html(" selected") if v == chosen else "",
            )
            for v in known
        )

    form = html(
        '<form class="range" method="get" action="/harnesses/diff"><label>old <select '
        'name="old">{o}</select></label><label>new <select name="new">{n}</select></label>'
        '<button class="button" type="submit">Diff</button></form>',
        o=options(old),
        n=options(new),
    )
    return _listing(
        call,
        tab="diff",
        title="Diff",
        head=page_head("Diff two versions", "A unified diff of two harness versions' code."),
        heading=f"{old} → {new}" if old and new else "Diff",
        note=Html("the same as <code>envharness harness diff OLD NEW</code>"),
        found=html("{form}{result}", form=form if known else "", result=result),
    )


HARNESS_PAGES: tuple[Endpoint, ...] = (
    viewer_page(
        "/harnesses", versions_page, "harnessesPage",
        "Harnesses: accepted versions, their runs, before and after, reward",
        roles=READERS, errors=(409,),
    ),
    viewer_page(
        "/harnesses/versions/{version}", version_page, "harnessVersionPage",
        "One harness version: its code, the reruns behind it, reward, regressions",
        roles=READERS, errors=(404, 409),
    ),
    viewer_page(
        "/harnesses/runs", runs_page, "optimizerRunsPage",
        "Optimizer runs: status, baseline and final, versions",
        roles=READERS, errors=(409,),
    ),
    viewer_page(
        "/harnesses/runs/{run_id}", run_page, "optimizerRunPage",
        "One optimizer run: its iterations and every candidate's verdict and reason",
        roles=READERS, errors=(404, 409),
    ),
    viewer_page(
        "/harnesses/diff", diff_page, "harnessDiffPage",
        "A diff of two harness versions' code",
        roles=READERS, query=DiffPageQuery, errors=(404, 409),
    ),
)  # fmt: skip
