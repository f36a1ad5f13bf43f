"""Request bodies: read with a size limit, then decoded into a typed request.

A body is refused before it is parsed when it has another content type (415) or grows past
its endpoint's limit (413), so a client cannot make the server hold more than that limit; a
body that is not JSON, or not the request the endpoint takes, is a 422 about ``body``.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, TypeVar

import msgspec

from envharness.service.problems import HTTPProblem
from envharness.service.routing import Call

__all__ = ["MAX_JSON_BODY", "decode_body", "read_body"]

_T = TypeVar("_T")

MAX_JSON_BODY = 1024 * 1024
"""Largest JSON request body for a snapshot or dataset (10,000 session ids fit)."""


async def read_body(
    call: Call[Any], *, limit: int, content_types: tuple[str, ...] = ("application/json",)
) -> bytes:
    """The request body, refused when it is of another type (415) or over ``limit`` (413)."""
    if call.request.headers.get("content-type", "").split(";")[0].strip() not in content_types:
        raise HTTPProblem(415, f"send the body as {' or '.join(content_types)}")
    chunks: list[bytes] = []
    size = 0
    async with aclosing(call.request.stream()) as stream:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise HTTPProblem(413, f"the body is larger than {limit:,} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def decode_body(body: bytes, decoder: msgspec.json.Decoder[_T], what: str) -> _T:
    """``body`` as the ``what`` request ``decoder`` reads; 422 naming what is wrong with it."""
    if not body.strip():
        raise HTTPProblem(
            422, f"the body is empty: send the {what} request as a JSON object", parameter="body"
        )
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise HTTPProblem(422, f"the {what} request is invalid: {exc}", parameter="body") from None
    except msgspec.DecodeError as exc:
        raise HTTPProblem(422, f"the body is not JSON: {exc}", parameter="body") from None
