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

With a PostgreSQL server (``--postgres URL`` of an empty database, or else one started as
the tests start theirs, ``tests/_engines.py``), two more columns: **envharness PG**, ``serve``
over the same session copied into it with ``copy-store`` (the same bytes), and **PG by
hand**, the by-hand server's query on one kept psycopg connection. The tables are
analyzed after the copy (``ANALYZE``), as autovacuum would soon do: on a fresh table the planner
sorts the whole session for every page. Without psycopg or a server the PostgreSQL columns
are skipped, saying why.

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
    .venv/bin/python tools/bench/service.py --postgres postgresql://me@127.0.0.1/empty_db

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
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store.postgres.backend import PostgresBackend
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


async def viewer_token(store: Path | str) -> str:
    backend = PostgresBackend(store) if isinstance(store, str) else store
    return (await TokenStore(backend).issue("viewer", label="tools/bench/service.py")).secret


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

    lock = threading.Lock()
    query = (
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
        " WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
    )
    status_query = "SELECT status FROM sessions WHERE id = ?"
    if store.startswith("postgresql://"):
        import psycopg

        connection: Any = psycopg.connect(store, autocommit=True)
        query, status_query = query.replace("?", "%s"), status_query.replace("?", "%s")
        unlimited = None  # LIMIT NULL
    else:
        database = (Path(store) / "evidence.sqlite3").resolve().as_uri() + "?mode=ro"
        connection = sqlite3.connect(database, uri=True, check_same_thread=False)
        unlimited = -1

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
            [(status,)] = connection.execute(status_query, (session_id,)).fetchall()
            return status, connection.execute(query, (session_id, -1, unlimited)).fetchall()

    def row(found: tuple[object, ...]) -> Row:
        return Row(*found[:6], msgspec.Raw(bytes(found[6])), *found[7:])  # type: ignore[arg-type]

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


@contextmanager
def postgres_database(url: str | None) -> Iterator[str | None]:
    """``url``, or an empty database on a server started for the run as the tests start
    theirs; ``None`` (and why, printed) when there is no driver or no server."""
    if url is not None:
        yield url
        return
    sys.path.insert(0, str(ROOT))
    try:
        from tests import _engines

        _engines.require_psycopg()
        with _engines.running_postgres() as postgres, _engines.fresh_database(postgres) as fresh:
            yield fresh
    except _engines.EngineUnavailable as exc:
        print(f"PostgreSQL columns skipped: {str(exc).splitlines()[0]}")
        yield None


def copy_into(store: Path, url: str) -> str:
    """The store copied into the database at ``url`` (every digest checked), its statistics
    gathered; a viewer token's secret there."""
    command = [sys.executable, "-m", "envharness.cli", "copy-store", str(store), url]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("ANALYZE")
    return anyio.run(viewer_token, url)


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


def main(turns: int, limit: int, seconds: float, rounds: int, postgres: str | None = None) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="envharness-bench-") as directory,
        postgres_database(postgres) as url,
        ExitStack() as running,
    ):
        store = Path(directory) / "store"
        session_id = anyio.run(write_session, store, turns)
        tokens = {"envharness": anyio.run(viewer_token, store)}
        records_path = f"/api/sessions/{session_id}/records?limit={limit}"
        events_path = f"/api/sessions/{session_id}/events"
        serve = [sys.executable, "-m", "envharness.cli", "--store"]
        login = r"http://127\.0\.0\.1:(\d+)/login"
        ours = running.enter_context(server([*serve, str(store), "serve", "--port", "0"], login))
        page = Connection(ours.port, tokens["envharness"]).get(records_path)
        events = stream(ours.port, tokens["envharness"], events_path)
        records = events.count(b"event: record\n")
        page_file, events_file = Path(directory) / "page.json", Path(directory) / "events"
        page_file.write_bytes(page)
        events_file.write_bytes(events)
        by_hand = [sys.executable, __file__, "--by-hand"]
        commands = {
            "bare": ([sys.executable, __file__, "--bare", str(page_file), str(events_file)],
                     r"bare on port (\d+)"),
            "by hand": ([*by_hand, str(store)], r"by hand on port (\d+)"),
        }  # fmt: skip
        if url is not None:
            tokens["envharness PG"] = copy_into(store, url)
            commands["PG by hand"] = ([*by_hand, url], r"by hand on port (\d+)")
            commands["envharness PG"] = ([*serve, url, "serve", "--port", "0"], login)
        servers = {
            name: running.enter_context(server(*command)) for name, command in commands.items()
        }
        servers["envharness"] = ours
        for name, other in servers.items():  # the same bytes from each
            token = tokens.get(name, "")
            assert Connection(other.port, token).get(records_path) == page, name
            assert stream(other.port, token, events_path) == events, name
        print(
            f"one session: {records:,} records; a page of {limit}: {len(page):,} bytes; "
            f"the whole stream: {len(events):,} bytes; best of {rounds} rounds of "
            f"{seconds:g} s; server CPU per request or stream over all rounds (not the "
            "PostgreSQL server's)"
        )
        get = {name: Rates() for name in servers}
        sse = {name: Rates() for name in servers}
        for _ in range(rounds):
            for name, served in servers.items():
                token = tokens.get(name, "")
                get[name].measure(
                    served,
                    lambda port, token=token: requests(port, token, records_path, seconds),  # type: ignore[misc]
                )
                sse[name].measure(
                    served,
                    lambda port, token=token: streams(port, token, events_path, records, seconds),  # type: ignore[misc]
                )
    for label, rates, unit in (
        ("GET records req/s", get, 1.0),
        ("SSE records/s", sse, float(records)),
    ):  # fmt: skip
        best = {name: rate.best * unit for name, rate in rates.items()}
        print(f"{label}:")
        for name, rate in rates.items():
            print(f"  {name:14} {best[name]:>9,.0f}   CPU {rate.cpu_ms():6.2f} ms")
        ratios = [("envharness", "bare"), ("envharness", "by hand")]
        if "envharness PG" in best:
            ratios += [("envharness PG", "PG by hand"), ("envharness PG", "envharness")]
        print("  " + "   ".join(f"{a} / {b}: {best[a] / best[b]:.2f}" for a, b in ratios))


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
    parser.add_argument(
        "--postgres", metavar="URL",
        help="an empty PostgreSQL database for the PG columns (default: start a server)",
    )  # fmt: skip
    options = parser.parse_args()
    main(options.turns, options.limit, options.seconds, options.rounds, options.postgres)
