"""Participant isolation for the new records: a participant token sees its own
``outcome.participant`` records (what a step it did not act in meant for it), its own rewards
and text views, and never another participant's — on every read path: the JSON records, the
live stream, the export, the comparison, the trajectory and every page. Artifacts follow the
records that reference them: a participant fetches only the bytes of its own records.

The pattern is ``test_isolation``'s, run over a real game (``_views_support``) in which every
private value carries its owner's name.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from envharness.service.wire.sessions import RecordOut
from tests.service._support import World, make_world
from tests.service._views_support import OFFENDING, PLAYERS, write_views_store

pytestmark = pytest.mark.anyio

ARTIFACT_SEQS = (7, 13, 14, 15, 16, 22)
"""The table's artifact records (session level)."""


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, str, str]:
    """A service over the card table's store; the table's id and the violations session's."""
    store: Path = tmp_path_factory.mktemp("outcome-isolation") / "store"
    table_id, violations_id = write_views_store(store)
    return make_world(store), table_id, violations_id


async def _all_records(world: World, session_id: str) -> list[RecordOut]:
    async with world.client("admin") as client:
        lines = (await client.get(f"/api/sessions/{session_id}/export")).text.splitlines()
    return [msgspec.json.decode(line, type=RecordOut) for line in lines]


def _decoded(items: list[object]) -> list[RecordOut]:
    return [msgspec.json.decode(msgspec.json.encode(item), type=RecordOut) for item in items]


@pytest.mark.parametrize("me", PLAYERS)
async def test_a_participant_reads_its_own_private_outcomes_and_no_one_elses(
    table: tuple[World, str, str], me: str
) -> None:
    world, session_id, _ = table
    other = next(name for name in PLAYERS if name != me)
    everything = await _all_records(world, session_id)
    mine = [r for r in everything if r.participant == me]
    hidden = [r for r in everything if r.participant != me]
    my_outcomes = {r.seq for r in mine if r.kind == "outcome.participant"}
    assert my_outcomes  # each player was told of a move it did not make
    assert any(r.kind == "outcome.participant" for r in hidden)  # and so was the other
    base = f"/api/sessions/{session_id}"
    async with world.client(me) as client:
        answers = [
            await client.get(f"{base}/records", params={"limit": 1000}),
            await client.get(f"{base}/records", params={"kind": "outcome.participant"}),
            await client.get(f"{base}/records", params={"kind": ["artifact", "score"]}),
            await client.get(f"{base}/records", params={"turn": 1}),
            await client.get(f"{base}/records", params={"participant": me}),
        ]
        assert all(answer.status_code == 200 for answer in answers)
        received = _decoded([item for a in answers for item in a.json()["records"]])
        assert answers[2].json()["records"] == []  # artifacts and scores are session level
        told = {r.seq for r in _decoded(answers[1].json()["records"])}
        assert told == my_outcomes
        export = (await client.get(f"{base}/export")).text
        received += [msgspec.json.decode(line, type=RecordOut) for line in export.splitlines()]
        events = (await client.get(f"{base}/events")).text
        received += [
            msgspec.json.decode(data, type=RecordOut)
            for data in re.findall(r"^data: (\{.*\})$", events, flags=re.M)
            if '"session_id"' in data
        ]
        assert {r.seq for r in received} == {r.seq for r in mine}
        assert {r.participant for r in received} == {me}
        for record in (r for r in received if r.kind == "outcome.participant"):
            assert record.payload.outcome == {"told": f"told-{me}-{record.turn}"}  # type: ignore[union-attr]
        bodies = [answer.text for answer in answers] + [export, events]
        compared = await client.get(
            "/api/compare", params={"left": session_id, "right": session_id}
        )
        trajectory = await client.get(f"/api/trajectories/{session_id}")
        bodies += [compared.text, trajectory.text]
        pages = ["", "/turns", "/turns?turn=2", "/trajectory"]
        pages += [f"/records/{seq}" for seq in sorted(my_outcomes)]
        for path in pages:
            page = await client.get(f"/sessions/{session_id}{path}")
            assert page.status_code == 200, path
            bodies.append(page.text)
        turns = bodies[len(bodies) - len(pages) + 1]
        for seq in my_outcomes:
            assert f'id="r{seq}"' in turns
        for record in hidden:
            assert f'id="r{record.seq}"' not in turns
            page = await client.get(f"/sessions/{session_id}/records/{record.seq}")
            assert page.status_code == 404
    for body in bodies:
        # A visible record's `prev` (in JSON, and on its own page) is its predecessor's
        # digest, which its own digest covers: that one link is the whole trace of the others.
        body = re.sub(r'"prev":"[0-9a-f]{64}"', "", body)
        body = re.sub(r'<th>Prev</th><td class="mono">[0-9a-f]{64}', "", body)
        for record in hidden:
            assert record.digest not in body
        for secret in (f"told-{other}", f"secret-{other}", "artifact-link", "board.txt"):
            assert secret not in body, secret


async def test_asking_for_another_participants_outcomes_is_a_404(
    table: tuple[World, str, str],
) -> None:
    world, session_id, _ = table
    async with world.client("alice") as client:
        for participant in ("bob", "nobody"):
            response = await client.get(
                f"/api/sessions/{session_id}/records",
                params={"kind": "outcome.participant", "participant": participant},
            )
            assert response.status_code == 404
            events = await client.get(
                f"/api/sessions/{session_id}/events", params={"participant": participant}
            )
            assert events.status_code == 404


async def test_a_participant_gets_no_session_level_artifact_and_a_404_like_a_missing_one(
    table: tuple[World, str, str],
) -> None:
    world, session_id, _ = table
    async with world.client("viewer") as client:
        for seq in ARTIFACT_SEQS:  # they exist, and readers get them
            url = f"/api/sessions/{session_id}/records/{seq}/artifact"
            assert (await client.get(url)).status_code == 200
    for me in PLAYERS:
        async with world.client(me) as client:
            missing = await client.get(f"/api/sessions/{session_id}/records/99999/artifact")
            assert missing.status_code == 404
            for seq in ARTIFACT_SEQS:
                hidden = await client.get(f"/api/sessions/{session_id}/records/{seq}/artifact")
                assert hidden.status_code == 404
                assert hidden.text == missing.text.replace("99999", str(seq))


async def test_a_participant_fetches_the_bytes_of_its_own_records_only(
    table: tuple[World, str, str],
) -> None:
    """The check is the record's own access: alice's protocol violation is hers, so its
    offending bytes are too; bob's are not, and answer as if they did not exist."""
    world, _, session_id = table
    violations = {
        r.participant: r.seq
        for r in await _all_records(world, session_id)
        if r.kind == "protocol.violation"
    }
    assert set(violations) == set(PLAYERS)
    for me in PLAYERS:
        other = next(name for name in PLAYERS if name != me)
        async with world.client(me) as client:
            own = await client.get(f"/api/sessions/{session_id}/records/{violations[me]}/artifact")
            assert own.status_code == 200
            assert own.content == OFFENDING[me]
            assert own.headers["content-type"] == "application/octet-stream"
            assert own.headers["content-disposition"].startswith(
                f'attachment; filename="offending-bytes-{violations[me]}.bin"'
            )
            theirs = await client.get(
                f"/api/sessions/{session_id}/records/{violations[other]}/artifact"
            )
            missing = await client.get(f"/api/sessions/{session_id}/records/99999/artifact")
            assert theirs.status_code == missing.status_code == 404
            assert theirs.text == missing.text.replace("99999", str(violations[other]))
            turns = (await client.get(f"/sessions/{session_id}/turns")).text
            assert f"/records/{violations[me]}/artifact" in turns
            assert f"/records/{violations[other]}/artifact" not in turns


async def test_a_participant_of_another_session_gets_its_artifacts_as_missing(
    table: tuple[World, str, str],
) -> None:
    world, session_id, _ = table
    issued = await world.service.tokens.issue("participant", participant="carol")
    headers = {"Authorization": f"Bearer {issued.secret}"}
    async with world.client("none", headers=headers) as client:
        hidden = await client.get(f"/api/sessions/{session_id}/records/7/artifact")
        missing = await client.get("/api/sessions/ses_00000000000000000000ff/records/7/artifact")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.text.replace(session_id, "X") == missing.text.replace(
        "ses_00000000000000000000ff", "X"
    )
