"""The checks before routing: Host (DNS rebinding), cross-site writes, no CORS, safe headers."""

from __future__ import annotations

import pytest

from envharness.errors import ConfigurationError
from envharness.service.state import Address, loopback_address
from tests.service._support import World

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "host",
    ["evil.example:8765", "evil.example", "127.0.0.1:9999", "127.0.0.1", "0.0.0.0:8765",
     "localhost.evil.example:8765", ""],
)  # fmt: skip
async def test_a_foreign_host_header_is_refused_before_anything_runs(
    world: World, host: str
) -> None:
    async with world.client("admin", headers={"Host": host}) as client:
        for path in ("/api/health", "/api/sessions", "/", "/login?code=x", "/openapi.json"):
            response = await client.get(path)
            assert response.status_code == 400, (host, path)
            assert "not this server" in response.json()["message"]


async def test_the_bound_address_and_localhost_are_accepted(world: World) -> None:
    for host in ("127.0.0.1:8765", "localhost:8765", "LocalHost:8765"):  # names ignore case
        async with world.client("viewer", headers={"Host": host}) as client:
            assert (await client.get("/api/health")).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
     {"Sec-Fetch-Site": "same-site"}, {"Origin": "http://127.0.0.1:9999"}],
)  # fmt: skip
async def test_cross_site_requests_cannot_change_anything(
    world: World, headers: dict[str, str]
) -> None:
    async with world.client("admin", headers=headers) as client:
        assert (await client.post("/api/tokens", json={"role": "viewer"})).status_code == 403
        assert (await client.post("/login", data={"code": "x"})).status_code == 403
        assert (await client.post("/logout")).status_code == 403
    assert len(await world.service.tokens.tokens()) == 5


async def test_same_origin_writes_pass(world: World) -> None:
    headers = {"Origin": "http://127.0.0.1:8765", "Sec-Fetch-Site": "same-origin"}
    async with world.client("admin", headers=headers) as client:
        assert (await client.post("/api/tokens", json={"role": "viewer"})).status_code == 201


async def test_there_is_no_cors(world: World) -> None:
    headers = {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    async with world.client("viewer", headers=headers) as client:
        for response in (await client.get("/api/sessions"), await client.options("/api/sessions")):
            assert not any(name.startswith("access-control-") for name in response.headers)
        assert (await client.options("/api/sessions")).status_code == 403  # cross-site
    async with world.client("viewer") as client:
        assert (await client.options("/api/sessions")).status_code == 405


async def test_every_answer_carries_the_security_headers(world: World) -> None:
    async with world.client("viewer") as client:
        for path in ("/", "/api/sessions", "/static/viewer.css", "/nowhere", "/api/nowhere"):
            response = await client.get(path)
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["referrer-policy"] == "same-origin"
        assert (await client.get("/api/sessions")).headers["cache-control"] == "no-store"


async def test_get_never_changes_state(world: World) -> None:
    """Every GET endpoint, hit by an admin: the token table is exactly as before."""
    from envharness.service.app import ENDPOINTS

    before = await world.service.tokens.tokens()
    code = world.service.logins.issue()
    async with world.client("admin") as client:
        for endpoint in ENDPOINTS:
            if endpoint.method == "GET" and "{" not in endpoint.path:
                await client.get(
                    endpoint.path, params={"code": code} if "login" in endpoint.path else None
                )
    assert await world.service.tokens.tokens() == before
    assert world.service.logins.redeem(code)  # the GET did not use the code up


def test_only_loopback_addresses_are_served() -> None:
    assert loopback_address("127.0.0.1", 8765) == Address("127.0.0.1", 8765)
    assert loopback_address("localhost", 1) == Address("127.0.0.1", 1)
    assert loopback_address("::1", 8765).url == "http://[::1]:8765"
    assert loopback_address("127.0.0.2", 80).host == "127.0.0.2"
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::", ""):
        with pytest.raises(ConfigurationError, match="loopback"):
            loopback_address(host, 8765)
    with pytest.raises(ConfigurationError, match="port"):
        loopback_address("127.0.0.1", 70000)
    assert Address("::1", 5).allowed_hosts == {"[::1]:5", "localhost:5"}
