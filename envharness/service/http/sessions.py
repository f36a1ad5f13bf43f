"""The JSON API of sessions and of the store: sessions, records, export, live events, lineage
and comparison; verification, tokens, health.

Every handler reads through :class:`~envharness.service.access.Access`, which applies the
caller's policy in the query itself; the endpoint table at the bottom is what the router and
the OpenAPI document are built from.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import msgspec
from starlette.responses import Response

from envharness._version import __version__
from envharness.errors import ConfigurationError
from envharness.records import SessionCreated, Status, decode_payload, encode_record
from envharness.service.http.bodies import decode_body
from envharness.service.http.events import ClosingStream, EventsQuery, session_events
from envharness.service.http.paging import page_of
from envharness.service.params import MAX_INTEGER, NoParameters
from envharness.service.problems import HTTPProblem
from envharness.service.routing import (
    ADMIN,
    ANYONE,
    READERS,
    Call,
    Endpoint,
    json_response,
)
from envharness.service.search import Order, Passed, SessionSearch, Sort, find_sessions
from envharness.service.spending import session_spent
from envharness.service.wire.sessions import (
    ChainBreakOut,
    ComparisonOut,
    Health,
    Kind,
    LineageOut,
    NewToken,
    RecordOut,
    RecordPage,
    SessionDetail,
    SessionPage,
    StreamEnd,
    TokenRequest,
    VerifyOut,
    record_page_bytes,
)
from envharness.store import RecordFilter
from envharness.store.database import SCHEMA_VERSION
from envharness.store.tokens import TokenInfo

__all__ = ["API_ENDPOINTS", "CompareQuery", "RecordsQuery", "SessionsQuery"]

MAX_BODY = 64 * 1024
"""Largest JSON request body accepted (token requests are a few hundred bytes)."""

_token_request = msgspec.json.Decoder(TokenRequest)
_ROW_KINDS = ("session.created", "score", "finding", "branch")


class SessionsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    status: Annotated[
        Status | None, msgspec.Meta(description="Only sessions with this status.")
    ] = None
    experiment: Annotated[
        str | None, msgspec.Meta(description="Only sessions of this experiment id.")
    ] = None
    scenario: Annotated[
        str | None, msgspec.Meta(description="Only sessions of this scenario id.")
    ] = None
    q: Annotated[
        str,
        msgspec.Meta(
            max_length=200,
            description="Words that must all appear in the scenario, a participant, the "
            "environment or the experiment; or the start of a session id.",
        ),
    ] = ""
    passed: Annotated[
        Passed | None,
        msgspec.Meta(
            description="yes, no or none (no verdict), by the latest score report; not for a "
            "participant's token."
        ),
    ] = None
    sort: Annotated[Sort, msgspec.Meta(description="What to order by.")] = "created"
    order: Annotated[Order, msgspec.Meta(description="asc (oldest, fewest first) or desc.")] = "asc"
    after: Annotated[
        str | None, msgspec.Meta(description="The `next_after` of the previous page.")
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Sessions per page.")] = 100


class RecordsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[
        int,
        msgspec.Meta(
            ge=-1, le=MAX_INTEGER, description="Only records with a greater seq (`next_after`)."
        ),
    ] = -1
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Records per page.")] = 100
    kind: Annotated[
        list[Kind], msgspec.Meta(description="Only these kinds; repeat for several.")
    ] = []
    participant: Annotated[
        str | None, msgspec.Meta(description="Only this participant's records.")
    ] = None
    turn: (
        Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER, description="Only records of this turn.")]
        | None
    ) = None


class CompareQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    left: Annotated[str, msgspec.Meta(description="A session id (ses_…), exact.")]
    right: Annotated[
        str, msgspec.Meta(description="Another session id, exact: a branch of `left`, say.")
    ]


async def health(call: Call[NoParameters]) -> Response:
    return json_response(Health(version=__version__, schema_version=SCHEMA_VERSION))


async def list_sessions(call: Call[SessionsQuery]) -> Response:
    query = call.query
    access = call.access
    search = SessionSearch(
        q=query.q,
        status=query.status or "",
        experiment=query.experiment or "",
        passed=query.passed or "",
        sort=query.sort,
        order=query.order,
    )
    _, kept = await find_sessions(search, access, facts_wanted=False)
    found = [item.info for item in kept if query.scenario in (None, item.info.scenario_id)]
    page, next_after = page_of(
        found, lambda info: info.id, query.after, query.limit, member="a session of this listing"
    )
    return json_response(
        SessionPage(sessions=[access.summary(info) for info in page], next_after=next_after)
    )


async def get_session(call: Call[NoParameters]) -> Response:
    access = call.access
    info = await access.session(call.path("session_id"))
    config = None
    found: dict[str, list[msgspec.Raw]] = {"score": [], "finding": [], "branch": []}
    if access.sees_everything:
        selection = RecordFilter(kinds=_ROW_KINDS)
        async with aclosing(call.service.store.rows(info.id, selection)) as rows:
            async for row in rows:
                if row.kind == "session.created":
                    created = decode_payload(row.payload)
                    if isinstance(created, SessionCreated):
                        config = created.config
                else:
                    found[row.kind].append(msgspec.Raw(encode_record(row)))
    spent = await session_spent(access, info)
    detail = {
        "session": access.summary(info),
        "config": config,
        "scores": found["score"],
        "findings": found["finding"],
        "lineage": found["branch"],
        "costs": spent.total,
        "participant_costs": spent.participants,
    }
    return json_response(detail)


async def list_records(call: Call[RecordsQuery]) -> Response:
    query = call.query
    requested = RecordFilter(
        after=query.after,
        kinds=tuple(query.kind),
        participant=query.participant,
        turn=query.turn,
        limit=query.limit + 1,  # one more than asked: is there a next page?
    )
    _, page = await call.access.page(call.path("session_id"), requested)
    more = len(page) > query.limit
    page = page[: query.limit]
    next_after = page[-1].seq if more else None
    return Response(record_page_bytes(page, next_after), media_type="application/json")


async def export_session(call: Call[NoParameters]) -> Response:
    access = call.access
    info = await access.session(call.path("session_id"))
    selection = access.records(RecordFilter())

    async def lines() -> AsyncGenerator[bytes, None]:
        async with aclosing(call.service.store.rows(info.id, selection)) as rows:
            async for row in rows:
                yield encode_record(row) + b"\n"

    return ClosingStream(lines(), media_type="application/x-ndjson", filename=f"{info.id}.jsonl")


async def get_lineage(call: Call[NoParameters]) -> Response:
    return json_response(await call.access.lineage(call.path("session_id")))


async def compare(call: Call[CompareQuery]) -> Response:
    return json_response(await call.access.compare(call.query.left, call.query.right))


class VerifyQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    full: Annotated[
        bool,
        msgspec.Meta(
            description="Also check every index against its table (SQLite's integrity_check "
            "instead of its quick_check); slower on a large store."
        ),
    ] = False


async def verify(call: Call[VerifyQuery]) -> Response:
    report = await call.service.store.verify(full=call.query.full)
    breaks = [
        ChainBreakOut(session_id=found.session_id, seq=found.seq, problem=found.problem)
        for found in report.breaks
    ]
    return json_response(
        VerifyOut(ok=report.ok, sessions=report.sessions, records=report.records, breaks=breaks)
    )


async def list_tokens(call: Call[NoParameters]) -> Response:
    return json_response(await call.service.tokens.tokens())


async def issue_token(call: Call[NoParameters]) -> Response:
    request = decode_body(await _body(call), _token_request, "token")
    try:
        issued = await call.service.tokens.issue(
            request.role,
            participant=request.participant,
            sessions=request.sessions,
            label=request.label,
        )
    except ConfigurationError as error:  # a request the body got wrong: say it is the body
        raise HTTPProblem(422, str(error), parameter="body") from None
    return json_response(NewToken(token=issued.secret, info=issued.info), status=201)


async def revoke_token(call: Call[NoParameters]) -> Response:
    return json_response(await call.service.tokens.revoke(call.path("token_id")))


async def _body(call: Call[NoParameters]) -> bytes:
    if call.request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPProblem(415, "send the body as application/json")
    chunks: list[bytes] = []
    size = 0
    async with aclosing(call.request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > MAX_BODY:
                raise HTTPProblem(413, f"the body is larger than {MAX_BODY} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


_SESSION = "/api/sessions/{session_id}"

API_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        method="GET", path="/api/health", handler=health, operation="health", tag="meta",
        summary="Is the service up; its version and the store's schema version",
        roles=None, response=Health,
    ),
    Endpoint(
        method="GET", path="/api/sessions", handler=list_sessions, operation="listSessions",
        tag="sessions", summary="Sessions, oldest first, paged",
        description="A participant token lists only the sessions it takes part in.",
        roles=ANYONE, query=SessionsQuery, response=SessionPage, errors=(422,),
    ),
    Endpoint(
        method="GET", path=_SESSION, handler=get_session, operation="getSession",
        tag="sessions",
        summary="One session: summary, frozen configuration, scores, findings, costs",
        description=(
            "`costs` is what the session spent (tokens, money, call time and wall time, as its "
            "Overview's Spent card shows them), `participant_costs` each participant's part. "
            "A participant token gets `config` null, no scores or findings, and costs of its "
            "own calls only, without wall time."
        ),
        roles=ANYONE, response=SessionDetail, errors=(404,),
    ),
    Endpoint(
        method="GET", path=f"{_SESSION}/records", handler=list_records, operation="listRecords",
        tag="records", summary="A session's records in seq order, paged and filtered",
        description=(
            "A participant token gets only its own records; asking for another participant "
            "is a 404."
        ),
        roles=ANYONE, query=RecordsQuery, response=RecordPage, errors=(404, 422),
        cached_token=True,
    ),
    Endpoint(
        method="GET", path=f"{_SESSION}/export", handler=export_session,
        operation="exportSession", tag="records",
        summary="Every record of a session as JSON lines (streamed)",
        description=(
            "One RecordOut object per line, in seq order, payload bytes exactly as digested. "
            "Streamed page by page: memory stays bounded for any session length."
        ),
        roles=ANYONE, media_type="application/x-ndjson", errors=(404,),
    ),
    Endpoint(
        method="GET", path=f"{_SESSION}/events", handler=session_events,
        operation="sessionEvents", tag="records",
        summary="Live timeline: records as server-sent events, as they commit",
        description=(
            "Each `record` event has `id` = seq and a RecordOut as data. Reconnect with "
            "`Last-Event-ID` to resume with no gap and no duplicate. When the session has a "
            "terminal status and everything was sent, an `end` event "
            '(`{"status": ..., "last_seq": ...}`, the last seq this stream delivered) closes '
            "the stream."
        ),
        roles=ANYONE, query=EventsQuery, media_type="text/event-stream", errors=(404, 422),
        request_headers={"Last-Event-ID": "Resume after this seq (sent by EventSource)."},
        events={"record": RecordOut, "end": StreamEnd}, cached_token=True,
    ),
    Endpoint(
        method="GET", path=f"{_SESSION}/lineage", handler=get_lineage,
        operation="getLineage", tag="sessions",
        summary="Where a session was branched from, and the branches made from it",
        description=(
            "`parent` names the session and the checkpoint (seq, turn, label) this one was "
            "branched from, with the declared intervention and reason; `children` lists the "
            "branches made from this session the same way, oldest first. A participant token "
            "gets only the sessions it may see, and the checkpoint and intervention fields "
            "null."
        ),
        roles=ANYONE, response=LineageOut, errors=(404,),
    ),
    Endpoint(
        method="GET", path="/api/compare", handler=compare, operation="compareSessions",
        tag="sessions",
        summary="Two sessions aligned turn by turn: what differs, and their scores",
        description=(
            "Aligns the sessions by turn and participant (a branch numbers its turns from its "
            "parent's start) and lists each observation, executed action and environment "
            "outcome that differs in a turn both reached, then each metric of their score "
            "reports. A participant token may compare only sessions it takes part in (404 for "
            "any other, as for a missing one), and compares only its own records."
        ),
        roles=ANYONE, query=CompareQuery, response=ComparisonOut, errors=(404, 422),
    ),
    Endpoint(
        method="GET", path="/api/verify", handler=verify, operation="verify", tag="meta",
        summary="Re-check the database file and every session's hash chain", roles=READERS,
        query=VerifyQuery, response=VerifyOut,
    ),
    Endpoint(
        method="GET", path="/api/tokens", handler=list_tokens, operation="listTokens",
        tag="tokens", summary="Every token issued (never a secret)", roles=ADMIN,
        response=list[TokenInfo],
    ),
    Endpoint(
        method="POST", path="/api/tokens", handler=issue_token, operation="issueToken",
        tag="tokens", summary="Issue a token; its secret is in this answer only",
        roles=ADMIN, body=TokenRequest, response=NewToken, status=201,
        errors=(413, 415, 422),
    ),
    Endpoint(
        method="DELETE", path="/api/tokens/{token_id}", handler=revoke_token,
        operation="revokeToken", tag="tokens", summary="Revoke a token for good",
        roles=ADMIN, response=TokenInfo, errors=(404,),
    ),
)  # fmt: skip
"""Ordered as the reference lists them."""
