"""A test double of the OpenAI ``chat/completions`` wire protocol, served by a real uvicorn.

The endpoint answers from a script (status, body, headers, delay per request), records every
request it received, and can hold requests until a number of them are in flight at once, which
shows concurrency without any timing threshold.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

KEY = "sk-test-0123456789abcdef-SECRET"
"""The API key tests put in the environment; it must never show up in errors or records."""

GATE_LIMIT_S = 10.0
"""A gated request waits at most this long for its peers (so a broken test fails, not hangs)."""


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False


def completion(
    text: str,
    *,
    model: str = "fake-model",
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
    finish_reason: str = "stop",
    extra_usage: dict[str, Any] | None = None,
) -> Reply:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    usage.update(extra_usage or {})
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }
    return Reply(body=json.dumps(body).encode())


def status(code: int, body: str = "", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=code, body=body.encode(), headers=headers or {})


@dataclass
class Received:
    headers: dict[str, str]
    body: Any
    peer: tuple[str, int] | None


class FakeEndpoint:
    """The scripted endpoint: replies in order, then ``default`` for every further request."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default: Reply = completion("default answer")
        self.requests: list[Received] = []
        self.gate: int | None = None
        self.gate_opened = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.closing = False
        self._received = threading.Condition()

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        """Block until ``count`` requests arrived (the server runs in its own thread): a
        client that gave up on a request may return before the server has read it."""
        with self._received:
            return self._received.wait_for(lambda: len(self.requests) >= count, timeout)

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        peer = (request.client.host, request.client.port) if request.client else None
        with self._received:
            self.requests.append(Received(dict(request.headers), body, peer))
            self._received.notify_all()
        reply = self.script.popleft() if self.script else self.default
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            waited = 0.0
            while self.gate is not None and not self.gate_opened and waited < GATE_LIMIT_S:
                if self.in_flight >= self.gate:
                    self.gate_opened = True  # once reached, every held request goes on
                    break
                await anyio.sleep(0.01)
                waited += 0.01
            waited = 0.0
            while waited < reply.delay and not self.closing:
                await anyio.sleep(0.01)
                waited += 0.01
        finally:
            self.in_flight -= 1
        if reply.chunked:

            async def pieces() -> AsyncIterator[bytes]:
                for start in range(0, len(reply.body), 100):
                    yield reply.body[start : start + 100]

            return StreamingResponse(pieces(), status_code=reply.status, headers=reply.headers)
        return Response(
            reply.body, status_code=reply.status, headers=reply.headers,
            media_type="application/json",
        )  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_endpoint() -> Iterator[tuple[FakeEndpoint, str]]:
    """The fake endpoint under uvicorn on a free loopback port; yields it and its API root."""
    endpoint = FakeEndpoint()
    app = Starlette(routes=[Route("/v1/chat/completions", endpoint.handle, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", ws="none", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        assert server.started, "uvicorn did not start"
        yield endpoint, f"http://127.0.0.1:{port}/v1"
    finally:
        endpoint.closing = True
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"
