"""The service for real: uvicorn on a free loopback port, reached over TCP, and ``serve``.

Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from contextlib import aclosing
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from envharness.client import AsyncClient
from envharness.store import open_store
from tests.service._browser import stop
from tests.service._support import (
    SessionWriter,
    World,
    free_port,
    make_world,
    running_server,
    write_store,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def served(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["alice", "bob"]), 2)])
    return make_world(store, port=free_port())


async def test_the_real_server_answers_and_streams_a_session_as_it_is_written(
    served: World,
) -> None:
    """A record shows in an open stream within a second of its commit; a stream cut in the
    middle and resumed with Last-Event-ID misses nothing and repeats nothing."""
    writer = SessionWriter(["alice", "bob"], turns=12)
    committed_at: dict[int, float] = {}
    received_at: dict[int, float] = {}
    bearer = {"Authorization": f"Bearer {served.secrets['viewer']}"}
    with running_server(served.service) as url:
        async with (
            AsyncClient(url, served.secrets["viewer"]) as client,
            open_store(served.store) as store,
        ):
            assert (await client.health()).status == "ok"
            rows, blobs = writer.start()
            await store.append(rows, blobs)

            async def write() -> None:
                for turn in range(1, 13):
                    await anyio.sleep(0.05)
                    rows, blobs = writer.turn(turn)
                    await store.append(rows, blobs)
                    committed_at[rows[-1].seq] = time.monotonic()
                await store.append(writer.finish())

            async def read(last: int, stop_after: int | None) -> int:
                """Read the stream on a raw socket (HTTP/1.0: the body ends when the server
                closes) and hang up after ``stop_after`` records, as a browser tab does."""
                port = served.service.address.port
                request = (
                    f"GET /api/sessions/{writer.id}/events HTTP/1.0\r\n"
                    f"Host: 127.0.0.1:{port}\r\n{_header(bearer)}Last-Event-ID: {last}\r\n\r\n"
                )
                count = 0
                buffer = b""
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(request.encode())
                    while True:
                        try:
                            buffer += await stream.receive()
                        except anyio.EndOfStream:
                            return last
                        *lines, buffer = buffer.split(b"\n")
                        for line in lines:
                            if line.startswith(b"event: end"):
                                return -1
                            if line.startswith(b"data: {"):
                                record = msgspec.json.decode(line[6:])
                                assert record["seq"] not in received_at, "a duplicate"
                                received_at[record["seq"]] = time.monotonic()
                                last = record["seq"]
                                count += 1
                                if stop_after is not None and count >= stop_after:
                                    return last

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    group.start_soon(write)
                    last = await read(-1, 20)  # then the client goes away
                    while last != -1:
                        last = await read(last, 25)
            assert sorted(received_at) == list(range(writer.chain.next_seq))
            delays = [received_at[seq] - at for seq, at in committed_at.items()]
            assert max(delays) < 1.0
            async with aclosing(client.events(writer.id)) as events:
                streamed = [record.seq async for record in events]
            assert streamed == list(range(writer.chain.next_seq))


@pytest.mark.slow
def test_serve_prints_a_one_time_link_that_signs_a_browser_in(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["alice"]), 1)])
    command = [
        sys.executable,
        "-m",
        "envharness.cli",
        "--store",
        str(store),
        "serve",
        "--port",
        "0",
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            lines = [process.stdout.readline() for _ in range(2)]
            link = re.search(r"(http://127\.0\.0\.1:(\d+))/login\?code=(\S+)", lines[1])
            assert link, lines
            base, code = link.group(1), link.group(3)
            with httpx.Client(base_url=base, timeout=10) as browser:
                assert browser.get("/").status_code == 401
                assert browser.get(f"/login?code={code}").status_code == 200
                signed_in = browser.post("/login", data={"code": code})
                assert signed_in.status_code == 303
                assert browser.get("/").status_code == 200
                assert browser.post("/login", data={"code": code}).status_code == 400
                foreign = browser.get("/", headers={"Host": f"evil.example:{link.group(2)}"})
                assert foreign.status_code == 400
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C: the normal way to stop it
            try:
                process.wait(timeout=15)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        errors = process.stderr.read()
    assert process.returncode == 0, errors
    assert "stopped" in errors


def _header(headers: dict[str, str]) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items())


def test_the_listening_socket_is_tcp_so_answers_are_not_held_by_nagle() -> None:
    """asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections accepted from a
    socket created as TCP; from a protocol-0 socket each answer's last segment waited for the
    client's delayed ACK, ~40 ms a request (found by tools/bench/service.py)."""
    import socket

    from envharness.service.server import bind
    from envharness.service.state import Address

    sock, address = bind(Address("127.0.0.1", 0))
    with sock:
        assert sock.proto == socket.IPPROTO_TCP
        assert address.port == sock.getsockname()[1] != 0


RECORDING_BROWSER = """#!{python}
import json, os, sys
with open({record!r} + ".part", "w") as record:
    json.dump(sys.argv, record)
os.replace({record!r} + ".part", {record!r})  # whole or absent: the test reads it once it exists
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX browser command")
def test_serve_open_never_puts_the_code_on_a_command_line_or_in_a_log(tmp_path: Path) -> None:
    """What ``--open`` starts is readable by every local user (``/proc/PID/cmdline``): the
    browser gets the path of a page only this user can read; the code inside it comes to the
    server in a form's body, and the page is gone once it was used."""
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["alice"]), 1)])
    record = tmp_path / "browser-argv.json"
    browser = tmp_path / "browser"
    browser.write_text(RECORDING_BROWSER.format(python=sys.executable, record=str(record)))
    browser.chmod(0o700)
    command = [sys.executable, "-m", "envharness.cli", "--store", str(store)]
    with subprocess.Popen(
        [*command, "serve", "--port", "0", "--open"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "BROWSER": f"{browser} %s"},
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            printed = [process.stdout.readline() for _ in range(2)]
            base = re.search(r"http://127\.0\.0\.1:\d+", printed[1])
            assert base, printed
            deadline = time.monotonic() + 60  # a hang, not a measure
            while not record.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            argv = msgspec.json.decode(record.read_bytes())
            [page_uri] = argv[1:]
            assert re.fullmatch(r"file:///\S+/sign-in\.html", page_uri), argv
            page = Path(page_uri.removeprefix("file://"))
            assert stat.S_IMODE(page.stat().st_mode) == 0o600
            assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
            found = re.search(r"/login#code=([\w-]+)", page.read_text())
            assert found
            code = found.group(1)
            assert code not in " ".join(argv)
            with httpx.Client(base_url=base.group(0), timeout=10) as client:
                assert client.post("/login", data={"code": code}).status_code == 303
                assert client.get("/").status_code == 200
            while page.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not page.exists()  # used: deleted at once, not left for anyone to find
        finally:
            stop(process)
        output = process.stdout.read()
        errors = process.stderr.read()
    assert process.returncode == 0, errors
    assert code not in "".join(printed) + output + errors  # no log line holds it
    assert not page.parent.exists()
