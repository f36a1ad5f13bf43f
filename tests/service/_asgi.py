"""An ASGI transport for the service tests that closes the request body it reads from.

httpx's ``ASGITransport`` reads a request body through the async generator of the request's
stream and never closes it. When the app answers before reading the whole body (a 413 part-way
through an import, a sign-in form too large), that generator is left suspended, and the garbage
collector finalizes it later, in whatever test runs then: under trio the finalizer warns that an
async generator was abandoned, and this suite makes warnings errors. So a test failed, now and
then, for what another test left behind. This transport opens the body's iterator itself and
closes it once the app has answered, on every path.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import httpx

__all__ = ["ClosingASGITransport"]


class ClosingASGITransport(httpx.ASGITransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream), "an AsyncClient sends async streams"
        chunks = stream.__aiter__()
        request.stream = _Opened(chunks)
        try:
            return await super().handle_async_request(request)
        finally:
            # httpx's byte streams are async generators; one a caller wrote as a class may not
            # be, and then it has nothing to close.
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()


class _Opened(httpx.AsyncByteStream):
    """A body whose iterator is already open: the transport reads from the one we close."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks
