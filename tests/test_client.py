"""``envharness.client``: the typed API client, async and blocking, against the real app."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import httpx
import pytest

from envharness.client import AsyncClient, Client, ServiceError
from tests.service._support import BASE, SessionWriter, World, make_world, write_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(
        store,
        [(SessionWriter(["alice", "bob"], session_id=f"ses_{n:022x}"), 3) for n in range(1, 8)],
    )
    return make_world(store)


def _client(world: World, role: str = "admin") -> AsyncClient:
    transport = httpx.ASGITransport(world.app)
    return AsyncClient(BASE, world.secrets.get(role), transport=transport)


async def test_reads_decode_into_the_wire_types(world: World) -> None:
    async with _client(world, "viewer") as client:
        assert (await client.health()).status == "ok"
        ids = [summary.id async for summary in client.iter_sessions()]
        assert ids == [f"ses_{n:022x}" for n in range(1, 8)]
        page = await client.sessions(limit=3)
        assert len(page.sessions) == 3
        assert page.next_after == ids[2]
        detail = await client.session(ids[0])
        assert detail.config is not None
        assert detail.scores[0].kind == "score"
        records = [record async for record in client.iter_records(ids[0])]
        assert [record.seq for record in records] == list(range(len(records)))
        blocked = await client.records(ids[0], kinds=["action.blocked"])
        assert [record.participant for record in blocked.records] == ["bob"]
        async with aclosing(client.export(ids[0])) as lines:
            exported = [line async for line in lines]
        assert len(exported) == len(records)
        async with aclosing(client.events(ids[0], after=5)) as events:
            streamed = [record.seq async for record in events]
        assert streamed == list(range(6, len(records)))
        assert (await client.verify()).ok


async def test_a_participant_client_sees_its_own_records(world: World) -> None:
    async with _client(world, "alice") as client:
        session_id = (await client.sessions()).sessions[0].id
        page = await client.records(session_id, limit=1000)
        assert {record.participant for record in page.records} == {"alice"}
        with pytest.raises(ServiceError) as refused:
            await client.records(session_id, participant="bob")
        assert refused.value.status == 404


async def test_errors_carry_status_message_and_parameter(world: World) -> None:
    async with _client(world, "viewer") as client:
        with pytest.raises(ServiceError) as bad:
            await client.records("ses_00000000000000000000001", limit=0)
        assert bad.value.status == 422
        assert bad.value.parameter == "limit"
        with pytest.raises(ServiceError, match="404"):
            await client.session("ses_nope")
        with pytest.raises(ServiceError) as forbidden:
            await client.tokens()
        assert forbidden.value.status == 403
    async with _client(world, "revoked") as client:
        with pytest.raises(ServiceError) as revoked:
            await client.sessions()
        assert revoked.value.status == 401


async def test_an_admin_client_manages_tokens(world: World) -> None:
    async with _client(world) as client:
        issued = await client.issue_token("participant", participant="bob", label="bob's bot")
        assert issued.token.startswith("eht_")
        assert issued.info.id in {info.id for info in await client.tokens()}
        revoked = await client.revoke_token(issued.info.id)
        assert revoked.revoked_at is not None


def test_the_blocking_client_is_the_same_api(world: World) -> None:
    with Client(BASE, world.secrets["viewer"], transport=httpx.ASGITransport(world.app)) as c:
        ids = [summary.id for summary in c.iter_sessions()]
        assert len(ids) == 7
        assert c.session(ids[1]).session.id == ids[1]
        count = c.session(ids[1]).session.records
        assert count is not None
        assert len(list(c.iter_records(ids[1]))) == count
        assert [r.seq for r in c.events(ids[1], after=20)] == list(range(21, count))
        first = next(iter(c.export(ids[1])))  # leaving early closes the stream
        assert first.startswith(b'{"session_id"')
        assert c.verify().ok
        assert c.health().status == "ok"
        with pytest.raises(ServiceError):
            c.tokens()
