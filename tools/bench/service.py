"""The local service over loopback, against a bare Starlette endpoint sending the same bytes.

What it measures, with one client on one keep-alive connection, for one recorded session of
``--turns`` turns (two synthetic participants: seven records a turn):

- GET records: requests/s for ``/api/sessions/{id}/records?limit=N`` through ``envharness
  serve`` (the real command: Host check, bearer token looked up in the store, query parsed,
  the page read from SQLite in a worker thread, encoded), against a bare Starlette route that
  answers with the same body bytes, read from memory;
- SSE records/s: the session's live timeline ``/api/sessions/{id}/events`` replayed from the
  start to its ``end`` event, against a bare Starlette ``StreamingResponse`` that sends the
  same events (one chunk per event, as the service does) from memory.

Both servers are uvicorn with the same settings, each in a process of its own on a free
127.0.0.1 port; the client is a raw socket (HTTP/1.1 keep-alive for GET, one HTTP/1.0
connection per stream), so little of the time is the client's. Rounds alternate between the
two servers and the best round of each counts. It prints both rates and the ratio
envharness/bare.

Run it from the repository root::

    .venv/bin/python tools/bench/service.py                   # 300 turns, pages of 100
    .venv/bin/python tools/bench/service.py --limit 1000 --seconds 3

The bare endpoints do no work at all, so the ratio is what authenticating, checking, reading
and encoding costs per request; it is not a claim about any network. Where a GET's time goes
today: three read-only SQLite connections opened per request (the token, the session, the
page), about 0.65 ms each on the reference machine — the store opens one per read.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store.tokens import TokenStore

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 30


async def write_session(store: Path, turns: int) -> str:
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment,
        agents={"alice": SyntheticAgent, "bob": SyntheticAgent},
    )  # fmt: skip
    scenario = Scenario(id="bench", input=SyntheticScenarioInput(starting_total=0))
    session = await harness.run(scenario, turns=turns)
    return session.id


async def viewer_token(store: Path) -> str:
    return (await TokenStore(store).issue("viewer", label="tools/bench/service.py")).secret


@contextmanager
def server(command: list[str], pattern: str) -> Iterator[int]:
    """A server process; yields the port it prints (``pattern``'s group 1). Ctrl-C stops it."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:  # fmt: skip
        assert process.stdout is not None
        try:
            deadline = time.monotonic() + STARTUP_S
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line and process.poll() is not None:
                    raise RuntimeError(f"{command} exited with status {process.returncode}")
                found = re.search(pattern, line)
                if found:
                    yield int(found.group(1))
                    break
            else:
                raise RuntimeError(f"{command} printed no port")
        finally:
            process.send_signal(2)  # SIGINT: both servers stop on Ctrl-C
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Connection:
    """One HTTP/1.1 keep-alive connection, as lean as a client can be."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        self.buffer = b""

    def get(self, path: str) -> bytes:
        self.sock.sendall(f"GET {path} HTTP/1.1\r\n{self.head}\r\n".encode())
        while b"\r\n\r\n" not in self.buffer:
            self._receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(self.buffer) < length:
            self._receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
        return body

    def _receive(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def stream(port: int, token: str, path: str) -> bytes:
    """A whole event stream's body (HTTP/1.0: it ends when the server closes)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        request = f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}"
        sock.sendall(f"{request}\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"GET {path}: {head[:200]!r}")
    return body


def requests_per_second(port: int, token: str, path: str, seconds: float) -> float:
    connection = Connection(port, token)
    try:
        connection.get(path)  # warm up
        count = 0
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            connection.get(path)
            count += 1
        return count / elapsed
    finally:
        connection.close()


def records_per_second(port: int, token: str, path: str, records: int, seconds: float) -> float:
    stream(port, token, path)  # warm up
    sent = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        body = stream(port, token, path)
        assert body.count(b"event: record\n") == records, "a stream lost records"
        sent += records
    return sent / elapsed


def serve_bare(page_file: str, events_file: str) -> None:
    """The baseline: Starlette routes answering from memory, under the same uvicorn settings
    as ``envharness serve`` (``envharness.service.server.run_service``)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    page = Path(page_file).read_bytes()
    events = [event + b"\n\n" for event in Path(events_file).read_bytes().split(b"\n\n") if event]

    async def records(request: Request) -> Response:
        return Response(page, media_type="application/json")

    async def chunks() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    async def sse(request: Request) -> Response:
        return StreamingResponse(chunks(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/api/sessions/{session_id}/records", records),
            Route("/api/sessions/{session_id}/events", sse),
        ]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # as serve's
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"bare on port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", ws="none",
        server_header=False, proxy_headers=False, timeout_graceful_shutdown=1,
    )  # fmt: skip
    with suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])


def main(turns: int, limit: int, seconds: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="envharness-bench-") as directory:
        store = Path(directory) / "store"
        session_id = anyio.run(write_session, store, turns)
        token = anyio.run(viewer_token, store)
        records_path = f"/api/sessions/{session_id}/records?limit={limit}"
        events_path = f"/api/sessions/{session_id}/events"
        ours_command = [
            sys.executable, "-m", "envharness.cli", "--store", str(store), "serve", "--port", "0",
        ]  # fmt: skip
        with server(ours_command, r"http://127\.0\.0\.1:(\d+)/login") as ours:
            page = Connection(ours, token).get(records_path)
            events = stream(ours, token, events_path)
            records = events.count(b"event: record\n")
            page_file, events_file = Path(directory) / "page.json", Path(directory) / "events"
            page_file.write_bytes(page)
            events_file.write_bytes(events)
            bare_command = [sys.executable, __file__, "--bare", str(page_file), str(events_file)]
            with server(bare_command, r"bare on port (\d+)") as bare:
                assert Connection(bare, token).get(records_path) == page
                assert stream(bare, token, events_path) == events
                print(
                    f"one session: {records:,} records; a page of {limit}: {len(page):,} bytes; "
                    f"the whole stream: {len(events):,} bytes; best of {rounds} rounds of "
                    f"{seconds:g} s"
                )
                get = {"bare": 0.0, "envharness": 0.0}
                sse = {"bare": 0.0, "envharness": 0.0}
                for _ in range(rounds):
                    for name, port in (("bare", bare), ("envharness", ours)):
                        rate = requests_per_second(port, token, records_path, seconds)
                        get[name] = max(get[name], rate)
                        rate = records_per_second(port, token, events_path, records, seconds)
                        sse[name] = max(sse[name], rate)
    print(f"{'':24} {'bare':>12} {'envharness':>12} {'ratio':>6}")
    for label, rates in (("GET records (req/s)", get), ("SSE (records/s)", sse)):
        ratio = rates["envharness"] / rates["bare"]
        print(f"{label:24} {rates['bare']:>12,.0f} {rates['envharness']:>12,.0f} {ratio:>6.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare"]:
        serve_bare(sys.argv[2], sys.argv[3])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns of the session (7 rec/turn)")
    parser.add_argument("--limit", type=int, default=100, help="records per GET page")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    main(options.turns, options.limit, options.seconds, options.rounds)
