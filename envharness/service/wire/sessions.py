"""Wire types of sessions, records, experiments, lineage, comparisons, verification, tokens
and health — and :class:`Problem`, the body of every error.

These Structs are the single source of the OpenAPI schemas (``msgspec.json.schema_components``),
and the client decodes responses with them, so the document cannot drift from the answers.
Records travel with their payload bytes exactly as digested (see :func:`record_page_bytes`): a
reader can recompute every digest from what it received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import msgspec

from envharness.records import (
    ExperimentConfig,
    Payload,
    RecordRow,
    SessionConfig,
    Status,
)
from envharness.runtime.compare import Alignment, TurnDifference
from envharness.store import SessionCounts
from envharness.store.tokens import Role, TokenInfo

__all__ = [
    "KINDS",
    "BranchLink",
    "ChainBreakOut",
    "ComparisonOut",
    "CostsOut",
    "ExperimentDetail",
    "ExperimentEnd",
    "ExperimentPage",
    "ExperimentSessionOut",
    "ExperimentStatusEvent",
    "ExperimentSummary",
    "Health",
    "Kind",
    "NewToken",
    "Problem",
    "RecordOut",
    "RecordPage",
    "ScoreDifference",
    "SessionCreatedEvent",
    "SessionDetail",
    "SessionPage",
    "SessionStatusEvent",
    "SessionSummary",
    "StreamEnd",
    "TokenRequest",
    "TurnDifference",
    "VerifyOut",
    "record_page_bytes",
    "stored_record_bytes",
]

KINDS: tuple[str, ...] = tuple(
    sorted(str(member.__struct_config__.tag) for member in get_args(Payload))
)
if TYPE_CHECKING:
    Kind = str
else:
    Kind = Literal[KINDS]
"""Every record kind (the tags of :data:`Payload`): an enum in the schema, ``str`` to mypy."""


SessionId = Annotated[str, msgspec.Meta(description="A session id (ses_…), exact.")]
ExperimentId = Annotated[str, msgspec.Meta(description="An experiment id (exp_…), exact.")]


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """Every error answer: the status again, a sentence that names the fix, and the bad
    parameter where there is one."""

    status: int
    message: str
    parameter: str | None = None


class Health(msgspec.Struct, frozen=True, kw_only=True):
    status: Literal["ok"] = "ok"
    version: str
    schema_version: int


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A session as listed. For a participant token ``reason`` and ``records`` are null:
    both can tell of other participants (a failure's cause, how much they did)."""

    id: SessionId
    experiment_id: str | None
    scenario_id: str
    status: Status
    terminal: bool
    reason: str | None
    created_at: str
    updated_at: str
    turns_completed: int
    records: int | None


class SessionPage(msgspec.Struct, frozen=True, kw_only=True):
    sessions: list[SessionSummary]
    next_after: str | None
    """Pass as ``after`` for the next page; null on the last page."""


class RecordOut(msgspec.Struct, frozen=True, kw_only=True):
    """One evidence record. ``payload`` is the stored canonical JSON, byte for byte."""

    session_id: SessionId
    seq: int
    kind: Kind
    turn: int | None
    participant: str | None
    at: Annotated[str, msgspec.Meta(description="RFC 3339 UTC, microseconds, Z")]
    payload: Payload
    prev: str | None
    digest: str


class RecordPage(msgspec.Struct, frozen=True, kw_only=True):
    records: list[RecordOut]
    next_after: int | None
    """The last ``seq`` on a full page, to pass as ``after``; null when nothing is left."""


class SessionDetail(msgspec.Struct, frozen=True, kw_only=True):
    """A session with its frozen configuration, score reports and findings.

    A participant token gets ``config`` null and no scores or findings: they are about
    everyone, and the configuration holds the scenario's reference answer.
    """

    session: SessionSummary
    config: SessionConfig | None
    scores: list[RecordOut]
    findings: list[RecordOut]
    lineage: list[RecordOut]
    """``branch`` records: where this session came from."""
    costs: CostsOut | None = None
    """What the session spent (the Overview's Spent card), as this reader may know it; null
    only from an older server."""
    participant_costs: dict[str, CostsOut] = {}
    """Each participant's part of ``costs``, in the order they first spent (a participant
    token's has only its own)."""


class BranchLink(msgspec.Struct, frozen=True, kw_only=True):
    """One branch between two sessions, seen from one end: ``session`` is the other end (the
    parent, or a child), ``checkpoint_seq`` the checkpoint record's seq in the parent's chain.

    ``checkpoint_turn``, ``checkpoint_label``, ``intervention`` and ``reason`` come from the
    checkpoint and ``branch`` records; for a participant token they are null (those records
    are about the whole session, so it does not read them).
    """

    session: SessionSummary
    checkpoint_seq: int
    checkpoint_turn: Annotated[
        int | None, msgspec.Meta(description="The last complete turn the checkpoint holds.")
    ]
    checkpoint_label: str | None
    intervention: Annotated[
        Any, msgspec.Meta(description="What the branch changed, as declared (any JSON).")
    ]
    reason: str | None


class LineageOut(msgspec.Struct, frozen=True, kw_only=True):
    """Where a session came from and the branches made from it, oldest first.

    A participant token gets only the sessions it may see: a parent or child it may not see
    is left out, as if it did not exist.
    """

    session_id: SessionId
    parent: BranchLink | None
    """The session this one was branched from; null for an original session."""
    children: list[BranchLink]


class ScoreDifference(msgspec.Struct, frozen=True, kw_only=True):
    """One metric of either session's last score report (null on a side without it)."""

    metric: str
    left: float | None
    right: float | None


class ComparisonOut(msgspec.Struct, frozen=True, kw_only=True):
    """Two sessions aligned by turn and participant (``envharness.runtime.compare``).

    ``differences`` lists each observation, executed action and environment outcome that
    differs in a turn both sessions reached (``turns_compared``); a branch numbers its turns
    from its parent's start, so it lines up with its parent. For a participant token only its
    own observations and actions are compared, and ``scores`` is empty.
    """

    left: SessionSummary
    right: SessionSummary
    turns_compared: list[int]
    differences: list[TurnDifference]
    scores: list[ScoreDifference]
    identical: bool
    alignment: Alignment | None = None
    """The participants and metrics both sessions have, and those only one has (for a
    participant token: its own records and no metrics); null only from an older server."""


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True):
    """The data of a session stream's ``end`` event."""

    status: Status
    last_seq: Annotated[int, msgspec.Meta(description="The last seq this stream delivered.")]


class CostsOut(msgspec.Struct, frozen=True, kw_only=True):
    """What was spent: the ``cost`` records agents reported, summed, and how long it ran — the
    figures ``envharness experiments show`` prints.

    ``calls`` counts the costs reported and ``priced`` those with a price: ``usd`` sums those
    only, so ``priced < calls`` means the true amount is higher. ``seconds`` sums what the
    calls took (calls side by side overlap); ``wall_seconds`` is how long the session's
    segments ran (for an experiment: how long it ran, its sessions side by side). For a
    participant token only its own calls count and ``wall_seconds`` is null: how long a session
    ran, and what the others spent, is about everyone.
    """

    calls: int
    priced: int
    input_tokens: int
    output_tokens: int
    usd: float
    seconds: float
    wall_seconds: float | None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ExperimentSummary(msgspec.Struct, frozen=True, kw_only=True):
    """An experiment as listed, with its recorded sessions counted by status.

    For a participant token ``reason`` and ``total`` are null and ``sessions`` counts only
    the sessions it takes part in: the rest of the experiment is not its business.
    """

    id: ExperimentId
    name: str
    status: Status
    terminal: bool
    reason: str | None
    total: Annotated[int | None, msgspec.Meta(description="Sessions planned: scenarios x trials.")]
    sessions: SessionCounts
    created_at: str
    updated_at: str


class ExperimentPage(msgspec.Struct, frozen=True, kw_only=True):
    experiments: list[ExperimentSummary]
    next_after: str | None
    """Pass as ``after`` for the next page; null on the last page."""


class ExperimentSessionOut(msgspec.Struct, frozen=True, kw_only=True):
    """One session of an experiment, placed by scenario and trial. For a participant token
    ``seed`` and ``reason`` are null, and ``costs`` counts only its own calls."""

    id: SessionId
    scenario_id: str
    trial: int | None
    seed: int | None
    status: Status
    terminal: bool
    reason: str | None
    turns_completed: int
    created_at: str
    updated_at: str
    costs: CostsOut | None = None
    """What the session spent, as this reader may know it; null only from an older server."""


class ExperimentDetail(msgspec.Struct, frozen=True, kw_only=True):
    """An experiment, the configuration its sessions share, and its sessions.

    A participant token gets ``config`` null (it holds every scenario's reference answer) and
    only its own sessions; ``costs`` (what the experiment spent) and each session's count only
    its own calls.
    """

    experiment: ExperimentSummary
    config: ExperimentConfig | None
    sessions: list[ExperimentSessionOut]
    costs: CostsOut | None = None
    """What the experiment spent, as this reader may know it; null only from an older server."""


class SessionCreatedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``session.created`` on an experiment's stream: a session of it started."""

    session_id: SessionId
    scenario_id: str
    trial: int | None
    seed: int | None
    at: str


class SessionStatusEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``session.status`` on an experiment's stream: one of its sessions changed status."""

    session_id: SessionId
    status: Status
    reason: str | None
    at: str


class ExperimentStatusEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``experiment.status`` on an experiment's stream: the experiment changed status."""

    status: Status
    reason: str | None
    at: str


class ExperimentEnd(msgspec.Struct, frozen=True, kw_only=True):
    """The data of an experiment stream's ``end`` event."""

    status: Status
    last_id: Annotated[int, msgspec.Meta(description="The last event id this stream sent.")]


class ChainBreakOut(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    seq: int | None
    problem: str


class VerifyOut(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    sessions: int
    records: int
    breaks: list[ChainBreakOut]


class TokenRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Issue a token. ``participant`` (and optionally ``sessions``) only for that role."""

    role: Role
    participant: str | None = None
    sessions: list[str] | None = None
    label: Annotated[str, msgspec.Meta(max_length=200)] = ""


class NewToken(msgspec.Struct, frozen=True, kw_only=True):
    """The secret is in this answer only; the store keeps its sha256."""

    token: str
    info: TokenInfo


class _StoredRecord(msgspec.Struct):
    """A :class:`RecordOut` whose payload is the stored bytes, embedded unchanged: fields in
    :func:`~envharness.records.encode_record`'s order, so a page is encoded in one call."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None
    digest: str


class _StoredPage(msgspec.Struct):
    records: list[_StoredRecord]
    next_after: int | None


_page_encoder = msgspec.json.Encoder()


def record_page_bytes(rows: list[RecordRow], next_after: int | None) -> bytes:
    """A :class:`RecordPage` as JSON, built from stored bytes."""
    records = [_stored(row) for row in rows]
    return _page_encoder.encode(_StoredPage(records, next_after))


def stored_record_bytes(row: RecordRow) -> bytes:
    """One :class:`RecordOut` as JSON, its payload the stored bytes: the bytes of
    :func:`~envharness.records.encode_record`, without a dict built per record."""
    return _page_encoder.encode(_stored(row))


def _stored(row: RecordRow) -> _StoredRecord:
    return _StoredRecord(
        row.session_id,
        row.seq,
        row.kind,
        row.turn,
        row.participant,
        row.at,
        msgspec.Raw(row.payload),
        row.prev,
        row.digest,
    )
