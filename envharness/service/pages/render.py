"""Records as viewer markup: the turn grid (participant by observed / attempted / result) and
one-line descriptions of every other kind.

``static/viewer.js`` builds the same structure for records that arrive live (same classes,
same ids), so a page that grew by streaming looks like one rendered whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from envharness.records import (
    ActionAttempted,
    ActionBlocked,
    ActionExecuted,
    Artifact,
    Branch,
    Checkpoint,
    Cost,
    Finding,
    Hint,
    Intervention,
    Log,
    Observation,
    OperationReceipt,
    Outcome,
    ParticipantOutcome,
    ProtocolViolation,
    Record,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionStatus,
    Transcript,
)
from envharness.service.http.artifacts import artifact_url, media_type_of, referenced_artifact
from envharness.service.pages.html import DASH, Html, html, join, number, value
from envharness.service.pages.text_view import text_view
from envharness.service.pages.value_view import needs_table, value_table

__all__ = [
    "MARKER_KINDS",
    "TurnView",
    "cost_text",
    "describe",
    "failure_note",
    "group_turns",
    "is_marker",
    "marker",
    "per_participant_scores",
    "record_extras",
    "record_link",
    "reward_chip",
    "turn_section",
]

COLUMNS = ("observed", "attempted", "result")
"""The grid's columns; a cost is shown under the attempt it paid for."""
MARKER_KINDS = ("checkpoint", "segment.started", "intervention", "branch")
"""Session-level records shown between turns, where they happened (see :func:`marker`)."""


@dataclass(slots=True)
class TurnView:
    """One turn's records, sorted into the grid."""

    turn: int
    cells: dict[str, dict[str, list[Record]]] = field(default_factory=dict)
    outcomes: list[Record] = field(default_factory=list)
    others: list[Record] = field(default_factory=list)
    first_seq: int = -1
    """The seq of its first record: where the turn begins in the chain."""

    def add(self, record: Record) -> None:
        if self.first_seq < 0 or record.seq < self.first_seq:
            self.first_seq = record.seq
        payload = record.payload
        column = _column(payload)
        if record.participant is not None and column is not None:
            row = self.cells.setdefault(record.participant, {name: [] for name in COLUMNS})
            row[column].append(record)
        elif isinstance(payload, Outcome):
            self.outcomes.append(record)
        else:
            self.others.append(record)


def _column(payload: object) -> str | None:
    if isinstance(payload, Observation | Hint):
        return "observed"
    if isinstance(payload, ActionAttempted | Cost):
        return "attempted"
    if isinstance(payload, ActionExecuted | ActionBlocked | ParticipantOutcome):
        return "result"
    return None


def group_turns(records: Iterable[Record]) -> list[TurnView]:
    turns: dict[int, TurnView] = {}
    for record in records:
        if record.turn is not None:
            turns.setdefault(record.turn, TurnView(record.turn)).add(record)
    return [turns[turn] for turn in sorted(turns)]


def turn_section(
    session_id: str,
    view: TurnView,
    roster: Sequence[str],
    previews: Mapping[int, Html] | None = None,
    failure: Html | None = None,
) -> Html:
    """One turn as a card; ``previews`` holds what to show under an artifact record, by its
    seq (:mod:`.artifact_view` reads them: rendering reads no file). ``failure`` is the
    session's error when it failed in this turn (:func:`failure_note`)."""
    order = [name for name in roster if name in view.cells]
    order += [name for name in view.cells if name not in order]
    rows = join(
        html(
            '<tr data-participant="{name}"><th scope="row">{name}</th>{cells}</tr>',
            name=name,
            cells=join(
                html(
                    '<td class="c-{column}">{items}</td>',
                    column=column,
                    items=join(_cell(session_id, r) for r in view.cells[name][column]),
                )
                for column in COLUMNS
            ),
        )
        for name in order
    )
    signals = join(_signals(session_id, record) for record in view.outcomes)
    others = Html("")
    if view.others:
        others = html(
            '<ul class="others">{items}</ul>',
            items=join(_other(session_id, record, previews or {}) for record in view.others),
        )
    return html(
        '<section class="turn card" id="turn-{turn}" data-turn="{turn}">'
        '<header><h3>Turn {turn}</h3><div class="signals">{signals}</div></header>'
        '<table class="grid"><thead><tr><th>Participant</th><th>Observed</th>'
        "<th>Attempted</th><th>Result</th></tr></thead>"
        "<tbody>{rows}</tbody></table>{others}{failure}</section>",
        turn=view.turn,
        signals=signals,
        rows=rows,
        others=others,
        failure=failure or Html(""),
    )


def failure_note(session_id: str, record: Record) -> Html:
    """A failed session's error, drawn on the turn it failed in: the reason and the error's
    own message where the reader is looking, not only in the page's header."""
    payload = record.payload
    assert isinstance(payload, SessionStatus)
    error = Html("")
    if payload.error is not None:
        error = html(
            '<div class="kv-error-message"><span class="mono">{t}</span>: {m}</div>',
            t=payload.error.type,
            m=payload.error.message,
        )
    return html(
        '<div class="kv-failure" role="alert" id="r{seq}">{link}'
        '<span class="tag tag-failed">failed here</span> {reason}{error}</div>',
        seq=record.seq,
        link=record_link(session_id, record.seq),
        reason=payload.reason or "",
        error=error,
    )


def record_link(session_id: str, seq: int) -> Html:
    return html(
        '<a class="seq" href="/sessions/{session}/records/{seq}" title="record {seq}">#{seq}</a>',
        session=session_id,
        seq=seq,
    )


def _cell(session_id: str, record: Record) -> Html:
    payload = record.payload
    link = record_link(session_id, record.seq)
    if isinstance(payload, Observation):
        if isinstance(payload.text, str):
            body = html(
                '{text}<details class="as-json"><summary>JSON</summary>{json}</details>',
                text=text_view(payload.text), json=value(payload.observation),
            )  # fmt: skip
            css = "rec textual"
        else:
            body = _payload_value(payload.observation)
            css = "rec"
    elif isinstance(payload, Hint):
        body = html('<span class="tag tag-hint">hint</span> {text}', text=payload.text)
        css = "rec hint"
    elif isinstance(payload, ActionAttempted):
        took = Html("")
        if payload.seconds is not None:
            took = html(' <span class="time">{t}</span>', t=_duration(payload.seconds))
        body = html("{v}{took}", v=_payload_value(payload.action), took=took)
        css = "rec"
    elif isinstance(payload, ActionExecuted):
        body = html(
            '<span class="tag tag-ok">executed</span> {outcome}{reward}',
            outcome=_payload_value(payload.outcome), reward=reward_chip(payload.reward),
        )  # fmt: skip
        css = "rec executed"
    elif isinstance(payload, ParticipantOutcome):
        body = html(
            '<span class="tag tag-outcome" title="what this step meant for a participant who '
            'did not act in it">outcome</span> {outcome}{reward}',
            outcome=_payload_value(payload.outcome) if payload.outcome is not None else "",
            reward=reward_chip(payload.reward),
        )  # fmt: skip
        css = "rec private-outcome"
    elif isinstance(payload, ActionBlocked):
        body = html(
            '<span class="tag tag-blocked">blocked</span> <span class="by">by {by}</span>'
            '<div class="reason">{reason}</div>',
            by=payload.by,
            reason=payload.reason,
        )
        css = "rec blocked"
    elif isinstance(payload, Cost):
        body = html('<span class="tag">cost</span>{text}', text=cost_text(payload))
        css = "rec cost"
    else:  # pragma: no cover - _column admits only the kinds above
        body = describe(record)
        css = "rec"
    return html(
        '<div class="{css}" id="r{seq}">{link}{body}</div>', css=css, seq=record.seq, link=link,
        body=body,
    )  # fmt: skip


def _payload_value(data: Any) -> Html:
    """Small values inline as chips; anything bigger as a key/value table with every field
    name in view (never a clipped JSON box), its JSON one click away."""
    return value_table(data) if needs_table(data) else value(data)


def _signals(session_id: str, record: Record) -> Html:
    payload = record.payload
    assert isinstance(payload, Outcome)
    chips = join(
        html('<span class="kv"><span class="k">{k}</span><span class="num">{v}</span></span>',
             k=name, v=number(signal))
        for name, signal in payload.signals.items()
    )  # fmt: skip
    done = Html(' <span class="tag tag-done">done</span>') if payload.done else Html("")
    if payload.truncated is True:
        done = html(
            '{done} <span class="tag tag-truncated" title="cut short from outside the rules '
            '(a time limit), not over">truncated</span>',
            done=done,
        )
    who = (
        html('<span class="who-tag">{p}</span> ', p=record.participant)
        if record.participant
        else ""
    )
    return html(
        '<span class="outcome" id="r{seq}">{who}{chips}{done} {link}</span>',
        seq=record.seq, who=who, chips=chips, done=done, link=record_link(session_id, record.seq),
    )  # fmt: skip


def _other(session_id: str, record: Record, previews: Mapping[int, Html]) -> Html:
    who = (
        html(' <span class="who-tag">{p}</span>', p=record.participant)
        if record.participant
        else ""
    )
    extra = Html("")
    found = referenced_artifact(record)
    if found is not None:
        extra = html(
            ' <a class="artifact-link" href="{url}">{verb}</a>{preview}',
            url=artifact_url(session_id, record.seq),
            verb="Open" if isinstance(record.payload, Artifact) else "Offending bytes",
            preview=previews.get(record.seq, Html("")),
        )
    return html(
        '<li id="r{seq}">{link} <span class="kind">{kind}</span>{who} {text}{extra}</li>',
        seq=record.seq, link=record_link(session_id, record.seq), kind=record.kind, who=who,
        text=describe(record), extra=extra,
    )  # fmt: skip


def record_extras(session_id: str, record: Record) -> Html:
    """What a record's own page shows above its payload: an observation's text view whole,
    the link to a referenced artifact."""
    payload = record.payload
    if isinstance(payload, Observation) and isinstance(payload.text, str):
        return html("<h3>Text view</h3>{text}", text=text_view(payload.text, limit=None))
    found = referenced_artifact(record)
    if found is not None:
        return html(
            '<h3>File</h3><p><a class="artifact-link" href="{url}">{name}</a> '
            '<span class="muted">{media}</span></p>',
            url=artifact_url(session_id, record.seq), name=found.name, media=found.media_type,
        )  # fmt: skip
    return Html("")


def reward_chip(reward: Any) -> Html:
    """A step's reward beside its outcome; nothing when the environment gave none."""
    if reward is UNSET:
        return Html("")
    return html(
        ' <span class="kv reward"><span class="k">reward</span><span class="num">{v}</span></span>',
        v=number(reward),
    )


def per_participant_scores(score: Score) -> Html:
    """Each participant's own metrics, one row each (a zero-sum game's winner and loser);
    nothing for a report without them."""
    mine = score.per_participant
    if not isinstance(mine, dict) or not mine:
        return Html("")
    metrics = list(dict.fromkeys(name for values in mine.values() for name in values))
    head = join(html('<th class="num">{m}</th>', m=metric) for metric in metrics)
    rows = join(
        html(
            '<tr><th scope="row">{p}</th>{cells}</tr>',
            p=participant,
            cells=join(
                html('<td class="num">{v}</td>', v=number(values[m]) if m in values else DASH)
                for m in metrics
            ),
        )
        for participant, values in mine.items()
    )
    return html(
        '<table class="table compact per-participant"><thead><tr><th>Participant</th>{head}'
        "</tr></thead><tbody>{rows}</tbody></table>",
        head=head,
        rows=rows,
    )


def describe(record: Record) -> Html:
    """One line about any record, for lists outside the turn grid."""
    payload = record.payload
    if isinstance(payload, Artifact):
        return html(
            "{name} · {size} bytes · {media}", name=payload.name, size=f"{payload.size:,}",
            media=media_type_of(payload.name, payload.media_type),
        )  # fmt: skip
    if isinstance(payload, ParticipantOutcome):
        return html("outcome {o}{r}", o=value(payload.outcome), r=reward_chip(payload.reward))
    if isinstance(payload, Transcript):  # the messages are on the record's own page
        roles = ", ".join(str(message.get("role")) for message in payload.messages)
        return html("{n} message(s) added to its conversation: {roles}",
                    n=len(payload.messages), roles=roles)  # fmt: skip
    if isinstance(payload, Log):
        return html("[{level}] {message}", level=payload.level, message=payload.message)
    if isinstance(payload, ProtocolViolation):
        return html("{problem}", problem=payload.problem)
    if isinstance(payload, OperationReceipt):
        return html(
            "{name}@{version} → {result}", name=payload.operation, version=payload.version,
            result=value(payload.result if payload.error is None else payload.error.message),
        )  # fmt: skip
    if isinstance(payload, Checkpoint):
        return html("“{label}”: the state after turn {turn}", label=payload.label,
                    turn=payload.turn)  # fmt: skip
    if isinstance(payload, Branch):
        return html(
            "branched from {parent} at checkpoint #{seq}: {change}{reason}",
            parent=payload.parent_session, seq=payload.checkpoint_seq,
            change=value(payload.intervention), reason=_reason(payload.reason),
        )  # fmt: skip
    if isinstance(payload, Intervention):
        refused = (
            html(' <span class="tag tag-blocked">refused</span> {why}', why=payload.rejected)
            if payload.rejected
            else ""
        )
        return html("{change}{reason}{refused}", change=value(payload.intervention),
                    reason=_reason(payload.reason), refused=refused)  # fmt: skip
    if isinstance(payload, SessionStatus):
        reason = f": {payload.reason}" if payload.reason else ""
        return html("status {status}{reason}", status=payload.status, reason=reason)
    if isinstance(payload, SegmentStarted):
        until = f", to turn {payload.until}" if payload.until is not None else ""
        return html("segment {n} started ({cause}) after turn {turn}{until}", n=payload.segment,
                    cause=payload.cause, turn=payload.turn, until=until)  # fmt: skip
    if isinstance(payload, SegmentEnded):
        return html("segment {n} ended: {status}", n=payload.segment, status=payload.status)
    if isinstance(payload, Score):
        mine = payload.per_participant
        each = (
            join(
                html(" · {p}: {m}", p=participant, m=_metrics(values))
                for participant, values in mine.items()
            )
            if isinstance(mine, dict)
            else ""
        )
        return html("score {version}{each}", version=payload.version, each=each)
    if isinstance(payload, Finding):
        return html("[{severity}] {title}", severity=payload.severity, title=payload.title)
    body = msgspec.to_builtins(payload)
    if isinstance(body, dict):
        body.pop("kind", None)
    return value(body)


def _metrics(values: Mapping[str, float | None]) -> str:
    return " ".join(f"{name}={number(metric)}" for name, metric in values.items())


def _reason(reason: str) -> Html:
    return html(' <span class="why">“{r}”</span>', r=reason) if reason else Html("")


def is_marker(record: Record) -> bool:
    """A session-level record the Turns view shows between turns: a checkpoint, a segment that
    resumed or continued the session, an intervention, a branch."""
    payload = record.payload
    if isinstance(payload, SegmentStarted):
        return payload.cause != "start"
    return record.kind in MARKER_KINDS


def marker(session_id: str, record: Record, extra: Html | None = None) -> Html:
    """A line between turns for a record that :func:`is_marker` admits; ``extra`` follows it
    (a checkpoint's branches, a branch's comparison link)."""
    payload = record.payload
    link = record_link(session_id, record.seq)
    if isinstance(payload, Checkpoint):
        icon, css, title = "⚑", "checkpoint", Html("Checkpoint")
        text = html("after turn {t}: the state kept to branch from", t=payload.turn)
        if payload.label != f"turn {payload.turn}":
            text = html('<span class="why">“{l}”</span> {t}', l=payload.label, t=text)
    elif isinstance(payload, SegmentStarted):
        icon, css = "▸", "segment"
        if payload.cause == "branch":
            title = Html("Branch starts")
            text = html("from the parent's state after turn {t}, with the intervention applied",
                        t=payload.turn)  # fmt: skip
        elif payload.until is not None:
            title = Html("Continued")
            text = html("after turn {t}, to turn {u}", t=payload.turn, u=payload.until)
        else:
            title = Html("Resumed")
            text = html("after turn {t}", t=payload.turn)
        if payload.changes:
            text = html("{t} · declared changes: {c}", t=text, c="; ".join(payload.changes))
    elif isinstance(payload, Intervention):
        refused = payload.rejected is not None
        icon, css = ("✕", "refused") if refused else ("✎", "intervention")
        title = Html("Intervention refused") if refused else Html("Intervention")
        text = html("{v}{r}", v=value(payload.intervention), r=_reason(payload.reason))
        if refused:
            text = html('{t} <span class="reason">{why} (no branch was made)</span>', t=text,
                        why=payload.rejected)  # fmt: skip
    elif isinstance(payload, Branch):
        icon, css, title = "↳", "branch", Html("Branched")
        text = describe(record)
    else:  # pragma: no cover - is_marker admits only the kinds above
        icon, css, title, text = "·", "other", html("{k}", k=record.kind), describe(record)
    return html(
        '<div class="marker marker-{css}" id="r{seq}"><span class="marker-icon" '
        'aria-hidden="true">{icon}</span><div class="marker-body"><div class="marker-line">'
        "{link}<b>{title}</b> {text}</div>{extra}</div></div>",
        css=css, seq=record.seq, icon=icon, link=link, title=title, text=text,
        extra=extra or Html(""),
    )  # fmt: skip


def cost_text(cost: Cost) -> str:
    parts = []
    if cost.input_tokens is not None or cost.output_tokens is not None:
        parts.append(f"{cost.input_tokens or 0:,} in / {cost.output_tokens or 0:,} out")
    if cost.usd is not None:
        parts.append(f"${cost.usd:.4f}")
    if cost.seconds is not None:
        parts.append(_duration(cost.seconds))
    if cost.model:
        parts.append(cost.model)
    return " · ".join(parts) or DASH


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"
