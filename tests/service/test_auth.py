"""Every GET endpoint against every principal: admin, viewer, participant, none, revoked.

The table of expected statuses follows from each endpoint's declared roles, and the test
walks :data:`envharness.service.app.ENDPOINTS` itself, so a new endpoint is covered the day it
is added. Its path parameters name things every principal with a role may see: a quickstart
session with alice, bob and carol, and the quickstart experiment (alice and bob are in it); an
endpoint that compares two sessions is given that session and its branch (same roster).
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from envharness.service.app import ENDPOINTS
from envharness.service.routing import Endpoint
from tests.service._support import ROLES, World

pytestmark = pytest.mark.anyio


async def _shared_session(world: World) -> tuple[str, str]:
    """The quickstart's trio session (alice, bob and carol), and the branch made from it."""
    async with world.client("admin") as client:
        found = (await client.get("/api/sessions", params={"limit": 100})).json()["sessions"]
        for summary in found:
            detail = (await client.get(f"/api/sessions/{summary['id']}")).json()
            if {"alice", "bob", "carol"} <= set(detail["config"]["participants"]):
                lineage = await client.get(f"/api/sessions/{summary['id']}/lineage")
                [branch] = lineage.json()["children"]
                return str(summary["id"]), str(branch["session"]["id"])
    raise AssertionError("the quickstart has no trio session")


async def _experiment(world: World) -> str:
    async with world.client("admin") as client:
        [experiment] = (await client.get("/api/experiments")).json()["experiments"]
    return str(experiment["id"])


async def _frozen(world: World) -> tuple[str, str]:
    """The quickstart's snapshot and the dataset made from it."""
    async with world.client("admin") as client:
        [dataset] = (await client.get("/api/datasets")).json()["datasets"]
    return str(dataset["snapshots"][0]), str(dataset["name"])


def _url(
    endpoint: Endpoint,
    sessions: tuple[str, str],
    token_id: str,
    experiment_id: str,
    frozen: tuple[str, str] = ("", ""),
) -> str:
    session_id, branch_id = sessions
    path = (
        endpoint.path.replace("{session_id}", session_id)
        .replace("{trajectory_id:path}", session_id)
        .replace("{snapshot_id}", frozen[0])
        .replace("{dataset}", frozen[1])
        .replace("{experiment_id}", experiment_id)
        .replace("{token_id}", token_id)
        .replace("{seq:int}", "3")  # alice's first observation in a trio session
        .replace("{name}", "viewer.css")
    )
    if {"left", "right"} <= set(endpoint.query.__struct_fields__):
        path += f"?left={session_id}&right={branch_id}"
    return path


def expected(endpoint: Endpoint, role: str) -> int:
    if role == "revoked":
        return 401  # a bad credential is refused even where none is needed
    if endpoint.roles is None:
        return 200
    if role == "none":
        return 401
    policy = "participant" if role in ("alice", "bob") else role
    if policy not in endpoint.roles:
        return 403
    if endpoint.operation == "recordPage" and role == "bob":
        return 404  # record 3 is alice's observation: bob may not see it exists
    if endpoint.operation == "getArtifact" and policy == "participant":
        return 404  # artifact records are session level: as if it did not exist
    return 200


def _harnesses(endpoint: Endpoint) -> bool:
    """Harness versions and optimizer runs: tried on a store the optimizer wrote into."""
    return endpoint.path.startswith(("/api/harness/", "/api/optimizer/", "/harnesses"))


GETS = [e for e in ENDPOINTS if e.method == "GET" and not _harnesses(e)]
HARNESS_GETS = [e for e in ENDPOINTS if e.method == "GET" and _harnesses(e)]


async def test_every_get_endpoint_answers_every_principal_as_its_policy_says(world: World) -> None:
    sessions = await _shared_session(world)
    experiment_id = await _experiment(world)
    frozen = await _frozen(world)
    async with world.client("admin") as client:
        kept = await client.get(f"/api/sessions/{sessions[0]}/records?kind=artifact")
        artifact = kept.json()["records"][0]["seq"]
    failures = []
    for role in ROLES:
        async with world.client(role) as client:
            for endpoint in GETS:
                url = _url(endpoint, sessions, world.token_ids["viewer"], experiment_id, frozen)
                if endpoint.operation == "getArtifact":  # the board the trio session kept
                    url = url.replace("/records/3/", f"/records/{artifact}/")
                assert "{" not in url, url
                response = await client.get(url)
                if response.status_code != expected(endpoint, role):
                    failures.append(f"{role} GET {url}: {response.status_code}")
                elif response.status_code == 401:
                    assert "Bearer" in response.headers["www-authenticate"]
    assert failures == []


async def test_every_harness_endpoint_answers_every_principal_as_its_policy_says(
    harness_world: World,
) -> None:
    [run] = await harness_world.service.store.optimizer_runs()
    assert HARNESS_GETS
    failures = []
    for role in ROLES:
        async with harness_world.client(role) as client:
            for endpoint in HARNESS_GETS:
                url = endpoint.path.replace("{version}", "harness-v1").replace("{run_id}", run.id)
                if "old" in endpoint.query.__struct_fields__:
                    url += "?old=harness-v1&new=harness-v2"
                assert "{" not in url, url
                response = await client.get(url)
                if response.status_code != expected(endpoint, role):
                    failures.append(f"{role} GET {url}: {response.status_code}")
    assert failures == []


async def test_unsafe_methods_need_an_admin_bearer_token(world: World) -> None:
    body = {"role": "viewer"}
    for role, status in [("none", 401), ("revoked", 401), ("viewer", 403), ("alice", 403)]:
        async with world.client(role) as client:
            assert (await client.post("/api/tokens", json=body)).status_code == status, role
            revoke = await client.delete(f"/api/tokens/{world.token_ids['viewer']}")
            assert revoke.status_code == status, role
    async with world.client("admin") as client:
        issued = await client.post("/api/tokens", json=body)
        assert issued.status_code == 201
        revoked = await client.delete(f"/api/tokens/{issued.json()['info']['id']}")
        assert revoked.status_code == 200
        assert revoked.json()["revoked_at"] is not None


async def test_a_revoked_token_stops_working_at_once(world: World) -> None:
    async with world.client("viewer") as client:
        assert (await client.get("/api/sessions")).status_code == 200
        async with world.client("admin") as admin:
            await admin.delete(f"/api/tokens/{world.token_ids['viewer']}")
        assert (await client.get("/api/sessions")).status_code == 401


async def test_malformed_authorization_is_a_401_not_anonymous_access(world: World) -> None:
    for header in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer not-a-token", "eht_abc"]:
        async with world.client("none", headers={"Authorization": header}) as client:
            response = await client.get("/api/health")
            assert response.status_code == 401, header
            assert response.json()["status"] == 401


async def test_tokens_are_stored_only_as_digests(world: World) -> None:
    import sqlite3

    connection = sqlite3.connect(world.store / "evidence.sqlite3")
    try:
        dump = "\n".join(connection.iterdump())
    finally:
        connection.close()
    for secret in world.secrets.values():
        assert secret not in dump


async def test_an_expired_token_is_refused(world: World) -> None:
    tokens = world.service.tokens
    issued = await tokens.issue("viewer", expires_at="2000-01-01T00:00:00.000000Z")
    async with world.client("none", headers={"Authorization": f"Bearer {issued.secret}"}) as c:
        assert (await c.get("/api/sessions")).status_code == 401
    listed = {info.id: info for info in await tokens.tokens()}
    assert not listed[issued.info.id].active(tokens.now())


async def test_the_token_table_refuses_incoherent_tokens(world: World) -> None:
    from envharness.errors import ConfigurationError

    tokens = world.service.tokens
    with pytest.raises(ConfigurationError, match="participant"):
        await tokens.issue("participant")
    with pytest.raises(ConfigurationError, match="only a participant token"):
        await tokens.issue("viewer", participant="alice")
    with pytest.raises(ConfigurationError, match="not one of"):
        await tokens.issue("root")
    with pytest.raises(ConfigurationError, match="takes no part"):
        await tokens.issue("participant", participant="alice", sessions=["ses_nope"])
    await anyio.lowlevel.checkpoint()
