"""How well an experiment went, for the page that shows it first: the results card, and each
session's verdict for the grid.

The card renders :func:`envharness.scoring.experiment_report` — the report
``envharness experiments show`` prints — so the page and the command line never disagree.
Scores and findings are session-level records, withheld from a participant
(:mod:`envharness.service.access`): callers build the card and the verdicts only for a reader
who sees everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing

from envharness.records import Score, decode_payload
from envharness.scoring import ExperimentReport, FindingRef, MetricAggregate, PassRate
from envharness.scoring.aggregates import ScoreAggregate, aggregate_scores
from envharness.service.pages.html import DASH, Html, html, join, number
from envharness.service.pages.render import record_link
from envharness.service.pages.widgets import table
from envharness.store.locate import AnyStore

__all__ = [
    "FINDING_GROUPS",
    "headline",
    "latest_scores",
    "main_result",
    "rate_class",
    "results_card",
    "session_verdicts",
    "verdict_of",
]

FINDING_GROUPS = 10
"""Distinct findings (severity and title) the card lists, as ``experiments show`` does."""
_SEVERITIES = ("high", "medium", "low", "info")


async def latest_scores(store: AnyStore, experiment_id: str) -> dict[str, list[Score]]:
    """Each scored session's latest score report per version (versions sorted by name), as
    :func:`~envharness.scoring.experiment_report` counts them. Unscored sessions are absent."""
    latest: dict[str, dict[str, Score]] = {}
    rows = store.experiment_rows_so_far(experiment_id, kinds=("score",))
    async with aclosing(rows):
        async for row in rows:
            payload = decode_payload(row.payload)
            if isinstance(payload, Score) and row.session_id != experiment_id:
                latest.setdefault(row.session_id, {})[payload.version] = payload
    return {
        session: [scores[version] for version in sorted(scores)]
        for session, scores in latest.items()
    }


def session_verdicts(scores: dict[str, list[Score]]) -> dict[str, bool | None]:
    """Each scored session's verdict: ``passed`` of its first version that gives one (``None``
    where its reports only have metrics)."""
    return {
        session: next((score.passed for score in reports if score.passed is not None), None)
        for session, reports in scores.items()
    }


def headline(scores: dict[str, list[Score]]) -> ScoreAggregate | None:
    """The first score version's aggregate over every session, without intervals worth the
    name (one resample): for a list's columns, which show only pass counts and means."""
    found = aggregate_scores(
        (score for reports in scores.values() for score in reports), seed=0, resamples=1
    )
    return found[0] if found else None


def verdict_of(verdicts: dict[str, bool | None] | None, session_id: str) -> str:
    """The grid cell's verdict class: passed, failed (not passed), none (no verdict), or
    withheld (a participant's page)."""
    if verdicts is None:
        return "withheld"
    found = verdicts.get(session_id)
    return "none" if found is None else "passed" if found else "failed"


def main_result(report: ExperimentReport) -> tuple[PassRate | None, MetricAggregate | None]:
    """The experiment's headline: the overall pass rate and the main metric — the first metric
    of the first score version, both by name (as the report sorts them; the experiments list
    uses the same rule)."""
    if not report.scores:
        return None, None
    first = report.scores[0]
    return first.pass_rate, first.metrics[0] if first.metrics else None


def results_card(report: ExperimentReport) -> Html:
    """Pass rate and metrics overall, per scenario and per participant, then the findings."""
    if not report.scores:
        return html(
            '<section class="card results-card" id="results"><h2>Results</h2>'
            '<p class="muted">No score reports yet: a session is scored when it completes'
            "{unscored}.</p>{findings}</section>",
            unscored=f" ({report.unscored} unscored)" if report.unscored else "",
            findings=_findings(report),
        )
    rate, metric = main_result(report)
    headline = [_rate_stat(rate)] if rate is not None else []
    if metric is not None:
        headline.append(
            html(
                '<div class="stat"><div class="stat-n">{mean}</div><div class="stat-l">mean '
                '{name} {interval} <span class="muted">n={n}</span></div></div>',
                mean=number(metric.mean),
                name=metric.name,
                interval=_interval(metric),
                n=metric.n,
            )
        )
    tables = join(_version_table(report, aggregate.version) for aggregate in report.scores)
    return html(
        '<section class="card results-card" id="results"><div class="card-head"><h2>Results'
        '</h2><span class="muted small">{confidence}% intervals: percentile bootstrap '
        "({resamples} resamples), Wilson for pass rates · <code>envharness experiments show "
        '{id}</code></span></div><div class="stats results-headline">{headline}</div>'
        "{tables}{findings}</section>",
        confidence=f"{report.confidence * 100:g}",
        resamples=report.resamples,
        id=report.id,
        headline=join(headline),
        tables=tables,
        findings=_findings(report),
    )


def rate_class(rate: PassRate) -> str:
    """``results-all`` (green), ``results-none`` (red) or ``results-some`` (amber): 0 of N and
    N of N must never look alike."""
    if rate.passed == rate.judged:
        return "results-all"
    return "results-some" if rate.passed else "results-none"


def _rate_stat(rate: PassRate) -> Html:
    verdict = rate_class(rate)
    return html(
        '<div class="stat"><div class="stat-n {verdict}" data-passed="{k}" data-judged="{n}">'
        '{k}<span class="of"> / {n}</span></div><div class="stat-l">passed · {pct}</div></div>',
        verdict=verdict,
        k=rate.passed,
        n=rate.judged,
        pct=_percent(rate),
    )


def _percent(rate: PassRate) -> str:
    return f"{rate.rate:.0%} [{rate.ci_low:.0%}, {rate.ci_high:.0%}]"


def _interval(metric: MetricAggregate) -> Html:
    if metric.ci_low is None or metric.ci_high is None:
        return Html("")
    return html("[{low}, {high}]", low=number(metric.ci_low), high=number(metric.ci_high))


def _scopes(report: ExperimentReport) -> list[tuple[str, Sequence[ScoreAggregate]]]:
    scopes: list[tuple[str, Sequence[ScoreAggregate]]] = [
        (s.id, s.scores) for s in report.scenarios
    ]
    if len(report.scenarios) > 1:
        scopes.append(("all", report.scores))
    return scopes


def _version_table(report: ExperimentReport, version: str) -> Html:
    """Scenarios (then all) by the version's metrics and pass rate; per participant below."""
    names: list[str] = []
    scored: list[tuple[str, ScoreAggregate | None]] = []
    for scope, aggregates in _scopes(report):
        aggregate = next((a for a in aggregates if a.version == version), None)
        scored.append((scope, aggregate))
        for metric in aggregate.metrics if aggregate is not None else ():
            if metric.name not in names:
                names.append(metric.name)
    head = html(
        "<th>Scenario</th><th>Passed</th>{metrics}",
        metrics=join(html('<th class="num">{m}</th>', m=name) for name in names),
    )
    rows = [
        html(
            '<tr><td class="mono">{scope}</td><td>{rate}</td>{cells}</tr>',
            scope=scope,
            rate=_rate_text(aggregate.pass_rate if aggregate is not None else None),
            cells=join(_metric_cell(aggregate, name) for name in names),
        )
        for scope, aggregate in scored
    ]
    participants = [
        html(
            '<tr><td class="mono">{scope}</td><td><b>{who}</b></td><td>{metric}</td>'
            '<td class="num">{value}</td></tr>',
            scope=scope,
            who=participant.participant,
            metric=metric.name,
            value=_metric_text(metric),
        )
        for scope, aggregate in scored
        if aggregate is not None
        for participant in aggregate.participants
        for metric in participant.metrics
    ]
    below = Html("")
    if participants:
        below = html(
            "<h3>Per participant ({v})</h3>{t}",
            v=version,
            t=table(
                Html("<th>Scenario</th><th>Participant</th><th>Metric</th><th>Mean [CI] (n)</th>"),
                participants,
            ),
        )
    return html(
        '<h3>Scores <span class="mono">{v}</span>: mean [CI] (n)</h3>{t}{below}',
        v=version,
        t=table(head, rows),
        below=below,
    )


def _rate_text(rate: PassRate | None) -> Html:
    if rate is None:
        return Html(DASH)
    return html(
        '<span class="results-rate {v}">{k} of {n}</span> <span class="muted small">{pct}</span>',
        v=rate_class(rate),
        k=rate.passed,
        n=rate.judged,
        pct=_percent(rate),
    )


def _metric_cell(aggregate: ScoreAggregate | None, name: str) -> Html:
    metric = next((m for m in aggregate.metrics if m.name == name), None) if aggregate else None
    return html('<td class="num">{v}</td>', v=_metric_text(metric) if metric else DASH)


def _metric_text(metric: MetricAggregate) -> Html:
    missing = f", {metric.missing} missing" if metric.missing else ""
    return html(
        '{mean} {interval} <span class="muted small">({n}{missing})</span>',
        mean=number(metric.mean),
        interval=_interval(metric),
        n=metric.n,
        missing=missing,
    )


def _findings(report: ExperimentReport) -> Html:
    """Findings grouped by severity and title, most severe and most frequent first, each group
    linking to the records where it was recorded."""
    groups: dict[tuple[str, str], list[FindingRef]] = {}
    for scenario in report.scenarios:
        for found in scenario.findings:
            groups.setdefault((found.severity, found.title), []).append(found)
    if not groups:
        return Html("")
    ordered = sorted(
        groups.items(), key=lambda item: (_SEVERITIES.index(item[0][0]), -len(item[1]))
    )
    items = [
        html(
            '<li><span class="results-severity results-{severity}">{severity}</span> <b>{title}'
            "</b>{times} {links}</li>",
            severity=severity,
            title=title,
            times=html(" &times; {n}", n=len(group)) if len(group) > 1 else "",
            links=join(
                (
                    html(
                        '<span class="mono small">…{sid}</span>{link}',
                        sid=found.session_id[-6:],
                        link=record_link(found.session_id, found.seq),
                    )
                    for found in group[:FINDING_GROUPS]
                ),
                Html(" "),
            ),
        )
        for (severity, title), group in ordered[:FINDING_GROUPS]
    ]
    more = Html("")
    if len(ordered) > FINDING_GROUPS:
        more = html(
            '<p class="muted small">… {n} more: <code>envharness experiments show --json</code> '
            "lists every finding.</p>",
            n=len(ordered) - FINDING_GROUPS,
        )
    return html(
        '<h3>Findings</h3><ul class="results-findings">{items}</ul>{more}',
        items=join(items),
        more=more,
    )
