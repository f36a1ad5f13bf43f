"""A token taken from the ones already resolved is still checked in the request's own read.

``GET …/records`` and ``GET …/events`` (``Endpoint.cached_token``) skip the token lookup of
their own and re-read the token's row in the same worker-thread call as their answer. These
tests revoke or expire a token *after* it was resolved and cached, in every way one can be, and
check that the very next request is refused as before, and that a revoked token's 401 still
comes before anything else the request would have been told.
"""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.types import ASGIApp

from envharness.service.routing import ANYONE, Call, Endpoint, build_route
from envharness.store.tokens import TokenStore
from tests.service._support import BASE, SessionWriter, World, make_world, write_store

pytestmark = pytest.mark.anyio

SESSION = "ses_0190000000005eed5eed01"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> World:
    """One finished session of alice and bob; each test issues the tokens it revokes."""
    store = tmp_path_factory.mktemp("token-cache") / "store"
    write_store(store, [(SessionWriter(("alice", "bob"), session_id=SESSION), 2)])
    return make_world(store)


async def _issue(world: World, role: str, **options: object) -> tuple[str, str]:
    """A fresh token's secret and id (a participant token is alice's)."""
    participant = "alice" if role == "participant" else None
    issued = await world.service.tokens.issue(role, participant=participant, **options)  # type: ignore[arg-type]
    return issued.secret, issued.info.id


def _client(app: ASGIApp, secret: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app),  # type: ignore[arg-type]
        base_url=BASE,
        headers={"Authorization": f"Bearer {secret}"},
    )


async def _records_then_events(world: World, secret: str) -> list[int]:
    async with _client(world.app, secret) as client:
        return [
            (await client.get(f"/api/sessions/{SESSION}/{what}")).status_code
            for what in ("records", "events")
        ]


async def test_a_token_revoked_through_the_api_is_refused_at_once(shared: World) -> None:
    secret, token_id = await _issue(shared, "viewer")
    assert await _records_then_events(shared, secret) == [200, 200]
    assert any(info.id == token_id for info in shared.service.resolved_tokens.values())
    async with shared.client("admin") as admin:
        assert (await admin.delete(f"/api/tokens/{token_id}")).status_code == 200
    assert await _records_then_events(shared, secret) == [401, 401]


async def test_a_token_revoked_by_another_process_is_refused_at_once(shared: World) -> None:
    """The command line revokes through its own connection: nothing tells the service."""
    secret, token_id = await _issue(shared, "participant")
    assert await _records_then_events(shared, secret) == [200, 200]
    await TokenStore(shared.store).revoke(token_id)
    assert await _records_then_events(shared, secret) == [401, 401]


async def test_a_cached_token_that_expires_is_refused(
    shared: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = ["2030-01-01T00:00:00.000000Z"]
    monkeypatch.setattr(shared.service, "tokens", TokenStore(shared.store, clock=lambda: now[0]))
    secret, _ = await _issue(shared, "viewer", expires_at="2030-01-01T00:00:01.000000Z")
    assert await _records_then_events(shared, secret) == [200, 200]
    now[0] = "2030-01-01T00:00:02.000000Z"
    assert await _records_then_events(shared, secret) == [401, 401]


async def test_a_revoked_cached_token_gets_a_401_before_any_other_answer(shared: World) -> None:
    """A bad parameter, a missing session or another participant's records: each would say
    something (422, 404); a revoked token is told only that it is refused."""
    secret, token_id = await _issue(shared, "participant")
    assert await _records_then_events(shared, secret) == [200, 200]
    await TokenStore(shared.store).revoke(token_id)
    async with _client(shared.app, secret) as client:
        for path in (
            f"/api/sessions/{SESSION}/records?limit=0",
            f"/api/sessions/{SESSION}/records?participant=bob",
            "/api/sessions/ses_nosuchsession/records",
            f"/api/sessions/{SESSION}/events?after=x",
        ):
            response = await client.get(path)
            assert response.status_code == 401, (path, response.text)
            assert "revoked" in response.json()["message"]


async def test_a_cached_participant_token_still_reads_only_its_own_records(
    shared: World,
) -> None:
    secret, _ = await _issue(shared, "participant")
    for _ in range(2):  # resolved, then from the cache
        async with _client(shared.app, secret) as client:
            page = await client.get(f"/api/sessions/{SESSION}/records")
            other = await client.get(f"/api/sessions/{SESSION}/records?participant=bob")
        assert page.status_code == 200
        assert {record["participant"] for record in page.json()["records"]} == {"alice"}
        assert other.status_code == 404


async def test_a_handler_that_reads_nothing_still_has_the_token_checked(shared: World) -> None:
    """The check a handler's read did not make is made after it returns, before any byte."""

    async def static(call: Call[object]) -> Response:
        return Response(b"ok")

    endpoint = Endpoint(
        method="GET", path="/static", handler=static, operation="static", summary="",
        tag="test", roles=ANYONE, cached_token=True,
    )  # fmt: skip
    app = Starlette(routes=[build_route(endpoint, shared.service, lambda *a: Response())])
    secret, token_id = await _issue(shared, "viewer")
    async with _client(app, secret) as client:
        assert (await client.get("/static")).status_code == 200
        assert (await client.get("/static")).status_code == 200
        await TokenStore(shared.store).revoke(token_id)
        assert (await client.get("/static")).status_code == 401


async def test_a_revoked_cached_cookie_counts_as_no_credential_as_before(shared: World) -> None:
    secret, token_id = await _issue(shared, "viewer")
    cookie = {"Cookie": f"{shared.service.cookie_name}={secret}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(shared.app), base_url=BASE, headers=cookie
    ) as client:
        path = f"/api/sessions/{SESSION}/records"
        assert (await client.get(path)).status_code == 200
        assert (await client.get(path)).status_code == 200
        await TokenStore(shared.store).revoke(token_id)
        refused = await client.get(path)
    assert refused.status_code == 401
    assert refused.json()["message"].startswith("this needs a credential")
