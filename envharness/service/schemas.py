"""The service's wire types: what its JSON endpoints return and accept.

These Structs are the single source of the OpenAPI schemas (``msgspec.json.schema_components``),
and the client decodes responses with them, so the document cannot drift from the answers.
Records travel with their payload bytes exactly as digested (see :func:`record_page_bytes`): a
reader can recompute every digest from what it received.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, get_args

import msgspec

from envharness.records import Payload, RecordRow, SessionConfig, Status, encode_record
from envharness.store.tokens import Role, TokenInfo

__all__ = [
    "KINDS",
    "ChainBreakOut",
    "Health",
    "Kind",
    "NewToken",
    "Problem",
    "RecordOut",
    "RecordPage",
    "SessionDetail",
    "SessionPage",
    "SessionSummary",
    "TokenRequest",
    "VerifyOut",
    "record_page_bytes",
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


_PAGE_OPEN = b'{"records":['


def record_page_bytes(rows: list[RecordRow], next_after: int | None) -> bytes:
    """A :class:`RecordPage` as JSON, built from stored bytes."""
    tail = b"null" if next_after is None else str(next_after).encode()
    return _PAGE_OPEN + b",".join(map(encode_record, rows)) + b'],"next_after":' + tail + b"}"
