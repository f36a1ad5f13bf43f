"""A participant token sees its own records in its own sessions, and nothing else, anywhere.

Every read path is tried: the JSON API, filters, export, the live stream, and every page.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from envharness.service.wire.sessions import RecordOut, SessionPage
from tests.service._support import SessionWriter, World, make_world, write_store

pytestmark = pytest.mark.anyio


async def _sessions_by_roster(world: World) -> dict[str, set[str]]:
    async with world.client("admin") as client:
        found = (await client.get("/api/sessions")).json()["sessions"]
        return {
            summary["id"]: set(
                (await client.get(f"/api/sessions/{summary['id']}")).json()["config"][
                    "participants"
                ]
            )
            for summary in found
        }


async def _others_records(world: World, session_id: str, participant: str) -> list[RecordOut]:
    """Every record of the session that ``participant`` must not see."""
    async with world.client("admin") as client:
        lines = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
    records = [msgspec.json.decode(line, type=RecordOut) for line in lines]
    return [record for record in records if record.participant != participant]


async def test_a_participant_lists_only_its_own_sessions(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    for name in ("alice", "bob"):
        async with world.client(name) as client:
            page = msgspec.json.decode(
                (await client.get("/api/sessions")).content, type=SessionPage
            )
        assert {s.id for s in page.sessions} == {sid for sid, r in rosters.items() if name in r}
        assert all(s.records is None and s.reason is None for s in page.sessions)
        async with world.client(name) as client:
            listed = (await client.get("/sessions", params={"sort": "turns"})).text
            searched = (await client.get("/api/sessions", params={"q": "ses_"})).json()
        shown = set(re.findall(r'<a class="mono" href="/sessions/(ses_\w+)">', listed))
        assert shown == {s.id for s in page.sessions}
        assert {s["id"] for s in searched["sessions"]} == shown


async def test_a_participant_reads_only_its_own_records_everywhere(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    shared = [sid for sid, roster in rosters.items() if {"alice", "bob"} <= roster]
    assert shared
    async with world.client("alice") as client:
        for session_id in shared:
            hidden = await _others_records(world, session_id, "alice")
            assert any(r.participant == "bob" for r in hidden)
            pages = [
                (await client.get(f"/api/sessions/{session_id}/records", params={"limit": 1000})),
                (await client.get(f"/api/sessions/{session_id}/records",
                                  params={"kind": ["observation", "action.attempted"]})),
                (await client.get(f"/api/sessions/{session_id}/records", params={"turn": 1})),
            ]  # fmt: skip
            received = [
                msgspec.json.decode(msgspec.json.encode(item), type=RecordOut)
                for response in pages
                for item in response.json()["records"]
            ]
            export = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
            received += [msgspec.json.decode(line, type=RecordOut) for line in export]
            events = (await client.get(f"/api/sessions/{session_id}/events")).text
            received += [
                msgspec.json.decode(data, type=RecordOut)
                for data in re.findall(r"^data: (\{.*\})$", events, flags=re.M)
                if '"session_id"' in data
            ]
            assert received
            assert {r.participant for r in received} == {"alice"}
            lineage = (await client.get(f"/api/sessions/{session_id}/lineage")).text
            compared = (
                await client.get("/api/compare", params={"left": session_id, "right": session_id})
            ).text
            detail = (await client.get(f"/api/sessions/{session_id}")).json()
            assert detail["config"] is None
            assert detail["scores"] == detail["findings"] == []
            assert detail["session"]["records"] is None
            bodies = [response.text for response in pages] + [events, "\n".join(export)]
            bodies += [lineage, compared]
            bodies.append(msgspec.json.encode(detail).decode())
            for path in ("", "/turns", "/turns?turn=2"):
                page = await client.get(f"/sessions/{session_id}{path}")
                assert page.status_code == 200
                bodies.append(page.text)
            for body in bodies:
                # A visible record's `prev` is its predecessor's digest, which the visible
                # record's own digest covers: that one link is the whole trace of the others.
                body = re.sub(r'"prev":"[0-9a-f]{64}"', "", body)
                for record in hidden:
                    assert record.digest not in body
                assert "bob" not in body
                assert "carol" not in body
            turns = bodies[-2]
            for record in hidden:
                assert f'id="r{record.seq}"' not in turns


async def test_asking_for_another_participant_is_a_404_like_a_missing_one(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    shared = next(sid for sid, roster in rosters.items() if {"alice", "bob"} <= roster)
    without_alice = next(sid for sid, roster in rosters.items() if "alice" not in roster)
    async with world.client("alice") as client:
        for params in ({"participant": "bob"}, {"participant": "nobody"}):
            response = await client.get(f"/api/sessions/{shared}/records", params=params)
            assert response.status_code == 404
        for path in ("/records", "/export", "/events", "/lineage", "", "/turns"):
            for prefix in ("/api/sessions/", "/sessions/"):
                if prefix == "/sessions/" and path in (
                    "/records",
                    "/export",
                    "/events",
                    "/lineage",
                ):
                    continue
                hidden = await client.get(f"{prefix}{without_alice}{path}")
                missing = await client.get(f"{prefix}ses_00000000000000000000ff{path}")
                assert hidden.status_code == missing.status_code == 404
                assert hidden.text.replace(without_alice, "X") == missing.text.replace(
                    "ses_00000000000000000000ff", "X"
                )
        bob_seq = next(r.seq for r in await _others_records(world, shared, "alice")
                       if r.participant == "bob")  # fmt: skip
        assert (await client.get(f"/sessions/{shared}/records/{bob_seq}")).status_code == 404


async def test_a_prefix_of_a_session_id_is_not_an_id(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    session_id = next(iter(rosters))
    async with world.client("viewer") as client:
        assert (await client.get(f"/api/sessions/{session_id[:-3]}")).status_code == 404


async def test_a_bound_participant_token_reaches_only_its_sessions(world: World) -> None:
    rosters = await _sessions_by_roster(world)
    alices = [sid for sid, roster in rosters.items() if "alice" in roster]
    issued = await world.service.tokens.issue(
        "participant", participant="alice", sessions=alices[:1]
    )
    headers = {"Authorization": f"Bearer {issued.secret}"}
    async with world.client("none", headers=headers) as client:
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == alices[:1]
        assert (await client.get(f"/api/sessions/{alices[0]}/records")).status_code == 200
        assert (await client.get(f"/api/sessions/{alices[1]}/records")).status_code == 404
        assert (await client.get(f"/sessions/{alices[1]}")).status_code == 404


@pytest.fixture
def carol_only(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(store, [(SessionWriter(["carol"]), 2)])
    return make_world(store)


async def test_a_participant_named_in_no_session_sees_an_empty_store(carol_only: World) -> None:
    async with carol_only.client("alice") as client:
        assert (await client.get("/api/sessions")).json() == {"sessions": [], "next_after": None}
        overview = await client.get("/")
        assert overview.status_code == 200
        assert "No sessions yet" in overview.text
        # Searching for carol, or by the start of every id, finds nothing and counts nothing.
        for query in ({"q": "carol"}, {"q": "ses_"}, {"status": "completed"}):
            listed = await client.get("/sessions", params=query)
            assert listed.status_code == 200
            assert "0 of 0 sessions" in listed.text
            assert "/sessions/ses_" not in listed.text
            assert (await client.get("/api/sessions", params=query)).json()["sessions"] == []
