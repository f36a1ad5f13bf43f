"""The local service over loopback, against a bare Starlette endpoint sending the same bytes.

What it measures, with one client on one keep-alive connection, for one recorded session of
``--turns`` turns (two synthetic participants: seven records a turn):

- GET records: requests/s for ``/api/sessions/{id}/records?limit=N`` through ``envharness
  serve`` (the real command: Host check, bearer token, query parsed, the session and the
  caller's access checked and the page read from SQLite in a worker thread, encoded);
- SSE records/s: the session's live timeline ``/api/sessions/{id}/events`` replayed from the
  start to its ``end`` event, one chunk per event.

Each against two baselines, Starlette routes under the same uvicorn settings:

- **bare**: the same bytes from memory — no work at all, so envharness/bare is what
  authenticating, checking, reading and encoding cost per request;
- **by hand**: what a user would write without envharness — the same SQLite query on one kept
  read-only connection, in one worker-thread hop (as any async server must), the same bytes
  encoded with msgspec (payloads embedded as stored); no token, no access check. This is the
  issue's baseline ("bare Starlette over the same SQLite query"): envharness/by hand is the
  price of authentication, isolation and the checks, not of the query.

All are uvicorn with the same settings, each in a process of its own on a free 127.0.0.1
port; the client is a raw socket (HTTP/1.1 keep-alive for GET, one HTTP/1.0 connection per
stream), so little of the time is the client's. Rounds alternate between the servers and
the best round of each counts. It prints the rates and both ratios, and each server
process's CPU time per request (per stream for SSE) over all its rounds, read from ``/proc``:
on a shared machine the wall rates swing with other load, the CPU per request much less.
Every server's answers are checked to be byte-identical first.

Run it from the repository root::

    .venv/bin/python tools/bench/service.py                   # 300 turns, pages of 100
    .venv/bin/python tools/bench/service.py --limit 1000 --seconds 3

On a machine shared with other work, the absolute rates swing widely; the ratios, measured
in the same rounds, much less. Where a GET's time went before this issue (issue 20), and what
was done about it, is in docs/architecture.md ("Service reads").
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
from collections.abc import AsyncIterator, Callable, Iterator
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


class Served:
    """A running server: its port, and the CPU time its process has used so far."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid

    def cpu_seconds(self) -> float:
        """User + system time of the process (Linux ``/proc``; 0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(command: list[str], pattern: str) -> Iterator[Served]:
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
                    yield Served(int(found.group(1)), process.pid)
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


def requests(port: int, token: str, path: str, seconds: float) -> tuple[int, float]:
    """GETs made on one keep-alive connection in about ``seconds``, and the time they took."""
    connection = Connection(port, token)
    try:
        connection.get(path)  # warm up
        count = 0
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            connection.get(path)
            count += 1
        return count, elapsed
    finally:
        connection.close()


def streams(port: int, token: str, path: str, records: int, seconds: float) -> tuple[int, float]:
    """Whole streams read in about ``seconds``, and the time they took."""
    stream(port, token, path)  # warm up
    count = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        body = stream(port, token, path)
        assert body.count(b"event: record\n") == records, "a stream lost records"
        count += 1
    return count, elapsed


def serve_bare(page_file: str, events_file: str) -> None:
    """The bare baseline: Starlette routes answering from memory, under the same uvicorn
    settings as ``envharness serve`` (``envharness.service.server.run_service``)."""
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
    _serve_app(app, "bare")


def serve_by_hand(store: str) -> None:
    """The by-hand baseline: the same query and the same bytes, nothing else (see above)."""
    import sqlite3
    import threading

    import msgspec
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    database = (Path(store) / "evidence.sqlite3").resolve().as_uri() + "?mode=ro"
    connection = sqlite3.connect(database, uri=True, check_same_thread=False)
    lock = threading.Lock()
    query = (
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
        " WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
    )

    class Row(msgspec.Struct):
        session_id: str
        seq: int
        kind: str
        turn: int | None
        participant: str | None
        at: str
        payload: msgspec.Raw
        prev: str | None
        digest: str

    class Page(msgspec.Struct):
        records: list[Row]
        next_after: int | None

    class End(msgspec.Struct):
        status: str
        last_seq: int

    encoder = msgspec.json.Encoder()

    def rows(session_id: str, limit: int) -> list[tuple[object, ...]]:
        with lock:
            return connection.execute(query, (session_id, -1, limit)).fetchall()

    def stream_rows(session_id: str) -> tuple[str, list[tuple[object, ...]]]:
        with lock:
            [(status,)] = connection.execute(
                "SELECT status FROM sessions WHERE id = ?", (session_id,)
            ).fetchall()
            return status, connection.execute(query, (session_id, -1, -1)).fetchall()

    def row(found: tuple[object, ...]) -> Row:
        return Row(*found[:6], msgspec.Raw(found[6]), *found[7:])  # type: ignore[arg-type]

    async def records(request: Request) -> Response:
        limit = int(request.query_params.get("limit", "100"))
        found = await anyio.to_thread.run_sync(rows, request.path_params["session_id"], limit + 1)
        more = len(found) > limit
        page = [row(item) for item in found[:limit]]
        body = encoder.encode(Page(page, page[-1].seq if more else None))
        return Response(body, media_type="application/json")

    async def sse(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            status, found = await anyio.to_thread.run_sync(
                stream_rows, request.path_params["session_id"]
            )
            for item in found:
                data = encoder.encode(row(item))
                yield b"id: %d\nevent: record\ndata: %s\n\n" % (item[1], data)
            end = encoder.encode(End(status, int(str(found[-1][1]))))
            yield b"event: end\ndata: %s\n\n" % end

        return StreamingResponse(chunks(), media_type="text/event-stream")

    _serve_app(
        Starlette(
            routes=[
                Route("/api/sessions/{session_id}/records", records),
                Route("/api/sessions/{session_id}/events", sse),
            ]
        ),
        "by hand",
    )


def _serve_app(app: object, name: str) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # as serve's
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"{name} on port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", ws="none",  # type: ignore[arg-type]
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
            page = Connection(ours.port, token).get(records_path)
            events = stream(ours.port, token, events_path)
            records = events.count(b"event: record\n")
            page_file, events_file = Path(directory) / "page.json", Path(directory) / "events"
            page_file.write_bytes(page)
            events_file.write_bytes(events)
            bare_command = [sys.executable, __file__, "--bare", str(page_file), str(events_file)]
            hand_command = [sys.executable, __file__, "--by-hand", str(store)]
            with (
                server(bare_command, r"bare on port (\d+)") as bare,
                server(hand_command, r"by hand on port (\d+)") as by_hand,
            ):
                servers = {"bare": bare, "by hand": by_hand, "envharness": ours}
                for other in (bare, by_hand):
                    assert Connection(other.port, token).get(records_path) == page
                    assert stream(other.port, token, events_path) == events
                print(
                    f"one session: {records:,} records; a page of {limit}: {len(page):,} bytes; "
                    f"the whole stream: {len(events):,} bytes; best of {rounds} rounds of "
                    f"{seconds:g} s; server CPU per request or stream over all rounds"
                )
                get = {name: Rates() for name in servers}
                sse = {name: Rates() for name in servers}
                for _ in range(rounds):
                    for name, served in servers.items():
                        get[name].measure(
                            served, lambda port: requests(port, token, records_path, seconds)
                        )
                        sse[name].measure(
                            served, lambda port: streams(port, token, events_path, records, seconds)
                        )
    print(
        f"{'':19} {'bare':>8} {'by hand':>8} {'envharness':>10} {'/bare':>6} {'/by hand':>8}"
        f"   CPU: {'bare':>7} {'by hand':>8} {'envharness':>10}"
    )
    for label, rates, unit in (
        ("GET records req/s", get, 1.0),
        ("SSE records/s", sse, float(records)),
    ):  # fmt: skip
        best = {name: rate.best * unit for name, rate in rates.items()}
        cpu = {name: f"{rate.cpu_ms():.2f} ms" for name, rate in rates.items()}
        print(
            f"{label:19} {best['bare']:>8,.0f} {best['by hand']:>8,.0f} "
            f"{best['envharness']:>10,.0f} {best['envharness'] / best['bare']:>6.2f} "
            f"{best['envharness'] / best['by hand']:>8.2f}   CPU: {cpu['bare']:>7} "
            f"{cpu['by hand']:>8} {cpu['envharness']:>10}"
        )


class Rates:
    """The best rate of a server's rounds, and the CPU its process used per request."""

    def __init__(self) -> None:
        self.best = 0.0
        self.cpu = 0.0
        self.count = 0

    def measure(self, served: Served, run: Callable[[int], tuple[int, float]]) -> None:
        before = served.cpu_seconds()
        count, elapsed = run(served.port)
        self.cpu += served.cpu_seconds() - before
        self.count += count + 1  # and the warm-up's
        self.best = max(self.best, count / elapsed)

    def cpu_ms(self) -> float:
        return 1000 * self.cpu / max(self.count, 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare"]:
        serve_bare(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if sys.argv[1:2] == ["--by-hand"]:
        serve_by_hand(sys.argv[2])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns of the session (7 rec/turn)")
    parser.add_argument("--limit", type=int, default=100, help="records per GET page")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    main(options.turns, options.limit, options.seconds, options.rounds)
