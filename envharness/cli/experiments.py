"""``envharness experiments`` and ``envharness experiments show``: experiments and their scores.

The list comes from the store's experiment index with session counts from the session index;
``show`` prints :func:`envharness.scoring.experiment_report` — the same report the Python API's
``harness.report(id)`` returns — as text, or whole as JSON: configuration, what it spent,
sessions, scores and findings.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated

import anyio
import msgspec
import typer

from envharness.cli.edge import CliError
from envharness.cli.options import JsonLines, acting_group, deprecated_form
from envharness.cli.render import printable
from envharness.cli.state import CliState
from envharness.scoring import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    ExperimentReport,
    FindingCounts,
    FindingRef,
    MetricAggregate,
    PassRate,
    ScoreAggregate,
    experiment_report,
)
from envharness.scoring.aggregates import CostTotals, SessionCosts
from envharness.store import ExperimentInfo, SessionCounts
from envharness.store.locate import describe, reading_store

__all__ = [
    "app",
    "experiment_lines",
    "experiment_table",
    "experiments",
    "experiments_list",
    "experiments_show",
    "result_lines",
]

MAX_RESAMPLES = 1_000_000
"""More would only take longer: past some thousands, the bounds move by less than they show."""
FINDING_GROUPS = 10
"""Distinct findings (severity and title) ``show`` lists before pointing at ``--json``."""
COST_ROWS = 10
"""Sessions ``show`` lists in its cost table (the most expensive) before pointing at
``--json``."""

_LIST_COLUMNS = ("id", "name", "status", "completed", "failed", "stopped", "running", "total")
_STATUS_COLUMNS = ("scenario", "sessions", "completed", "failed", "stopped", "running", "findings")
_COST_COLUMNS = (
    "session",
    "scenario",
    "status",
    "calls",
    "tokens",
    "usd",
    "call time",
    "wall time",
)
_SEVERITIES = ("high", "medium", "low", "info")
_STATUS_COLOURS = {"completed": "green", "failed": "red", "stopped": "yellow"}


app = acting_group(
    help="The store's experiments: list them, or show one's configuration, sessions and scores.",
)


@app.callback()
def experiments(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", hidden=True)] = False,
) -> None:
    """The store's experiments: `experiments list`, `experiments show EXPERIMENT`."""
    if ctx.invoked_subcommand is not None:
        if as_json:
            raise CliError(
                f"--json goes after the subcommand: envharness experiments "
                f"{ctx.invoked_subcommand} ... --json"
            )
        return
    deprecated_form("experiments", "experiments list")
    _list_experiments(ctx, as_json)


@app.command("list")
def experiments_list(ctx: typer.Context, as_json: JsonLines = False) -> None:
    """List the experiments in the store, oldest first."""
    _list_experiments(ctx, as_json)


def _list_experiments(ctx: typer.Context, as_json: bool) -> None:
    store = CliState.of(ctx, postgres=True).location

    async def listed() -> list[ExperimentInfo]:
        async with reading_store(store) as reader:
            return await reader.experiments()

    found = anyio.run(listed)
    if as_json:
        for info in found:
            typer.echo(msgspec.json.encode(info).decode())
    elif found:
        for line in experiment_table(found):
            typer.echo(line)
    else:
        typer.echo(f"no experiments in {shlex.quote(printable(describe(store)))}", err=True)


@app.command("show")
def experiments_show(
    ctx: typer.Context,
    experiment: Annotated[
        str,
        typer.Argument(metavar="EXPERIMENT", help="An experiment id, or a unique prefix."),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="The whole report as one JSON object.")
    ] = False,
    confidence: Annotated[
        float,
        typer.Option(
            "--confidence", metavar="C", help="Confidence of the intervals, between 0 and 1."
        ),
    ] = DEFAULT_CONFIDENCE,
    resamples: Annotated[
        int,
        typer.Option(
            "--resamples", metavar="N", min=1, max=MAX_RESAMPLES, help="Bootstrap resamples."
        ),
    ] = DEFAULT_RESAMPLES,
) -> None:
    """Show an experiment's configuration, sessions by status and scores.

    Per scenario: each metric's mean with a bootstrap confidence interval (per participant
    too, where the environment scores participants apart), pass rates and findings."""
    if not 0.0 < confidence < 1.0:
        raise CliError(f"--confidence must be between 0 and 1 (e.g. 0.95), not {confidence}")
    store = CliState.of(ctx, postgres=True).location

    async def reported() -> ExperimentReport:
        async with reading_store(store) as reader:
            return await experiment_report(
                reader, experiment, confidence=confidence, resamples=resamples
            )

    report = anyio.run(reported)
    if as_json:
        typer.echo(msgspec.json.encode(report).decode())
        return
    for line in experiment_lines(report):
        typer.echo(line)


# -- the list ----------------------------------------------------------------------------------


def experiment_table(found: Iterable[ExperimentInfo]) -> Iterator[str]:
    """One row per experiment. ``stopped`` counts stopped and interrupted sessions (ended
    early, resumable); ``running`` those not ended (created, running or paused)."""
    rows = [
        (
            info.id,
            printable(info.name),
            info.status,
            str(info.sessions.completed),
            str(info.sessions.failed),
            str(info.sessions.stopped + info.sessions.interrupted),
            str(_unended(info.sessions)),
            str(info.total),
        )
        for info in found
    ]
    yield from _table(_LIST_COLUMNS, rows, numeric_from=3, status_at=2)


# -- one experiment ----------------------------------------------------------------------------


def experiment_lines(report: ExperimentReport) -> Iterator[str]:
    """The report as text: configuration, sessions and findings per scenario, then scores."""
    yield from _configuration(report)
    yield ""
    yield from _status_table(report)
    if report.costs.calls:
        yield ""
        yield from _cost_table(report.session_costs)
    yield from result_lines(report)


def result_lines(report: ExperimentReport) -> Iterator[str]:
    """The scores (per scenario, overall, per participant) and the findings, each block after
    an empty line: what ``show`` ends with, and what ``run`` prints when an experiment ends."""
    for aggregate_index, version in enumerate(_versions(report)):
        yield ""
        yield from _score_table(report, version, first=aggregate_index == 0)
        yield from _participant_table(report, version)
    if not _versions(report):
        yield ""
        yield "no score reports yet (a session is scored when it completes)"
    if report.finding_counts.total:
        yield ""
        yield from _findings(report)


def _configuration(report: ExperimentReport) -> Iterator[str]:
    config = report.config
    environment = config.environment
    yield typer.style(f"experiment {report.id}  {printable(report.name)}", bold=True)
    reason = f": {printable(report.reason)}" if report.reason else ""
    yield f"  status       {_styled(report.status)}{reason} · created {_when(report.created_at)}"
    yield (
        f"  environment  {printable(environment.name)}@{printable(environment.version)} "
        f"({environment.turn_order}) · {config.turns} turns · seed {config.seed}"
    )
    scenarios = len(config.scenarios)
    yield (
        f"  plan         {scenarios} scenario{_s(scenarios)} x {config.trials} "
        f"trial{_s(config.trials)} = {report.total} sessions · "
        f"at most {config.max_concurrency} at once"
    )
    for name, participant in config.participants.items():
        yield (
            f"  participant  {printable(name)}: role {printable(participant.role)}, "
            f"{printable(participant.implementation)}"
        )
    for operation in config.operations:
        yield f"  operation    {printable(operation.name)}@{printable(operation.version)}"
    versions = [f"envharness {printable(config.envharness_version)}"]
    if config.harness_version:
        versions.append(f"harness {printable(config.harness_version)}")
    if config.scoring_version:
        versions.append(f"scoring {printable(config.scoring_version)}")
    yield f"  versions     {' · '.join(versions)}"
    counts = _counts_text(report.sessions)
    missing = f", {report.not_started} not started" if report.not_started else ""
    yield f"  sessions     {counts or 'none recorded'}{missing}"
    yield f"  spent        {_spent_text(report.costs)}"


def _spent_text(costs: CostTotals) -> str:
    """Tokens, money, calls and time, as far as agents reported them."""
    ran = f"ran {_seconds(costs.wall_seconds)}"
    if not costs.calls:
        return f"no costs reported · {ran}"
    calls = f"{costs.calls:,} call{_s(costs.calls)} ({_seconds(costs.seconds)})"
    return (
        f"{costs.tokens:,} tokens ({costs.input_tokens:,} in / {costs.output_tokens:,} out) · "
        f"{_money(costs)} · {calls} · {ran}"
    )


def _cost_table(sessions: Sequence[SessionCosts]) -> Iterator[str]:
    """The most expensive first; sessions that cost the same keep the report's order (scenario,
    then trial), which a reader can follow. Session ids made at once need not sort that way."""
    ranked = sorted(sessions, key=lambda s: (-s.costs.usd, -s.costs.tokens))
    yield typer.style("costs per session, the most expensive first", bold=True)
    rows = [
        (
            printable(session.session_id),
            printable(session.scenario_id),
            session.status,
            f"{session.costs.calls:,}",
            f"{session.costs.tokens:,}",
            f"${session.costs.usd:.4f}" if session.costs.priced else "-",
            _seconds(session.costs.seconds),
            _seconds(session.costs.wall_seconds),
        )
        for session in ranked[:COST_ROWS]
    ]
    yield from _table(_COST_COLUMNS, rows, numeric_from=3, status_at=2)
    if len(ranked) > COST_ROWS:
        yield f"  ... {len(ranked) - COST_ROWS} more; --json lists every session's costs"


def _money(costs: CostTotals) -> str:
    if not costs.priced:
        return "no price reported"
    unpriced = costs.calls - costs.priced
    return f"${costs.usd:.4f}" + (
        f" (+ {unpriced:,} unpriced call{_s(unpriced)})" if unpriced else ""
    )


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"


def _status_table(report: ExperimentReport) -> Iterator[str]:
    rows = [_status_row(printable(s.id), s.sessions, s.finding_counts) for s in report.scenarios]
    if len(report.scenarios) > 1:
        rows.append(_status_row("all", report.sessions, report.finding_counts))
    yield from _table(_STATUS_COLUMNS, rows, numeric_from=1, numeric_to=6)


def _status_row(name: str, counts: SessionCounts, findings: FindingCounts) -> tuple[str, ...]:
    return (
        name,
        str(counts.recorded),
        str(counts.completed),
        str(counts.failed),
        str(counts.stopped + counts.interrupted),
        str(_unended(counts)),
        _findings_text(findings) or "-",
    )


def _versions(report: ExperimentReport) -> list[str]:
    return [aggregate.version for aggregate in report.scores]


def _score_table(report: ExperimentReport, version: str, *, first: bool) -> Iterator[str]:
    yield typer.style(
        f"scores {printable(version)}: mean [{report.confidence * 100:g}% CI] (n)", bold=True
    )
    if first:
        yield (
            f"  percentile bootstrap, {report.resamples} resamples seeded from seed "
            f"{report.config.seed}; pass rates: Wilson interval"
        )
    rows: list[tuple[str, ...]] = []
    for name, aggregates in _scopes(report):
        aggregate = next((a for a in aggregates if a.version == version), None)
        if aggregate is None:
            rows.append((name, "-", "no reports of this version"))
            continue
        label = name
        for metric in aggregate.metrics:
            rows.append((label, printable(metric.name), _metric_text(metric)))
            label = ""
        if aggregate.pass_rate is not None:
            rows.append((label, "pass rate", _pass_text(aggregate.pass_rate)))
    yield from _table(("scenario", "metric", "value"), rows)


def _participant_table(report: ExperimentReport, version: str) -> Iterator[str]:
    """Each participant's own metrics (``ScoreReport(per_participant=...)``), when the version
    scores participants apart: nothing at all for shared scores."""
    rows: list[tuple[str, ...]] = []
    for name, aggregates in _scopes(report):
        aggregate = next((a for a in aggregates if a.version == version), None)
        label = name
        for participant in aggregate.participants if aggregate is not None else ():
            who = printable(participant.participant)
            for metric in participant.metrics:
                rows.append((label, who, printable(metric.name), _metric_text(metric)))
                label = who = ""
    if not rows:
        return
    yield ""
    yield typer.style(
        f"scores {printable(version)} per participant: mean [{report.confidence * 100:g}% CI] (n)",
        bold=True,
    )
    yield from _table(("scenario", "participant", "metric", "value"), rows)


def _scopes(report: ExperimentReport) -> list[tuple[str, Sequence[ScoreAggregate]]]:
    """Each scenario's aggregates, then the whole experiment's when it has several."""
    scopes: list[tuple[str, Sequence[ScoreAggregate]]] = [
        (printable(s.id), s.scores) for s in report.scenarios
    ]
    if len(report.scenarios) > 1:
        scopes.append(("all", report.scores))
    return scopes


def _metric_text(metric: MetricAggregate) -> str:
    missing = f", {metric.missing} missing" if metric.missing else ""
    if metric.mean is None:
        return f"- ({metric.n}{missing})"
    interval = ""
    if metric.ci_low is not None and metric.ci_high is not None:
        interval = f" [{_number(metric.ci_low)}, {_number(metric.ci_high)}]"
    return f"{_number(metric.mean)}{interval} ({metric.n}{missing})"


def _pass_text(rate: PassRate) -> str:
    return (
        f"{rate.rate:.0%} [{rate.ci_low:.0%}, {rate.ci_high:.0%}] "
        f"({rate.passed} of {rate.judged} passed)"
    )


def _findings(report: ExperimentReport) -> Iterator[str]:
    groups: dict[tuple[str, str], list[FindingRef]] = {}
    for scenario in report.scenarios:
        for found in scenario.findings:
            groups.setdefault((found.severity, found.title), []).append(found)
    ordered = sorted(
        groups.items(), key=lambda item: (_SEVERITIES.index(item[0][0]), -len(item[1]))
    )
    yield typer.style(f"findings: {_findings_text(report.finding_counts)}", bold=True)
    for (severity, title), group in ordered[:FINDING_GROUPS]:
        first = group[0]
        where = f"{first.session_id} seq {first.seq}"
        cites = f", cites seq {', '.join(map(str, first.cites))}" if first.cites else ""
        times = f" x {len(group)}" if len(group) > 1 else ""
        yield f"  [{severity}] {printable(title)}{times}  (e.g. {where}{cites})"
    if len(ordered) > FINDING_GROUPS:
        yield f"  ... {len(ordered) - FINDING_GROUPS} more; --json lists every finding"


# -- helpers -----------------------------------------------------------------------------------


def _table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    numeric_from: int | None = None,
    numeric_to: int | None = None,
    status_at: int | None = None,
) -> Iterator[str]:
    """A fixed-width table; columns from ``numeric_from`` (up to ``numeric_to``) right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(columns, *rows, strict=True)]
    numeric = range(
        numeric_from if numeric_from is not None else len(columns),
        numeric_to if numeric_to is not None else len(columns),
    )

    def line(cells: Sequence[str]) -> str:
        parts = []
        for index, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            padded = cell.rjust(width) if index in numeric else cell.ljust(width)
            if index == status_at and cell in _STATUS_COLOURS:
                padded = typer.style(padded, fg=_STATUS_COLOURS[cell])
            parts.append(padded)
        return "  ".join(parts).rstrip()

    yield typer.style(line(columns), bold=True)
    for row in rows:
        yield line(row)


def _unended(counts: SessionCounts) -> int:
    return counts.created + counts.running + counts.paused


def _counts_text(counts: SessionCounts) -> str:
    return ", ".join(
        f"{getattr(counts, name)} {name}"
        for name in SessionCounts.__struct_fields__
        if getattr(counts, name)
    )


def _findings_text(counts: FindingCounts) -> str:
    return ", ".join(
        f"{getattr(counts, severity)} {severity}"
        for severity in _SEVERITIES
        if getattr(counts, severity)
    )


def _number(value: float) -> str:
    """Four significant digits, whole numbers whole; JSON (``--json``) has every digit."""
    value += 0.0  # -0.0 prints as 0
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    return f"{value:.0f}" if 1e4 <= abs(value) < 1e15 else f"{value:.3e}"


def _styled(status: str) -> str:
    colour = _STATUS_COLOURS.get(status)
    return typer.style(status, fg=colour) if colour else status


def _when(timestamp: str) -> str:
    return timestamp[:19].replace("T", " ") + "Z" if len(timestamp) >= 19 else printable(timestamp)


def _s(count: int) -> str:
    return "" if count == 1 else "s"
