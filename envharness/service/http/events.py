"""Live timelines: a session's records, and an experiment's session changes, as server-sent
events pushed as they commit.

The stream is a real open response. Every :data:`POLL_INTERVAL` it reads the session's head
(one indexed row); only when the head moved does it read the new records, page by page, each
page a short read transaction — so a slow client slows only its own stream: it holds no lock,
pins no snapshot and never blocks the journal writer, and the server buffers nothing for it
beyond the page in hand (the send blocks until the client takes the bytes).

Each event's ``id`` is the record's ``seq``. Records of a session commit as a growing prefix of
its chain, so "every visible record with ``seq`` > the last one sent" has no gap and no
duplicate; a client that reconnects with ``Last-Event-ID`` (EventSource does this by itself)
resumes exactly where it stopped. When the session has reached a terminal status and
everything is sent, an ``end`` event closes the stream; the viewer's script then closes its
EventSource instead of reconnecting. A disconnect cancels the stream at once and closes its
read connection.

An experiment's stream (:func:`experiment_events`) sends its sessions' ``session.created`` and
``session.status`` records and its own ``experiment.status`` ones, each reduced to what the
viewer needs. Their event ``id`` is the record's store-wide position (``pos``), which grows in
commit order: every poll reads the newest position first, then the matching records up to it,
so "everything after the last id sent" again has no gap and no duplicate, and each poll reads
only what was committed since the previous one.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import anyio
import msgspec
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from envharness.errors import NotFoundError
from envharness.records import (
    TERMINAL_STATUSES,
    ExperimentStatus,
    RecordRow,
    SessionCreated,
    SessionStatus,
    decode_payload,
)
from envharness.service.access import Access
from envharness.service.params import MAX_INTEGER
from envharness.service.problems import HTTPProblem
from envharness.service.routing import Call
from envharness.service.state import Service
from envharness.service.wire.sessions import (
    ExperimentEnd,
    ExperimentStatusEvent,
    Kind,
    SessionCreatedEvent,
    SessionStatusEvent,
    StreamEnd,
    stored_record_bytes,
)
from envharness.store import RecordFilter, SessionInfo
from envharness.store.named_reads import NamedReads, read_named
from envharness.store.reader import PAGE_SIZE

__all__ = [
    "EXPERIMENT_KINDS",
    "HEARTBEAT_INTERVAL",
    "POLL_INTERVAL",
    "ClosingStream",
    "EventsQuery",
    "ExperimentEventsQuery",
    "experiment_events",
    "experiment_stream",
    "record_events",
    "session_events",
]

POLL_INTERVAL = 0.25
"""Seconds between looks at a live session's head: a commit shows within this (plus a read)."""
HEARTBEAT_INTERVAL = 15.0
"""Seconds of silence after which a comment line keeps proxies and idle timers from closing."""
RETRY_MS = 1000
"""How long EventSource waits before reconnecting after a dropped connection."""
EXPERIMENT_PAGE = 500
"""Experiment events read per query."""
EXPERIMENT_KINDS = ("session.created", "session.status", "experiment.status")
"""The records an experiment's stream reports, each an event of that name."""


class EventsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[
        int,
        msgspec.Meta(
            ge=-1,
            le=MAX_INTEGER,
            description="Start after this seq when there is no Last-Event-ID.",
        ),
    ] = -1
    kind: Annotated[
        list[Kind], msgspec.Meta(description="Only these kinds; repeat for several.")
    ] = []
    participant: Annotated[
        str | None, msgspec.Meta(description="Only this participant's records.")
    ] = None


class ExperimentEventsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[
        int,
        msgspec.Meta(
            ge=-1, le=MAX_INTEGER,
            description="Start after this event id (a record's pos) when there is no "
            "Last-Event-ID; the experiment page passes the position it was rendered at.",
        ),
    ] = -1  # fmt: skip


async def session_events(call: Call[EventsQuery]) -> Response:
    session_id = call.path("session_id")
    access = call.access
    info = await access.session(session_id)
    cursor = _last_event_id(call.request.headers.get("last-event-id"), call.query.after)
    selection = access.records(
        RecordFilter(kinds=tuple(call.query.kind), participant=call.query.participant)
    )
    events = record_events(call.service, info.id, selection, cursor)
    return ClosingStream(events, media_type="text/event-stream")


def _last_event_id(header: str | None, after: int) -> int:
    if header is None or not header.strip():
        return after
    try:
        value = int(header.strip())
    except ValueError:
        value = -2
    if not -1 <= value <= MAX_INTEGER:
        raise HTTPProblem(
            422, f"Last-Event-ID must be an event id (an integer from -1 to {MAX_INTEGER}), "
            f"not {header!r}",
            parameter="Last-Event-ID",
        )  # fmt: skip
    return value


async def record_events(
    service: Service, session_id: str, selection: RecordFilter, cursor: int
) -> AsyncGenerator[bytes, None]:
    """The event stream's bytes: records after ``cursor`` as they commit, then ``end``."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    scanned = cursor
    """Every visible record up to here has been sent."""
    last_sent = cursor
    quiet_since = service.monotonic()
    while True:
        info, page = await _poll(service, session_id, selection, scanned)
        head = info.records - 1
        if head > scanned:
            while page:
                for row in page:
                    data = stored_record_bytes(row)
                    yield b"id: %d\nevent: record\ndata: %s\n\n" % (row.seq, data)
                scanned = last_sent = page[-1].seq
                if len(page) < PAGE_SIZE:
                    break
                page = await _page(service, session_id, selection, scanned)
            scanned = max(scanned, head)
            quiet_since = service.monotonic()
        if info.status in TERMINAL_STATUSES and scanned >= head:
            # The last seq *this* stream delivered: a filtered reader learns no other count.
            end = _encoder.encode(StreamEnd(status=info.status, last_seq=last_sent))  # type: ignore[arg-type]
            yield b"event: end\ndata: %s\n\n" % end
            return
        if service.monotonic() - quiet_since >= HEARTBEAT_INTERVAL:
            yield b": keep-alive\n\n"
            quiet_since = service.monotonic()
        await anyio.sleep(POLL_INTERVAL)


async def _poll(
    service: Service, session_id: str, selection: RecordFilter, after: int
) -> tuple[SessionInfo, list[RecordRow]]:
    """The session's head and, when it moved past ``after``, the first page of the selected
    records after ``after``: one worker-thread call, since a hop costs more than the queries.
    Nothing is read ahead (:class:`~envharness.store.read_ahead.ReadAhead`): most polls find
    the head where it was, and on PostgreSQL the head alone costs half the combined read."""
    wanted = msgspec.structs.replace(selection, after=after, limit=PAGE_SIZE)

    def read(reads: NamedReads) -> tuple[SessionInfo | None, list[RecordRow]]:
        info = reads.session(session_id)
        if info is None or info.records - 1 <= after:
            return info, []
        return info, reads.page(session_id, wanted)

    info, page = await read_named(service.store.backend, read)
    if info is None:
        raise NotFoundError(f"session {session_id!r} is no longer in the store")
    return info, page


async def _page(
    service: Service, session_id: str, selection: RecordFilter, after: int
) -> list[RecordRow]:
    """The next page of the selected records after ``after``."""
    wanted = msgspec.structs.replace(selection, after=after, limit=PAGE_SIZE)
    return await read_named(service.store.backend, lambda reads: reads.page(session_id, wanted))


async def experiment_stream(call: Call[ExperimentEventsQuery]) -> Response:
    access = call.access
    info = await access.experiment(call.path("experiment_id"))
    cursor = _last_event_id(call.request.headers.get("last-event-id"), call.query.after)
    return ClosingStream(experiment_events(access, info.id, cursor), media_type="text/event-stream")


async def experiment_events(
    access: Access, experiment_id: str, cursor: int
) -> AsyncGenerator[bytes, None]:
    """The experiment stream's bytes: its session changes after position ``cursor`` as they
    commit, then ``end`` once the experiment has a terminal status and all was sent."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    service = access.service
    store = service.store
    scanned = cursor
    """Every visible event up to this position has been sent."""
    last_sent = cursor
    quiet_since = service.monotonic()
    while True:
        # Status first, then the newest position: a terminal status read here is covered by
        # the records read below, so `end` never overtakes an event.
        info = await store.experiment(experiment_id)
        head = await store.last_position()
        if head > scanned:
            among = await access.visible_sessions()  # a participant's new sessions count too
            while True:
                rows = await store.experiment_rows(
                    experiment_id, kinds=EXPERIMENT_KINDS, after=scanned, upto=head,
                    among=among, limit=EXPERIMENT_PAGE,
                )  # fmt: skip
                for pos, row in rows:
                    data = _encoder.encode(_experiment_event(row, access.sees_everything))
                    yield b"id: %d\nevent: %s\ndata: %s\n\n" % (pos, row.kind.encode(), data)
                    scanned = last_sent = pos
                    quiet_since = service.monotonic()
                if len(rows) < EXPERIMENT_PAGE:
                    break
            scanned = head
        if info.status in TERMINAL_STATUSES:
            end = ExperimentEnd(status=info.status, last_id=last_sent)  # type: ignore[arg-type]
            yield b"event: end\ndata: %s\n\n" % _encoder.encode(end)
            return
        if service.monotonic() - quiet_since >= HEARTBEAT_INTERVAL:
            yield b": keep-alive\n\n"
            quiet_since = service.monotonic()
        await anyio.sleep(POLL_INTERVAL)


def _experiment_event(
    row: RecordRow, full: bool
) -> SessionCreatedEvent | SessionStatusEvent | ExperimentStatusEvent:
    payload = decode_payload(row.payload)
    if isinstance(payload, SessionCreated):
        config = payload.config
        return SessionCreatedEvent(
            session_id=row.session_id, scenario_id=config.scenario.id, trial=config.trial,
            seed=config.seed if full else None, at=row.at,
        )  # fmt: skip
    if isinstance(payload, SessionStatus):
        return SessionStatusEvent(
            session_id=row.session_id, status=payload.status,
            reason=payload.reason if full else None, at=row.at,
        )  # fmt: skip
    assert isinstance(payload, ExperimentStatus), row.kind
    return ExperimentStatusEvent(
        status=payload.status, reason=payload.reason if full else None, at=row.at
    )


_encoder = msgspec.json.Encoder()


class ClosingStream(StreamingResponse):
    """A streamed answer that stops the moment the client goes away.

    Starlette's StreamingResponse notices a disconnect only on some servers' protocol
    versions; this one always watches for it, and always closes the generator (and with it
    the read connection) before returning, instead of leaving that to the garbage collector.
    """

    def __init__(
        self, chunks: AsyncGenerator[bytes, None], *, media_type: str, filename: str | None = None
    ) -> None:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        if filename is not None:
            headers["Content-Disposition"] = f'inline; filename="{filename}"'
        super().__init__(chunks, headers=headers, media_type=media_type)
        self._chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self._chunks) as chunks, anyio.create_task_group() as group:

            async def watch_for_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch_for_disconnect)
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()
