"""Requests from one process to another that runs a session or experiment: stop it, pause it.

Only the process running a session can stop or pause it (the harness does it in-process); a
command in another process leaves a request here, addressed to that runner (host, pid and
start time, as the session's index names it), and the runner's watcher takes it
(:mod:`envharness.api.remote_control`). Addressing the runner, not only the session, means a
request nobody took is never carried out by a later process that resumes the session.

Requests are operational state, not evidence: a row is updated when it is taken or withdrawn.
What the stop or pause did is recorded in the session's own chain, as any stop or pause is.
The runner reads its pending requests with one small indexed query per poll and writes only
when there is one to take, so watching costs the journal's writer nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_args

import msgspec

from envharness.errors import ConfigurationError, NotFoundError
from envharness.records import RunnerRef, utc_now_text
from envharness.store.backend import SqliteBackend, backend_of
from envharness.store.postgres.backend import PostgresBackend

__all__ = [
    "VERBS",
    "ControlBackend",
    "ControlRequest",
    "ControlRequests",
    "Verb",
    "runner_key",
    "runner_of_key",
]

Verb = Literal["stop", "pause"]
VERBS: tuple[Verb, ...] = get_args(Verb)

_T = TypeVar("_T")
_COLUMNS = "id, target, verb, runner, asked_by, asked_at, taken_at, withdrawn_at"
_encode_runner = msgspec.json.Encoder().encode
_runner_decoder = msgspec.json.Decoder(RunnerRef)


class ControlRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request: who asked what of which runner, and whether it was taken or withdrawn."""

    id: int
    target: str
    """The session or experiment id."""
    verb: Verb
    runner: str
    """The runner it is addressed to, as :func:`runner_key` writes it."""
    asked_by: str
    asked_at: str
    taken_at: str | None = None
    withdrawn_at: str | None = None

    @property
    def pending(self) -> bool:
        return self.taken_at is None and self.withdrawn_at is None


def runner_key(runner: RunnerRef) -> str:
    """How a request names its runner: the runner's JSON, as the sessions index keeps it."""
    return _encode_runner(runner).decode()


def runner_of_key(key: str) -> RunnerRef | None:
    """The runner a request is addressed to; ``None`` when its key does not decode."""
    try:
        return _runner_decoder.decode(key)
    except msgspec.DecodeError:
        return None


class ControlBackend(Protocol):
    """What requests need of a database: SQLite's (:class:`SqliteBackend`) or PostgreSQL's
    (:class:`PostgresBackend`), whose callbacks both take SQLite-style ``?`` statements. The
    statements here are the ones both engines run unchanged."""

    @property
    def location(self) -> str: ...

    async def read(self, work: Callable[[Any], _T]) -> _T: ...

    async def write(self, work: Callable[[Any], _T]) -> _T: ...


class ControlRequests:
    """The control_requests table of one store; each call is one short transaction in a
    worker thread. ``clock`` gives the current time as stored text."""

    def __init__(
        self,
        database: SqliteBackend | PostgresBackend | Path,
        *,
        clock: Callable[[], str] = utc_now_text,
    ) -> None:
        self.backend: ControlBackend = (
            database if isinstance(database, PostgresBackend) else backend_of(database)
        )
        self._clock = clock

    async def aclose(self) -> None:
        """Let go of the connection a PostgreSQL backend keeps between reads (SQLite's
        keeps none of its own); a later call connects again."""
        if isinstance(self.backend, PostgresBackend):
            await self.backend.aclose()

    async def ask(self, target: str, verb: str, runner: RunnerRef, asked_by: str) -> ControlRequest:
        """Leave a request for ``runner`` to ``verb`` ``target``."""
        checked = _check_verb(verb)
        if not target:
            raise ConfigurationError("a control request needs the id of what to stop or pause")
        key = runner_key(runner)
        at = self._clock()

        def insert(connection: Any) -> int:
            rows = connection.execute(
                "INSERT INTO control_requests (target, verb, runner, asked_by, asked_at)"
                " VALUES (?, ?, ?, ?, ?) RETURNING id",
                (target, checked, key, asked_by, at),
            ).fetchall()
            return int(rows[0][0])

        request_id = await self.backend.write(insert)
        return ControlRequest(
            id=request_id, target=target, verb=checked, runner=key, asked_by=asked_by, asked_at=at
        )

    async def pending(self, runner: RunnerRef) -> list[ControlRequest]:
        """The requests addressed to ``runner`` that nobody took or withdrew, oldest first."""
        key = runner_key(runner)
        rows = await self.backend.read(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM control_requests WHERE runner = ?"
                " AND taken_at IS NULL AND withdrawn_at IS NULL ORDER BY id",
                (key,),
            ).fetchall(),
        )
        return [_request(row) for row in rows]

    async def take(self, request_ids: Sequence[int]) -> list[ControlRequest]:
        """Mark these requests taken; returns those that were still pending (a request its
        asker withdrew meanwhile is not carried out)."""
        if not request_ids:
            return []
        at = self._clock()
        ids = [int(request_id) for request_id in request_ids]
        marks = ", ".join("?" * len(ids))

        def update(connection: Any) -> list[tuple[object, ...]]:
            rows: list[tuple[object, ...]] = connection.execute(
                f"UPDATE control_requests SET taken_at = ? WHERE id IN ({marks})"
                f" AND taken_at IS NULL AND withdrawn_at IS NULL RETURNING {_COLUMNS}",
                (at, *ids),
            ).fetchall()
            return rows

        rows = await self.backend.write(update)
        return sorted((_request(row) for row in rows), key=lambda request: request.id)

    async def withdraw(self, request_id: int) -> ControlRequest:
        """Withdraw a request unless it was taken; returns it as it now stands (a taken one
        stays taken: check ``taken_at``)."""
        at = self._clock()

        def update(connection: Any) -> list[tuple[object, ...]]:
            connection.execute(
                "UPDATE control_requests SET withdrawn_at = ?"
                " WHERE id = ? AND taken_at IS NULL AND withdrawn_at IS NULL",
                (at, request_id),
            )
            rows: list[tuple[object, ...]] = connection.execute(
                f"SELECT {_COLUMNS} FROM control_requests WHERE id = ?", (request_id,)
            ).fetchall()
            return rows

        return _found(await self.backend.write(update), request_id)

    async def runner(self, target: str) -> RunnerRef | None:
        """The process the index names as running session or experiment ``target`` (a full
        id) now; ``None`` when nothing runs it."""

        def owner(connection: Any) -> object:
            for table in ("sessions", "experiments"):
                rows = connection.execute(
                    f"SELECT owner FROM {table} WHERE id = ?", (target,)
                ).fetchall()
                if rows:
                    return rows[0][0]
            return None

        found = await self.backend.read(owner)
        return _runner_decoder.decode(found) if isinstance(found, str) else None

    async def get(self, request_id: int) -> ControlRequest:
        rows = await self.backend.read(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM control_requests WHERE id = ?", (request_id,)
            ).fetchall(),
        )
        return _found(rows, request_id)


def _check_verb(verb: str) -> Verb:
    for known in VERBS:
        if verb == known:
            return known
    raise ConfigurationError(f"a control request is one of: {', '.join(VERBS)}; not {verb!r}")


def _found(rows: list[tuple[object, ...]], request_id: int) -> ControlRequest:
    if not rows:
        raise NotFoundError(f"no control request {request_id} in the store")
    return _request(rows[0])


def _request(row: Sequence[object]) -> ControlRequest:
    request_id, target, verb, runner, asked_by, asked_at, taken_at, withdrawn_at = row
    return ControlRequest(
        id=int(str(request_id)),
        target=str(target),
        verb=_check_verb(str(verb)),
        runner=str(runner),
        asked_by=str(asked_by),
        asked_at=str(asked_at),
        taken_at=taken_at if isinstance(taken_at, str) else None,
        withdrawn_at=withdrawn_at if isinstance(withdrawn_at, str) else None,
    )
