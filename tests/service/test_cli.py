"""``envharness token`` and the refusals of ``envharness serve`` (it never starts here)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

from envharness.cli import app
from envharness.store.tokens import TokenStore
from tests.service._support import SOLO


@pytest.fixture
def store(quickstart_store_master: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(quickstart_store_master, tmp_path / "store"))


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def test_a_token_is_printed_once_and_stored_hashed(store: Path) -> None:
    issued = invoke("--store", store, "token", "--role", "viewer", "--label", "ci")
    assert issued.exit_code == 0, issued.output
    secret = issued.stdout.strip()
    assert secret.startswith("eht_")
    assert "shown only now" in issued.stderr
    info = anyio.run(lambda: TokenStore(store).resolve(secret))
    assert info is not None
    assert info.role == "viewer"
    assert info.label == "ci"
    assert secret.encode() not in (store / "evidence.sqlite3").read_bytes()


def test_tokens_are_listed_and_revoked(store: Path) -> None:
    invoke("--store", store, "token", "--role", "admin")
    listed = invoke("--store", store, "token", "list", "--json")
    assert listed.exit_code == 0
    [token] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert token["role"] == "admin"
    assert "secret" not in listed.stdout
    table = invoke("--store", store, "token", "list")
    assert token["id"] in table.stdout
    assert "active" in table.stdout
    revoked = invoke("--store", store, "token", "revoke", token["id"])
    assert revoked.exit_code == 0
    assert "revoked" in invoke("--store", store, "token", "list").stdout
    missing = invoke("--store", store, "token", "revoke", "tok_nope")
    assert missing.exit_code == 2
    assert "no token" in missing.stderr


def test_a_participant_token_names_its_participant_and_sessions(store: Path) -> None:
    sessions = [
        json.loads(line)["id"]
        for line in invoke("--store", store, "sessions", "--json").stdout.splitlines()
    ]
    bound = invoke(
        "--store", store, "token", "--role", "participant", "--participant", "bob",
        "--session", sessions[6][:-2],  # a unique prefix will do on the command line
    )  # fmt: skip
    assert bound.exit_code == 0, bound.output
    info = anyio.run(lambda: TokenStore(store).resolve(bound.stdout.strip()))
    assert info is not None
    assert info.sessions == (sessions[6],)
    nameless = invoke("--store", store, "token", "--role", "participant")
    assert nameless.exit_code == 2
    assert "--participant NAME" in nameless.stderr
    elsewhere = invoke(
        "--store", store, "token", "--role", "participant", "--participant", "bob",
        "--session", sessions[SOLO],  # a solo session: alice only
    )  # fmt: skip
    assert elsewhere.exit_code == 2
    assert "takes no part" in elsewhere.stderr


def test_token_needs_a_role_or_a_subcommand(store: Path) -> None:
    bare = invoke("--store", store, "token")
    assert bare.exit_code == 2
    assert "--role" in bare.stderr
    mixed = invoke("--store", store, "token", "--role", "admin", "list")
    assert mixed.exit_code == 2
    bad_role = invoke("--store", store, "token", "--role", "root")
    assert bad_role.exit_code == 2
    assert "not one of" in bad_role.stderr


def test_serve_refuses_anything_but_loopback(store: Path) -> None:
    for host in ("0.0.0.0", "192.168.0.10", "example.com"):
        result = invoke("--store", store, "serve", "--host", host)
        assert result.exit_code == 2
        assert "not a loopback address" in result.stderr


def test_serve_refuses_a_missing_store(tmp_path: Path) -> None:
    result = invoke("--store", tmp_path / "nowhere", "serve", "--port", "0")
    assert result.exit_code == 2
    assert "no evidence store" in result.stderr
    assert not (tmp_path / "nowhere").exists()


def test_serve_refuses_a_port_in_use(store: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("--store", store, "serve", "--port", str(port))
    assert result.exit_code == 2
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
