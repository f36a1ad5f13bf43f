"""Issue 6's bad inputs that the other service tests leave open: each gets a clear answer
that names what was wrong, never a server error.

(Revoked, expired and malformed tokens: test_auth; another participant's data: test_isolation;
a foreign Host: test_guard and test_server; a missing store and a port in use: test_cli.)
"""

from __future__ import annotations

import secrets
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from envharness.cli import app
from envharness.service.params import MAX_INTEGER
from envharness.service.wire.sessions import Problem
from tests.service._support import World

pytestmark = pytest.mark.anyio

TOO_BIG = MAX_INTEGER + 1
"""Past SQLite's largest integer: before the bound, such a seq or turn failed in the store."""


async def _ids(world: World) -> tuple[str, str]:
    async with world.client("admin") as client:
        session = (await client.get("/api/sessions")).json()["sessions"][0]["id"]
        experiment = (await client.get("/api/experiments")).json()["experiments"][0]["id"]
    return str(session), str(experiment)


async def test_a_well_formed_but_unknown_token_is_a_401_that_says_how_to_get_one(
    world: World,
) -> None:
    forged = f"Bearer eht_{secrets.token_urlsafe(32)}"
    async with world.client("none", headers={"Authorization": forged}) as client:
        for path in ("/api/health", "/api/sessions", "/", "/sessions"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert "Bearer" in response.headers["www-authenticate"]
        problem = msgspec.json.decode((await client.get("/api/sessions")).content, type=Problem)
        assert "unknown, revoked or expired" in problem.message
        assert "envharness token" in problem.message


async def test_a_revoked_browser_cookie_signs_nobody_in(world: World) -> None:
    cookie = {world.service.cookie_name: world.secrets["revoked"]}
    async with world.client("none", cookies=cookie) as client:
        page = await client.get("/")
        assert page.status_code == 401
        assert "Sign in" in page.text  # a person is told how to sign in again
        assert (await client.get("/api/sessions")).status_code == 401


@pytest.mark.parametrize(
    ("path", "params", "headers", "parameter"),
    [
        ("/api/sessions/{s}/records", {"after": TOO_BIG}, {}, "after"),
        ("/api/sessions/{s}/records", {"turn": TOO_BIG}, {}, "turn"),
        ("/api/sessions/{s}/events", {"after": TOO_BIG}, {}, "after"),
        ("/api/sessions/{s}/events", {}, {"Last-Event-ID": str(TOO_BIG)}, "Last-Event-ID"),
        ("/api/experiments/{e}/events", {"after": TOO_BIG}, {}, "after"),
        ("/api/experiments/{e}/events", {}, {"Last-Event-ID": str(TOO_BIG)}, "Last-Event-ID"),
        ("/sessions/{s}/turns", {"turn": TOO_BIG}, {}, "turn"),
        ("/sessions/{s}/turns", {"turn": 0}, {}, "turn"),
        ("/compare", {"left": "{s}", "right": "{s}", "turn": TOO_BIG}, {}, "turn"),
    ],
)
async def test_numbers_past_what_the_store_holds_are_422s_that_name_the_parameter(
    world: World, path: str, params: dict[str, object], headers: dict[str, str], parameter: str
) -> None:
    session_id, experiment_id = await _ids(world)
    url = path.format(s=session_id, e=experiment_id)
    query = {key: str(value).format(s=session_id) for key, value in params.items()}
    async with world.client("viewer", headers=headers) as client:
        response = await client.get(url, params=query)
    assert response.status_code == 422, response.text
    if url.startswith("/api/"):
        problem = msgspec.json.decode(response.content, type=Problem)
        assert problem.parameter == parameter
        assert parameter in problem.message
    else:
        assert parameter in response.text  # the viewer's error page names it too


async def test_a_record_past_what_the_store_holds_is_not_found(world: World) -> None:
    session_id, _ = await _ids(world)
    async with world.client("viewer") as client:
        for seq in (TOO_BIG, MAX_INTEGER, 10**40):
            response = await client.get(f"/sessions/{session_id}/records/{seq}")
            assert response.status_code == 404, seq


async def test_unknown_ids_are_404s_on_every_kind_of_endpoint(world: World) -> None:
    session_id, _ = await _ids(world)
    missing = "ses_00000000000000000000ff"
    async with world.client("viewer") as client:
        for path in (
            "/api/experiments/exp_nope", "/api/experiments/exp_nope/events",
            "/experiments/exp_nope", f"/api/sessions/{missing}/lineage",
            f"/sessions/{missing}", f"/sessions/{missing}/turns", f"/sessions/{missing}/config",
            f"/sessions/{missing}/records/0", f"/compare?left={session_id}&right={missing}",
            f"/api/compare?left={missing}&right={session_id}", "/static/nope.js",
        ):  # fmt: skip
            response = await client.get(path)
            assert response.status_code == 404, path
            if path.startswith(("/api/", "/static/")):
                msgspec.json.decode(response.content, type=Problem)
            else:  # a page for people
                assert "text/" in response.headers["content-type"], path
    async with world.client("admin") as client:
        revoke = await client.delete("/api/tokens/tok_00000000000000000000ff")
        assert revoke.status_code == 404
        assert "tok_00000000000000000000ff" in revoke.json()["message"]


@pytest.mark.parametrize(
    "body",
    [{"role": "participant"}, {"role": "viewer", "participant": "alice"},
     {"role": "participant", "participant": "alice", "sessions": ["ses_00000000000000000000ff"]}],
)  # fmt: skip
async def test_a_token_request_the_store_refuses_names_the_body(
    world: World, body: dict[str, object]
) -> None:
    async with world.client("admin") as client:
        response = await client.post("/api/tokens", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["parameter"] == "body"


@pytest.mark.parametrize("path", ["/api/tokens", "/api/snapshots", "/api/datasets"])
@pytest.mark.parametrize("body", [b"", b"  \n"])
async def test_an_empty_json_body_is_called_empty(world: World, path: str, body: bytes) -> None:
    async with world.client("admin") as client:
        response = await client.post(
            path, content=body, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 422, response.text
    problem = msgspec.json.decode(response.content, type=Problem)
    assert problem.parameter == "body"
    assert problem.message.startswith("the body is empty: send the "), problem.message


@pytest.mark.parametrize("what", ["an empty directory", "a file"])
def test_serve_refuses_a_path_that_is_not_a_store(tmp_path: Path, what: str) -> None:
    target = tmp_path / "not-a-store"
    if what == "a file":
        target.write_text("evidence?")
    else:
        target.mkdir()
    result = CliRunner().invoke(
        app, ["--store", str(target), "serve", "--port", "0"], catch_exceptions=False
    )
    assert result.exit_code == 2
    assert str(target) in result.stderr
    assert "--store" in result.stderr  # says what to fix
    assert "Traceback" not in result.output
    if what == "an empty directory":
        assert list(target.iterdir()) == []  # nothing written into it
