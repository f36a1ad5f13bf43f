"""Terminal text for sessions, timelines and reports.

Everything shown passes through :func:`printable`, which escapes control characters:
observations, actions and error messages come from agents and environments, and an escape
sequence in them must not repaint the user's terminal. Styling goes through ``typer.style``,
which ``typer.echo`` strips when the output is not a terminal. An environment's text view keeps
its colours the same way: :mod:`envharness._ansi` reads them out of the text, and they are
drawn again with ``typer.style`` — never the environment's own escape sequences.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import typer
from msgspec import UnsetType

from envharness._ansi import PLAIN, Style, runs
from envharness.api.harness import Session
from envharness.cli.quickstart import QuickstartSummary, rerun_note
from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Cost,
    ErrorInfo,
    Finding,
    Hint,
    Log,
    Observation,
    Outcome,
    ParticipantOutcome,
    Record,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionCreated,
    SessionStatus,
    Transcript,
)
from envharness.store import SessionInfo, VerifyReport
from envharness.store.damage import RECOVERY_ADVICE
from envharness.store.locate import describe
from envharness.store.verify import STORE

__all__ = [
    "Timeline",
    "printable",
    "quickstart_lines",
    "run_lines",
    "score_lines",
    "session_json",
    "session_table",
    "text_view_lines",
    "verify_lines",
]

VALUE_LIMIT = 240
"""Characters of an observation, action or outcome shown before it is cut (``--full``: all)."""
TEXT_VIEW_LINES = 40
"""Lines of an observation's text view shown before it is cut (``--full``: all)."""
TEXT_VIEW_INDENT = " " * 11
"""Where a text view's lines start: under the value of its ``observed`` line."""

_STATUS_COLOURS = {
    "completed": "green",
    "failed": "red",
    "stopped": "yellow",
    "interrupted": "yellow",
}
_TABLE_COLUMNS = ("id", "scenario", "status", "turns", "records", "created")


def session_table(sessions: Iterable[SessionInfo]) -> Iterator[str]:
    """A fixed-width table, one row per session, widths fitted to the content."""
    rows = [
        (
            info.id,
            printable(info.scenario_id),
            info.status,
            str(info.turns_completed),
            str(info.records),
            _when(info.created_at),
        )
        for info in sessions
    ]
    widths = [
        max(len(cell) for cell in column) for column in zip(_TABLE_COLUMNS, *rows, strict=True)
    ]
    yield typer.style(_row(_TABLE_COLUMNS, widths), bold=True)
    for row in rows:
        yield _row(row, widths, status=row[2])


def _row(cells: Iterable[str], widths: list[int], status: str | None = None) -> str:
    parts = []
    for index, (cell, width) in enumerate(zip(cells, widths, strict=True)):
        padded = cell.rjust(width) if index in (3, 4) else cell.ljust(width)
        if index == 2 and status in _STATUS_COLOURS:
            padded = typer.style(padded, fg=_STATUS_COLOURS[status])
        parts.append(padded)
    return "  ".join(parts).rstrip()


def session_json(info: SessionInfo) -> str:
    return msgspec.json.encode(info).decode()


def run_lines(session: Session, scores: Sequence[Score] | None = None) -> Iterator[str]:
    """What ``run`` prints when its session ends; with ``scores`` (its latest report per
    version) a ``score`` line each, so how well it went shows beside how it ended."""
    yield f"session {session.id}"
    yield f"status  {_status(session.status)} after {session.turns_completed} turns"
    if session.reason:
        yield f"reason  {printable(session.reason)}"
    if scores is not None:
        yield from score_lines(scores)
    yield f"see     envharness --store {_shell(session.store)} sessions show {session.id}"


def score_lines(scores: Sequence[Score]) -> Iterator[str]:
    """One ``score`` line per version: its metrics, then passed / not passed when it judged."""
    if not scores:
        yield "score   none recorded (a session is scored when it completes)"
    for score in scores:
        parts = [
            f"{printable(name)} {_number(metric)}" for name, metric in sorted(score.metrics.items())
        ]
        if score.passed is not None:
            verdict = "passed" if score.passed else "not passed"
            parts.append(typer.style(verdict, fg="green" if score.passed else "red"))
        yield f"score   {printable(score.version)}: {' · '.join(parts) or 'no metrics'}"


def quickstart_lines(summary: QuickstartSummary) -> Iterator[str]:
    # A URL is named as written (its query kept), so the commands reach the same database.
    store = summary.store
    where = _shell(store.resolve()) if isinstance(store, Path) else shlex.quote(printable(store))
    statuses: dict[str, int] = {}
    for session in summary.sessions:
        statuses[session.status] = statuses.get(session.status, 0) + 1
    yield "Synthetic demo: scripted agents add numbers to a shared total."
    yield "These values measure nothing; they only show what envharness records."
    yield ""
    yield f"wrote {len(summary.sessions)} sessions, {summary.records} records to {where}"
    if (note := rerun_note(summary)) is not None:
        yield note
    branch = summary.branch
    branches = 0 if branch is None else 1
    standalone = len(summary.sessions) - summary.grouped - branches
    yield (
        f"  {summary.grouped} in experiment {summary.experiment} ({summary.experiment_name!r}),"
        f" {standalone} standalone" + (f", {branches} branch" if branches else "")
    )
    yield (
        "  "
        + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        + f"; {summary.blocked} blocked actions, {summary.findings} findings,"
        + f" {summary.artifacts} artifacts"
    )
    if branch is not None:
        change = msgspec.json.encode(branch.intervention).decode()
        yield (
            f"  {branch.child} branched from {branch.parent} after turn"
            f" {branch.checkpoint_turn}: {printable(branch.reason)}"
        )
        yield f"    intervention {change}; both continued to turn {branch.turns}"
    frozen = summary.frozen
    if frozen is not None:
        yield (
            f"  snapshot {frozen.snapshot[:16]}… froze the experiment's {frozen.trajectories}"
            f" trajectories; dataset {frozen.dataset!r} was made from it"
        )
        yield (
            f"  imported source {frozen.source}: {frozen.episodes} episodes written as another"
            " tool would send them"
        )
    yield ""
    yield "next:"
    prefix = f"envharness --store {where}"
    yield f"  {prefix} serve --open"
    yield f"  {prefix} sessions list"
    yield f"  {prefix} sessions show {summary.showcase}"
    yield f"  {prefix} verify"
    if frozen is not None:
        yield f"  {prefix} trajectories"
    yield f"  {prefix} export {summary.showcase} | head -3"
    if summary.password_left_out:
        yield (
            "the password in the URL is left out of these commands: they take it from "
            "~/.pgpass or $PGPASSWORD (docs/postgresql.md)"
        )


def verify_lines(report: VerifyReport) -> Iterator[str]:
    counted = f"verified {report.sessions} chains, {report.records} records"
    if report.ok:
        yield f"{counted}: OK"
        return
    for found in report.breaks:
        where = f"{found.session_id} seq {found.seq}" if found.seq is not None else found.session_id
        yield f"{where}: {printable(found.problem)}"
    if any(
        found.session_id == STORE and RECOVERY_ADVICE not in found.problem
        for found in report.breaks
    ):
        yield f"{STORE} is damaged; to recover, {RECOVERY_ADVICE}"
    count = len(report.breaks)
    yield typer.style(f"{counted}: {count} problem{'s' if count != 1 else ''}", fg="red")


class Timeline:
    """Renders one session's records, in ``seq`` order, as a turn-by-turn timeline.

    Stateful only so it can print a heading when the turn changes: records stream through it
    one at a time, so a session of any length renders without being held in memory.
    """

    def __init__(self, info: SessionInfo, *, full: bool = False) -> None:
        self._info = info
        self._limit = None if full else VALUE_LIMIT
        self._turn: int | None = None
        self._heading: str | None = None
        self._seq_width = max(len(str(max(info.records - 1, 0))), 2)
        self._name_width = 8

    def header(self) -> Iterator[str]:
        info = self._info
        yield typer.style(f"session {info.id}", bold=True)
        yield (
            f"  scenario {printable(info.scenario_id)} · {_status(info.status)} · "
            f"{info.turns_completed} turns · {info.records} records · "
            f"created {_when(info.created_at)}"
        )
        if info.experiment_id:
            yield f"  experiment {info.experiment_id}"

    def lines(self, record: Record) -> Iterator[str]:
        if record.turn != self._turn or self._heading is None:
            heading = f"turn {record.turn}" if record.turn is not None else "end"
            if self._heading is None and record.turn is None:
                heading = "start"
            self._turn, self._heading = record.turn, heading
            yield ""
            yield typer.style(heading, bold=True)
        who = record.participant or ""
        first, *rest = list(self._describe(record.payload)) or [record.kind]
        prefix = f"  {str(record.seq).rjust(self._seq_width)}  {who.ljust(self._name_width)}  "
        yield prefix + first
        for line in rest:
            yield " " * len(prefix) + line

    def _describe(self, payload: Any) -> Iterator[str]:
        value = self._value
        if isinstance(payload, SessionCreated):
            config = payload.config
            environment = config.environment
            self._name_width = max([8, *(len(name) for name in config.participants)])
            name = printable(f"{environment.name}@{environment.version}")
            yield (
                f"created: environment {name} ({environment.turn_order}), "
                f"{config.turns} turns planned, seed {config.seed}"
            )
            yield f"scenario {printable(config.scenario.id)} input {value(config.scenario.input)}"
            for name, participant in config.participants.items():
                yield (
                    f"participant {printable(name)}: role {printable(participant.role)}, "
                    f"{printable(participant.implementation)}"
                )
            versions = [f"envharness {config.envharness_version}"]
            if config.harness_version:
                versions.append(f"harness {printable(config.harness_version)}")
            if config.scoring_version:
                versions.append(f"scoring {printable(config.scoring_version)}")
            yield ", ".join(versions)
        elif isinstance(payload, SessionStatus):
            yield f"status {_status(payload.status)}" + (
                f": {printable(payload.reason)}" if payload.reason else ""
            )
            error = payload.error
            if error is not None and error.message not in (payload.reason or ""):
                yield from _error(error)
        elif isinstance(payload, SegmentStarted):
            yield f"segment {payload.segment} started ({payload.cause})"
        elif isinstance(payload, SegmentEnded):
            yield f"segment {payload.segment} ended: {payload.status}"
        elif isinstance(payload, Observation):
            yield f"observed   {value(payload.observation)}"
            if isinstance(payload.text, str):
                limit = None if self._limit is None else TEXT_VIEW_LINES
                for line in text_view_lines(payload.text, limit=limit):
                    yield TEXT_VIEW_INDENT + line
        elif isinstance(payload, ActionAttempted):
            took = f"  ({payload.seconds:.3f}s)" if payload.seconds is not None else ""
            yield f"attempted  {value(payload.action)}{took}"
        elif isinstance(payload, ActionExecuted):
            reward = _reward(payload.reward)
            yield f"executed   {value(payload.action)} -> {value(payload.outcome)}{reward}"
        elif isinstance(payload, ParticipantOutcome):
            told = value(payload.outcome) if payload.outcome is not None else "(none)"
            yield f"outcome    {told}{_reward(payload.reward)}  (did not act this step)"
        elif isinstance(payload, ActionBlocked):
            yield typer.style(f"BLOCKED    {value(payload.action)}", fg="red")
            yield f"by {payload.by}: {printable(payload.reason)}"
        elif isinstance(payload, Outcome):
            signals = " ".join(f"{printable(k)}={_number(v)}" for k, v in payload.signals.items())
            done = " done" if payload.done else ""
            if payload.truncated is True:
                done += " " + typer.style("truncated", fg="yellow")
            yield f"outcome    {signals or '(no signals)'}{done}  state {payload.state[:12]}"
        elif isinstance(payload, Cost):
            yield f"cost       {_cost(payload)}"
        elif isinstance(payload, Hint):
            source = f" ({printable(payload.source)})" if payload.source else ""
            yield f"hint{source}  {printable(payload.text)}"
        elif isinstance(payload, Score):
            passed = {True: "passed", False: "not passed", None: "no pass/fail"}[payload.passed]
            metrics = " ".join(f"{printable(k)}={_number(v)}" for k, v in payload.metrics.items())
            yield f"score {printable(payload.version)}: {passed}  {metrics}".rstrip()
            if isinstance(payload.per_participant, dict):
                for name, mine in payload.per_participant.items():
                    each = " ".join(f"{printable(k)}={_number(v)}" for k, v in mine.items())
                    yield f"  {printable(name)}: {each}".rstrip()
        elif isinstance(payload, Finding):
            cites = f" (cites seq {', '.join(map(str, payload.cites))})" if payload.cites else ""
            yield (
                typer.style(f"finding [{payload.severity}] {printable(payload.title)}", fg="yellow")
                + cites
            )
            if payload.detail:
                yield printable(payload.detail)
        elif isinstance(payload, Artifact):
            media = (
                f"{printable(payload.media_type)}, "
                if payload.media_type != "application/octet-stream"
                else ""
            )
            yield (
                f"artifact {printable(payload.name)}: {payload.size} bytes, {media}"
                f"sha256 {payload.sha256[:12]}"
            )
        elif isinstance(payload, Transcript):  # `sessions export` has the messages whole
            roles = ", ".join(printable(str(message.get("role"))) for message in payload.messages)
            yield f"transcript {len(payload.messages)} message(s): {roles}"
        elif isinstance(payload, Log):
            stream = f" {printable(payload.stream)}" if payload.stream else ""
            yield f"log {payload.level}{stream}: {printable(payload.message)}"
        else:
            body = msgspec.to_builtins(payload)
            kind = body.pop("kind", "?") if isinstance(body, dict) else "?"
            yield f"{kind} {value(body)}"

    def _value(self, value: Any) -> str:
        text = printable(msgspec.json.encode(value).decode())
        if self._limit is not None and len(text) > self._limit:
            return text[: self._limit - 1] + "…"
        return text


def text_view_lines(text: str, *, limit: int | None = None) -> Iterator[str]:
    """An environment's text view as terminal lines, its colours drawn with ``typer.style``
    (which ``typer.echo`` drops when stdout is not a terminal); at most ``limit`` lines, then
    a line that says how many more there are."""
    lines: list[list[tuple[str, Style]]] = [[]]
    for part, style in runs(text):
        pieces = part.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                lines.append([])
            if piece:
                lines[-1].append((piece, style))
    if lines and not lines[-1]:
        lines.pop()  # a final newline ends the last line; it does not start another
    shown = lines if limit is None else lines[:limit]
    for line in shown:
        yield "".join(_styled(printable(piece.expandtabs()), style) for piece, style in line)
    if len(lines) > len(shown):
        more = len(lines) - len(shown)
        yield typer.style(
            f"… {more} more line{'s' if more != 1 else ''} (--full shows all)", dim=True
        )


def _styled(text: str, style: Style) -> str:
    if style == PLAIN:
        return text
    return typer.style(
        text, fg=style.fg, bg=style.bg, bold=style.bold or None, dim=style.dim or None,
        italic=style.italic or None, underline=style.underline or None,
        reverse=style.inverse or None,
    )  # fmt: skip


def _reward(reward: float | UnsetType | None) -> str:
    """A step's reward after its outcome; nothing when the environment gave none."""
    if isinstance(reward, UnsetType):
        return ""
    return f"  reward {_number(reward)}"


def _error(error: ErrorInfo) -> Iterator[str]:
    yield typer.style(f"error {printable(error.type)}: {printable(error.message)}", fg="red")
    if error.stderr_tail:
        yield f"stderr: {printable(error.stderr_tail[-VALUE_LIMIT:])}"


def _number(value: float | None) -> str:
    """A signal or metric; ``null`` is how a NaN or infinity was recorded (JSON has neither)."""
    return "null" if value is None else f"{value:g}"


def _cost(cost: Cost) -> str:
    parts = []
    if cost.input_tokens is not None or cost.output_tokens is not None:
        parts.append(f"{cost.input_tokens or 0} in / {cost.output_tokens or 0} out tokens")
    if cost.usd is not None:
        parts.append(f"${cost.usd:.4f}")
    if cost.seconds is not None:
        parts.append(f"{cost.seconds:.3f}s")
    if cost.model:
        parts.append(printable(cost.model))
    return ", ".join(parts) or "(nothing reported)"


def _status(status: str) -> str:
    colour = _STATUS_COLOURS.get(status)
    return typer.style(status, fg=colour) if colour else status


def _shell(path: Path | str) -> str:
    """A store as a shell word; a PostgreSQL URL without its password."""
    return shlex.quote(printable(describe(path)))


def _when(timestamp: str) -> str:
    """Stored timestamps are RFC 3339 UTC with microseconds; seconds are enough to read."""
    return timestamp[:19].replace("T", " ") + "Z" if len(timestamp) >= 19 else printable(timestamp)


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\n``, ``\\x1b``, ...)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
