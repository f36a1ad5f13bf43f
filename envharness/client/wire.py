"""What travels between the client and the service: ids as exact path segments, query
parameters, paged listings, and error answers turned into :class:`ServiceError`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import quote

import httpx
import msgspec

from envharness.errors import EnvharnessError
from envharness.service.wire.sessions import (
    ExperimentStatusEvent,
    Problem,
    RecordOut,
    SessionCreatedEvent,
    SessionStatusEvent,
)
from envharness.trajectories import DatasetRow

_T = TypeVar("_T")
dataset_row = msgspec.json.Decoder(DatasetRow)
record_line = msgspec.json.Decoder(RecordOut)
_problem = msgspec.json.Decoder(Problem)
ExperimentEvent = SessionCreatedEvent | SessionStatusEvent | ExperimentStatusEvent
"""What an experiment's stream reports: a session started, one changed status, or the
experiment did."""
experiment_event_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    "session.created": msgspec.json.Decoder(SessionCreatedEvent),
    "session.status": msgspec.json.Decoder(SessionStatusEvent),
    "experiment.status": msgspec.json.Decoder(ExperimentStatusEvent),
}

Params = list[tuple[str, str | int | float | bool | None]]

RECONNECT_LIMIT = 5
"""Consecutive failed reconnects after which
:meth:`~envharness.client.AsyncClient.events` gives up."""


class ServiceError(EnvharnessError):
    """The service answered with an error (``status`` 4xx or 5xx)."""

    def __init__(self, status: int, message: str, parameter: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.parameter = parameter


class Paged(Protocol):
    @property
    def next_after(self) -> Any: ...


_Page = TypeVar("_Page", bound=Paged)


async def every(
    fetch: Callable[[Any], Awaitable[_Page]], items: Callable[[_Page], Iterable[_T]]
) -> AsyncGenerator[_T, None]:
    """Every item of a paged listing: ``fetch(after)`` gets a page (``after`` is ``None`` for
    the first), ``items`` picks its entries, and its ``next_after`` says where the next starts."""
    after: Any = None
    while True:
        page = await fetch(after)
        for item in items(page):
            yield item
        if page.next_after is None:
            return
        after = page.next_after


def response_lines(response: httpx.Response) -> AsyncGenerator[str, None]:
    """httpx's line iterator, typed as the async generator it is, so it can be closed."""
    return cast(AsyncGenerator[str, None], response.aiter_lines())


def segment(value: str, *, safe: str = "") -> str:
    """``value`` as the last part of a URL path, naming exactly it.

    Every character a URL gives a meaning to (``%``, ``?``, ``#``, ``/`` unless ``safe``) is
    percent-encoded, and so are the dots of a ``.`` or ``..`` part, which httpx would
    otherwise resolve: an id must never turn into another endpoint or a query string.
    """
    if not value:
        raise ValueError("an id in a URL must not be empty")
    parts = quote(value, safe=safe).split("/")
    return "/".join("%2E" * len(part) if part in {".", ".."} else part for part in parts)


def dataset_segment(name: str) -> str:
    """A dataset's name or id as a path segment. The server decodes the path before it routes,
    so a name holding ``/`` cannot be one: it is reached by its id (docs/api.md)."""
    if "/" in name:
        raise ValueError(
            f"dataset name {name!r} holds '/', which a URL cannot carry as one part; "
            "name it by its id (dst_…, from datasets())"
        )
    return segment(name)


def query_params(**values: str | int | None) -> Params:
    return [(name, value) for name, value in values.items() if value is not None]


async def raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    await response.aread()
    raise_problem(response)


async def decode(response: httpx.Response, kind: type[_T]) -> _T:
    if not response.is_success:
        raise_problem(response)
    return msgspec.json.decode(response.content, type=kind)


def raise_problem(response: httpx.Response) -> None:
    try:
        problem = _problem.decode(response.content)
    except msgspec.MsgspecError:
        raise ServiceError(response.status_code, not_a_problem(response)) from None
    raise ServiceError(problem.status, problem.message, problem.parameter)


def not_a_problem(response: httpx.Response) -> str:
    """The message of an error answer that is not the service's JSON ``Problem``: a viewer page,
    a redirect, or another server on that port. Says what came back instead of quoting it."""
    request = response.request
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no body"
    where = f"{request.method} {request.url.path}"
    if response.is_redirect:
        target = response.headers.get("location", "")
        return f"{where} answered {response.reason_phrase}, to {target!r}: not an API answer"
    if kind == "text/plain":
        return f"{where}: {response.text[:200]}"
    return (
        f"{where} answered {response.reason_phrase} ({kind}), not a JSON problem: is this "
        "the envharness service, and the path one of its API endpoints?"
    )
