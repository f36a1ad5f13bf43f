"""A fresh sign-in link for a running server (``envharness login-link``), the "Link expired"
page, and ``serve --open`` on a machine without a browser."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from typer.testing import CliRunner, Result

from envharness.cli import app
from envharness.cli.serve import NO_BROWSER, sign_in_browser
from envharness.service.link_codes import (
    clear_address,
    issue_stored_code,
    read_address,
    record_address,
    redeem_stored_code,
)
from envharness.store.backend import SqliteBackend
from tests.service._browser import stop
from tests.service._support import SessionWriter, World, make_world, write_store


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture
def store(quickstart_store_master: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(quickstart_store_master, tmp_path / "store"))


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port something listens on, standing in for a running ``serve``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


async def _post(world: World, code: str) -> tuple[int, str]:
    async with world.client("none") as client:
        response = await client.post("/login", data={"code": code})
        return response.status_code, response.text


@pytest.mark.anyio
async def test_a_stored_code_signs_in_once_then_shows_link_expired(world: World) -> None:
    code = await anyio.to_thread.run_sync(issue_stored_code, world.store)
    status, _ = await _post(world, code)
    assert status == 303
    status, text = await _post(world, code)
    assert status == 400
    assert "<h1>Link expired</h1>" in text
    assert "already used or has expired" in text
    assert f"envharness --store {world.store} login-link" in text


@pytest.mark.anyio
async def test_two_requests_racing_with_one_code_sign_in_one_browser(world: World) -> None:
    code = await anyio.to_thread.run_sync(issue_stored_code, world.store)
    statuses: list[int] = []

    async def attempt() -> None:
        statuses.append((await _post(world, code))[0])

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(attempt)
    assert sorted(statuses) == [303, 400, 400, 400]


def test_an_expired_stored_code_is_refused_and_forgotten(store: Path) -> None:
    code = issue_stored_code(store, clock=lambda: 1000.0, ttl=600)
    assert not redeem_stored_code(store, code, clock=lambda: 1600.0)
    assert list((store / "service" / "codes").iterdir()) == []
    live = issue_stored_code(store, clock=lambda: 1000.0, ttl=600)
    assert redeem_stored_code(store, live, clock=lambda: 1599.0)
    stale = issue_stored_code(store, clock=lambda: 0.0, ttl=1)
    issue_stored_code(store)  # issuing sweeps the expired ones away
    assert not redeem_stored_code(store, stale)


def test_a_stores_backend_and_its_directory_share_codes_and_address(store: Path) -> None:
    """``serve``'s pages pass ``Store.backend``, the command line the directory."""
    backend = SqliteBackend(store)
    assert redeem_stored_code(backend, issue_stored_code(store))
    assert redeem_stored_code(store, issue_stored_code(backend))
    record_address(backend, "http://127.0.0.1:8765")
    assert read_address(store) == read_address(backend) == "http://127.0.0.1:8765"


def test_unknown_empty_or_oversized_codes_are_refused(store: Path) -> None:
    assert not redeem_stored_code(store, "made-up")  # no codes directory yet
    issue_stored_code(store)
    for code in ("made-up", "", "x" * 10_000):
        assert not redeem_stored_code(store, code)


def test_the_store_keeps_only_a_digest_readable_by_this_user(store: Path) -> None:
    code = issue_stored_code(store)
    [kept] = (store / "service" / "codes").iterdir()
    assert code not in kept.name
    assert code not in kept.read_text()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE((store / "service").stat().st_mode) & 0o077 == 0


def test_login_link_prints_a_link_to_the_recorded_server(store: Path, listening: int) -> None:
    record_address(store, f"http://127.0.0.1:{listening}")
    result = invoke("--store", store, "login-link")
    assert result.exit_code == 0, result.output
    link = result.stdout.strip()
    assert link.startswith(f"http://127.0.0.1:{listening}/login?code=")
    code = link.partition("code=")[2]
    assert code not in result.stderr  # shown once, on stdout: never in a log line
    assert "one use, valid 10 minutes" in result.stderr
    world = make_world(store)  # the code is the store's, whichever port serves it
    assert anyio.run(_post, world, code)[0] == 303


def test_login_link_takes_the_port_when_none_is_recorded(store: Path, listening: int) -> None:
    result = invoke("--store", store, "login-link", "--port", str(listening))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"http://127.0.0.1:{listening}/login?code=")


def test_login_link_without_a_server_says_how_to_start_one(store: Path) -> None:
    result = invoke("--store", store, "login-link")
    assert result.exit_code == 2
    assert "no `envharness serve` has recorded an address" in result.stderr
    assert "--port N" in result.stderr
    assert not (store / "service" / "codes").exists() or not any(
        (store / "service" / "codes").iterdir()
    )


def test_login_link_refuses_a_recorded_server_that_is_gone(store: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    record_address(store, f"http://127.0.0.1:{port}")
    result = invoke("--store", store, "login-link")
    assert result.exit_code == 2
    assert f"no viewer answers at http://127.0.0.1:{port}" in result.stderr
    assert "envharness serve" in result.stderr


def test_login_link_refuses_a_host_that_is_not_loopback(store: Path) -> None:
    result = invoke("--store", store, "login-link", "--host", "0.0.0.0", "--port", "8765")
    assert result.exit_code == 2
    assert "not a loopback address" in result.stderr


def test_a_server_removes_only_its_own_address(store: Path) -> None:
    path = record_address(store, "http://127.0.0.1:1111")
    record_address(store, "http://127.0.0.1:2222")  # a second serve of the same store
    clear_address(path, "http://127.0.0.1:1111")
    assert read_address(store) == "http://127.0.0.1:2222"
    clear_address(path, "http://127.0.0.1:2222")
    assert read_address(store) is None


@pytest.mark.anyio
async def test_open_without_a_browser_says_so_and_points_at_the_link(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[str] = []

    def no_browser(url: str) -> bool:
        opened.append(url)
        return False

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert not await sign_in_browser(world.service, private, open_url=no_browser)
    assert NO_BROWSER in capsys.readouterr().err
    assert "'sign in' link printed above" in NO_BROWSER
    assert "envharness login-link" in NO_BROWSER
    [url] = opened
    assert url.startswith("file://")
    assert list(private.iterdir()) == []  # the page with its code is gone at once


def test_a_running_serve_takes_a_fresh_link_without_a_restart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["alice"]), 1)])
    with subprocess.Popen(
        [sys.executable, "-m", "envharness.cli", "--store", str(store), "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            printed = [process.stdout.readline() for _ in range(4)]
            base = re.search(r"http://127\.0\.0\.1:\d+", printed[1])
            assert base, printed
            assert f"--store {store} login-link" in printed[3]
            issued = invoke("--store", store, "login-link")
            assert issued.exit_code == 0, issued.output
            link = issued.stdout.strip()
            assert link.startswith(f"{base.group(0)}/login?code=")
            code = link.partition("code=")[2]
            with httpx.Client(base_url=base.group(0), timeout=10) as browser:
                assert browser.post("/login", data={"code": code}).status_code == 303
                assert browser.get("/").status_code == 200
                again = browser.post("/login", data={"code": code})
                assert again.status_code == 400
                assert "Link expired" in again.text
        finally:
            stop(process)
        errors = process.stderr.read()
    assert process.returncode == 0, errors
    assert code not in errors  # no log line holds it
    assert read_address(store) is None  # a stopped server leaves no address behind
