"""The bytes of a records page and of an event stream's replay, pinned.

The read path of ``GET …/records`` and ``GET …/events`` was rebuilt for speed (one worker-thread
hop a request, stored bytes streamed unchanged); what a client receives must not change by a
byte. The digests below were taken from the service *before* that change, over a session
written with a fixed id and a fixed clock, so any difference in framing, field order, escaping
or what a participant is shown fails here.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest

from envharness.records import RecordRow, encode_record, envelope
from envharness.service.http import events
from envharness.service.wire.sessions import record_page_bytes, stored_record_bytes
from tests.service._support import SessionWriter, World, make_world, write_store

pytestmark = pytest.mark.anyio

SESSION = "ses_0190000000005eed5eed00"


@pytest.fixture(scope="module")
def pinned_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """Two turns of alice and bob (one blocked action), sealed at 1 ms steps from a fixed time."""
    ticks = itertools.count()
    store = tmp_path_factory.mktemp("pinned-bodies") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envelope, "utc_now_text", lambda: f"2026-01-02T03:04:05.{next(ticks):06d}Z")
        write_store(store, [(SessionWriter(("alice", "bob"), session_id=SESSION), 2)])
    return make_world(store)


RECORDS = f"/api/sessions/{SESSION}/records"
EVENTS = f"/api/sessions/{SESSION}/events"

PINNED: dict[tuple[str, str], str] = {
    ("viewer", RECORDS): "bb6963d6804bfd17d7d2aa191b3a9537e9dc88bf44eb58fbbc6594c7185d1e6f",
    (
        "viewer",
        f"{RECORDS}?limit=5",
    ): "4db7f3950e75e36f2eb3731a4fc8a4dc926c1758dde789e97717f394176f22d4",
    (
        "viewer",
        f"{RECORDS}?after=4&limit=3&kind=action.attempted&kind=observation",
    ): "8fe8c661923d6382ce8a467f0f3969d55ff97e1163818450e29c411a5ae4ca6b",
    (
        "viewer",
        f"{RECORDS}?participant=bob&turn=1",
    ): "1d66cf1a74fb64cb0d472bb8e89877a5ccdd1e933adf5b4af701047a35fda578",
    (
        "admin",
        f"{RECORDS}?limit=1000",
    ): "bb6963d6804bfd17d7d2aa191b3a9537e9dc88bf44eb58fbbc6594c7185d1e6f",
    ("alice", RECORDS): "35ba6388f663fff37f6bd0b728627971e0f9710c016b134be197b3bf475b97bb",
    (
        "alice",
        f"{RECORDS}?limit=2&after=3",
    ): "d462f684237257a92f38af685afd1b1f7e51096d17f749def7a2ad0edfab5009",
    (
        "alice",
        f"{RECORDS}?participant=alice&kind=action.executed",
    ): "1e98cbeb2caf24ab2600f5880dd1f7daffbd3a0f01af8efa7a808abb49c1f59f",
    ("viewer", EVENTS): "b405d9acb883cfd5e6a17ea0f18be1ef8b1c99a0a1e78ac5b3fda11f98f2db7f",
    (
        "viewer",
        f"{EVENTS}?after=10&kind=outcome",
    ): "f3895ff4ffdf361ea2b6ac7185f9ec807a8b443beeed15ced4e935dc4696ed1a",
    ("alice", EVENTS): "042d42fd8f5c28c0221c571b7238112afd9af578ae6a52c63ac511358944e395",
    (
        "bob",
        f"{EVENTS}?participant=bob",
    ): "6328392088dd7280c19e482645a8c9e148e4f58c98eb353b4fe0d0dedb20772f",
}
"""sha256 of each answer's body, taken before the read path was rebuilt."""


@pytest.mark.parametrize(("role", "path"), list(PINNED))
async def test_the_body_is_byte_for_byte_what_it_was(
    pinned_world: World, role: str, path: str
) -> None:
    async with pinned_world.client(role) as client:
        response = await client.get(path)
    assert response.status_code == 200, response.text
    assert hashlib.sha256(response.content).hexdigest() == PINNED[role, path], response.content


async def test_the_pinned_session_is_what_the_digests_were_taken_from(
    pinned_world: World,
) -> None:
    async with pinned_world.client("viewer") as client:
        page = (await client.get(RECORDS)).json()["records"]
    assert [record["seq"] for record in page] == list(range(len(page)))
    assert page[0]["at"] == "2026-01-02T03:04:05.000000Z"
    assert {record["participant"] for record in page} == {None, "alice", "bob"}


async def test_a_participant_never_sees_another_participants_records_in_a_pinned_body(
    pinned_world: World,
) -> None:
    async with pinned_world.client("alice") as client:
        bodies = [(await client.get(path)).content for path in (RECORDS, EVENTS)]
    for body in bodies:
        assert b'"participant":"alice"' in body
        assert b'"participant":"bob"' not in body
        assert b'"participant":null' not in body


@pytest.mark.parametrize(
    "participant", [None, "alice", 'qu"ote\\back', "tab\tnew\nline\x00\x1f\x7f", "é☃😀\u2028"]
)
@pytest.mark.parametrize("turn", [None, 0, 2**63 - 1])
async def test_a_stored_record_encodes_as_the_export_line_does(
    participant: str | None, turn: int | None
) -> None:
    row = RecordRow(
        SESSION, 7, "observation", turn, participant, "2026-01-02T03:04:05.000007Z",
        b'{"kind":"observation","observation":{"x":[1,2.5,"\\u00e9"]}}', None, "ab" * 32,
    )  # fmt: skip
    assert stored_record_bytes(row) == encode_record(row)
    assert record_page_bytes([row, row], 7) == (
        b'{"records":[' + encode_record(row) + b"," + encode_record(row) + b'],"next_after":7}'
    )
    assert record_page_bytes([], None) == b'{"records":[],"next_after":null}'


@pytest.mark.parametrize("page_size", [1, 2, 5])
async def test_a_replay_read_in_many_pages_is_the_same_stream(
    pinned_world: World, page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "PAGE_SIZE", page_size)
    for role, path in [("viewer", EVENTS), ("alice", EVENTS), ("bob", f"{EVENTS}?participant=bob")]:
        async with pinned_world.client(role) as client:
            response = await client.get(path)
        assert hashlib.sha256(response.content).hexdigest() == PINNED[role, path]
