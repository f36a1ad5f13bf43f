"""The API of trajectories, snapshots, datasets and sources: every role, bad input, streaming.

The store is the quickstart's: fourteen sessions, a snapshot of the experiment's ten with a
dataset made from it, and an imported source of two episodes (one scored and completed, one
that lost a record and was stopped).
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from envharness.client import AsyncClient, Client, ServiceError
from envharness.records import digest_of
from envharness.service.http.exports import CHUNK
from envharness.service.wire.trajectories import (
    DatasetPage,
    SnapshotDetail,
    TrajectoryDetail,
    TrajectoryPage,
)
from envharness.trajectories import DatasetRow
from envharness.trajectories.sources import SourceChain, encode_source_row
from tests.service._support import (
    BASE,
    World,
    api_doc_examples,
    run_api_doc_example,
)
from tests.service._trajectory_support import (
    asgi_get,
    frozen_names,
    solo_session,
    trio_session,
)
from tests.trajectories._support import flip_payload_byte

pytestmark = pytest.mark.anyio

IMPORTED = ("quickstart/replay:game-1", "quickstart/replay:game-2")
READER_ONLY = (
    "/api/snapshots",
    "/api/snapshots/{snapshot}",
    "/api/snapshots/{snapshot}/export",
    "/api/datasets",
    "/api/datasets/{dataset}",
    "/api/datasets/{dataset}/export",
    "/api/sources",
    "/api/sources?source=quickstart/replay",
)


async def _list(world: World, role: str, **params: Any) -> TrajectoryPage:
    async with world.client(role) as client:
        response = await client.get("/api/trajectories", params=params)
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=TrajectoryPage)


async def _detail(world: World, role: str, trajectory_id: str, **params: Any) -> httpx.Response:
    async with world.client(role) as client:
        return await client.get(f"/api/trajectories/{trajectory_id}", params=params)


# -- trajectories ------------------------------------------------------------------------------


async def test_every_trajectory_is_listed_with_its_states_and_provenance(world: World) -> None:
    page = await _list(world, "viewer", limit=1000)
    found = {summary.id: summary for summary in page.trajectories}
    async with world.client("viewer") as client:
        sessions = (await client.get("/api/sessions", params={"limit": 100})).json()["sessions"]
    assert list(found)[:14] == [session["id"] for session in sessions]  # oldest first
    assert list(found)[14:] == list(IMPORTED)
    assert page.next_after is None
    snapshot, _ = await frozen_names(world)
    experiment = [s for s in page.trajectories if s.experiment_id is not None]
    assert len(experiment) == 10
    assert all(s.snapshots == [snapshot] for s in experiment)
    native = found[sessions[0]["id"]]
    assert (native.origin, native.source, native.session_id) == ("native", None, native.id)
    assert (native.collection, native.execution, native.termination) == (
        "complete",
        "finished",
        "turn_limit",
    )
    assert native.outcome == "verified"
    assert native.verifier_version == "synthetic-score@1"
    assert native.records == sessions[0]["records"]
    assert native.environment is not None
    scored, lossy = found[IMPORTED[0]], found[IMPORTED[1]]
    assert (scored.origin, scored.source, scored.session_id) == (
        "imported",
        "quickstart/replay",
        None,
    )
    assert (scored.collection, scored.execution, scored.outcome, scored.passed) == (
        "complete",
        "finished",
        "verified",
        True,
    )
    assert (lossy.collection, lossy.execution, lossy.termination, lossy.outcome) == (
        "gaps",
        "interrupted",
        "imported",
        "unverified",
    )
    assert scored.snapshots == lossy.snapshots == []


async def test_filters_narrow_the_listing_and_pages_cover_it_once(world: World) -> None:
    assert [s.id for s in (await _list(world, "admin", origin="imported")).trajectories] == list(
        IMPORTED
    )
    assert [s.id for s in (await _list(world, "admin", collection="gaps")).trajectories] == [
        IMPORTED[1]
    ]
    interrupted = await _list(world, "admin", execution="interrupted")
    assert [s.id for s in interrupted.trajectories] == [IMPORTED[1]]
    failed = await _list(world, "admin", termination="failed")
    assert [s.status for s in failed.trajectories] == ["failed"]
    assert (await _list(world, "admin", outcome="disputed")).trajectories == []
    async with world.client("admin") as client:
        [experiment] = (await client.get("/api/experiments")).json()["experiments"]
    grouped = await _list(world, "admin", experiment=experiment["id"])
    assert len(grouped.trajectories) == 10
    assert all(s.experiment_id == experiment["id"] for s in grouped.trajectories)
    assert (await _list(world, "admin", source="quickstart/replay")).trajectories[0].id == (
        IMPORTED[0]
    )
    seen: list[str] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 5} | ({"after": after} if after else {})
        page = await _list(world, "admin", **params)
        seen += [summary.id for summary in page.trajectories]
        if page.next_after is None:
            break
        after = page.next_after
    assert len(seen) == len(set(seen)) == 16


async def test_one_trajectory_comes_with_its_segments_and_its_digest_check(world: World) -> None:
    trio = await trio_session(world)
    response = await _detail(world, "viewer", trio)
    assert response.status_code == 200
    detail = msgspec.json.decode(response.content, type=TrajectoryDetail)
    assert detail.trajectory is not None
    assert detail.check is not None
    assert detail.summary.id == detail.trajectory.session_id == trio
    assert [s.cause for s in detail.segments] == ["start", "resume"]  # continued once
    assert detail.segments[0].first_seq is not None
    assert detail.segments[0].changes == []
    assert detail.check.ok
    assert detail.check.problem is None
    assert detail.check.records == detail.trajectory.journal.records
    unchecked = msgspec.json.decode(
        (await _detail(world, "admin", trio, check="false")).content, type=TrajectoryDetail
    )
    assert unchecked.check is None
    assert unchecked.trajectory == detail.trajectory
    imported = await _detail(world, "admin", IMPORTED[0])
    found = msgspec.json.decode(imported.content, type=TrajectoryDetail)
    assert found.check is not None
    assert found.check.ok
    assert found.trajectory is not None
    assert found.trajectory.provenance.format == "envharness"


async def test_a_participant_sees_only_its_own_sessions_trajectories_reduced(world: World) -> None:
    async with world.client("alice") as client:
        own = [s["id"] for s in (await client.get("/api/sessions?limit=100")).json()["sessions"]]
    page = await _list(world, "alice", limit=1000)
    assert [s.id for s in page.trajectories] == own  # nothing imported, nobody else's
    for summary in page.trajectories:
        assert summary.outcome is summary.passed is summary.verifier_version is None
        assert summary.records is summary.environment is summary.snapshots is None
    assert (await _list(world, "alice", origin="imported")).trajectories == []
    assert (await _list(world, "alice", source="quickstart/replay")).trajectories == []
    async with world.client("alice") as client:
        refused = await client.get("/api/trajectories", params={"outcome": "verified"})
    assert refused.status_code == 403
    assert refused.json()["parameter"] == "outcome"

    trio = await trio_session(world)
    detail = msgspec.json.decode(
        (await _detail(world, "alice", trio)).content, type=TrajectoryDetail
    )
    assert detail.trajectory is None
    assert detail.check is None
    assert detail.summary.outcome is None
    assert detail.summary.records is None
    assert [(s.first_seq, s.last_seq, s.changes) for s in detail.segments] == [
        (None, None, None)
    ] * 2
    solo = await solo_session(world)  # alice alone: bob may not learn it exists
    hidden = await _detail(world, "bob", solo)
    missing = await _detail(world, "bob", "ses_00000000000000000000ff")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["message"].replace(solo, "X") == missing.json()["message"].replace(
        "ses_00000000000000000000ff", "X"
    )
    assert (await _detail(world, "alice", IMPORTED[0])).status_code == 404


async def test_unknown_ids_are_404_and_bad_parameters_422_naming_them(world: World) -> None:
    trio = await trio_session(world)
    snapshot, _ = await frozen_names(world)
    async with world.client("admin") as client:
        for path in (
            "/api/trajectories/ses_00000000000000000000ff",
            f"/api/trajectories/{trio[:12]}",
            "/api/trajectories/quickstart/replay:no-such-game",
            "/api/trajectories/no/such:game",
            "/api/trajectories/",
            "/api/snapshots/snp_00000000",
            f"/api/snapshots/{snapshot[:12]}",
            "/api/snapshots/garbage",
            "/api/snapshots/garbage/export",
            "/api/datasets/nope",
            "/api/datasets/nope/export",
            "/api/sources?source=no/such-source",
        ):
            response = await client.get(path)
            assert response.status_code == 404, (path, response.text)
            assert response.json()["status"] == 404
        for path, parameter in (
            ("/api/trajectories?limit=0", "limit"),
            ("/api/trajectories?execution=done", "execution"),
            ("/api/trajectories?after=ses_nope", "after"),
            ("/api/trajectories?colour=red", "colour"),
            (f"/api/trajectories/{trio}?check=perhaps", "check"),
            (f"/api/snapshots/{snapshot}?after=-2", "after"),
            ("/api/snapshots?limit=1001", "limit"),
            ("/api/datasets?after=nope", "after"),
            ("/api/sources?source=not a source", "source"),
            ("/api/trajectories?limit=1&limit=2", "limit"),
        ):
            response = await client.get(path)
            assert response.status_code == 422, (path, response.text)
            assert response.json()["parameter"] == parameter, path


# -- snapshots, datasets, sources: admin and viewer only ---------------------------------------


async def test_snapshots_datasets_and_sources_are_for_admin_and_viewer_tokens(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    for template in READER_ONLY:
        for thing in (True, False):  # what exists, and what does not: the same answer
            path = template.format(
                snapshot=snapshot if thing else "snp_nope", dataset=dataset if thing else "nope"
            )
            found = 200 if thing or "{" not in template else 404
            for role, status in (
                ("admin", found),
                ("viewer", found),
                ("alice", 403),
                ("bob", 403),
                ("none", 401),
            ):
                async with world.client(role) as client:
                    response = await client.get(path)
                assert response.status_code == status, (role, path, response.text)


async def test_a_snapshot_lists_its_trajectories_a_page_at_a_time(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    async with world.client("viewer") as client:
        listed = (await client.get("/api/snapshots")).json()["snapshots"]
        assert [s["id"] for s in listed] == [snapshot]
        assert listed[0]["entitlement"]["declared_by"] == "envharness quickstart"
        first = msgspec.json.decode(
            (await client.get(f"/api/snapshots/{snapshot}", params={"limit": 4})).content,
            type=SnapshotDetail,
        )
        assert first.check is None
        assert first.datasets == [dataset]
        assert len(first.trajectories) == 4
        assert first.next_after == 3
        rest = msgspec.json.decode(
            (await client.get(f"/api/snapshots/{snapshot}?after=3&check=true")).content,
            type=SnapshotDetail,
        )
    assert rest.check is not None
    assert rest.check.ok
    ids = [t.id for t in first.trajectories + rest.trajectories]
    assert len(ids) == len(set(ids)) == 10
    assert ids == sorted(ids)
    assert rest.next_after is None


async def test_only_an_admin_freezes_a_snapshot_and_the_same_selection_is_found_again(
    world: World,
) -> None:
    trio = await trio_session(world)
    body = {"sessions": [trio, IMPORTED[1]], "label": "trio and a replay"}
    for role, status in (("viewer", 403), ("alice", 403), ("none", 401), ("revoked", 401)):
        async with world.client(role) as client:
            assert (await client.post("/api/snapshots", json=body)).status_code == status, role
    async with world.client("admin") as client:
        made = await client.post("/api/snapshots", json=body)
        again = await client.post("/api/snapshots", json=body)
        assert made.status_code == again.status_code == 201
        assert made.json() == again.json()
        assert (made.json()["trajectories"], made.json()["entitlement"]) == (2, None)
        [experiment] = (await client.get("/api/experiments")).json()["experiments"]
        whole = await client.post(
            "/api/snapshots",
            json={
                "experiment": experiment["id"],
                "entitlement": {"basis": "own data", "declared_by": "me"},
            },
        )
        assert whole.status_code == 201
        assert whole.json()["trajectories"] == 10
        for bad, status, parameter in (
            ({"sessions": ["ses_00000000000000000000ff"]}, 404, None),
            ({"sessions": [trio[:12]]}, 404, None),
            ({"sessions": ["nowhere/at-all:run"]}, 404, None),
            ({"experiment": "exp_nope"}, 404, None),
            ({}, 422, "body"),
            ({"sessions": [trio], "entitlement": {"basis": "  "}}, 422, "body"),
            ({"sessions": [trio], "label": "a\nb"}, 422, "body"),
            ({"sessions": [trio], "colour": "red"}, 422, "body"),
            ({"sessions": trio}, 422, "body"),
        ):
            response = await client.post("/api/snapshots", json=bad)
            assert response.status_code == status, (bad, response.text)
            assert response.json()["parameter"] == parameter, bad
        not_json = await client.post(
            "/api/snapshots", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code == 422
        assert not_json.json()["parameter"] == "body"
        form = await client.post("/api/snapshots", data={"sessions": trio})
        assert form.status_code == 415


async def test_freezing_what_is_not_there_answers_as_reading_it_does(world: World) -> None:
    """A missing session or episode in a snapshot request is the same 404 as
    ``/api/trajectories/{id}`` gives: no store directory, no command to run."""
    async with world.client("admin") as client:
        for wanted, message in (
            ("a:b", "no session 'a:b' here (or this token may not see it)"),
            (":", "no session ':' here (or this token may not see it)"),
            ("nowhere/at-all:run", "no trajectory 'nowhere/at-all:run' here (or this token "
             "may not see it)"),
            ("quickstart/replay:nope", "no trajectory 'quickstart/replay:nope' here (or this "
             "token may not see it)"),
        ):  # fmt: skip
            frozen = await client.post("/api/snapshots", json={"sessions": [wanted]})
            read = await client.get(f"/api/trajectories/{quote(wanted, safe='/:')}")
            assert frozen.status_code == read.status_code == 404, wanted
            assert frozen.json()["message"] == message, frozen.text
            assert str(world.store) not in frozen.text


async def test_a_snapshot_export_is_the_hashed_bytes_line_by_line(world: World) -> None:
    snapshot, _ = await frozen_names(world)
    async with world.client("viewer") as client:
        response = await client.get(f"/api/snapshots/{snapshot}/export")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = response.content.splitlines()
    head = json.loads(lines[0])
    assert (head["type"], head["id"]) == ("snapshot", snapshot)
    # The file alone recomputes the snapshot id: its header, then each trajectory, as sent.
    hasher = hashlib.sha256(_embedded(lines[0], b'"content":'))
    records = 0
    for line in lines[1:]:
        kind = json.loads(line)["type"]
        if kind == "trajectory":
            hasher.update(b"\n" + _embedded(line, b'"trajectory":'))
        else:
            assert kind == "record"
            record = json.loads(line)["record"]
            payload = _embedded(line, b'"payload":', end=b',"prev":')
            assert record["digest"] == digest_of(
                record["session_id"],
                record["seq"],
                record["kind"],
                record["turn"],
                record["participant"],
                record["at"],
                payload,
                record["prev"],
            )
            records += 1
    assert "snp_" + hasher.hexdigest() == snapshot
    assert records == head["content"]["records"]


def _embedded(line: bytes, key: bytes, end: bytes = b"}") -> bytes:
    start = line.index(key) + len(key)
    return line[start : line.rindex(end)] if end != b"}" else line[start:-1]


async def test_a_large_snapshot_streams_in_chunks_in_bounded_memory(
    long_observed_world: tuple[World, str],
) -> None:
    world, session = long_observed_world
    async with world.client("admin") as client:
        made = await client.post("/api/snapshots", json={"sessions": [session]})
    snapshot = made.json()["id"]
    path = f"/api/snapshots/{snapshot}/export"
    tracemalloc.start()
    try:
        streamed = await asgi_get(world.app, path, world.secrets["viewer"], keep=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    total = sum(streamed.sizes)
    assert streamed.status == 200
    assert made.json()["records"] == 20_006
    assert len(streamed.sizes) > 20
    assert max(streamed.sizes) < CHUNK + 4096
    assert total > 8_000_000
    assert peak < total / 4


async def test_a_tampered_snapshot_is_refused_before_its_first_byte(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    async with world.client("viewer") as client:
        detail = (await client.get(f"/api/snapshots/{snapshot}", params={"limit": 1})).json()
    victim = detail["trajectories"][0]["id"]
    flip_payload_byte(world.store, victim, 5)
    streamed = await asgi_get(
        world.app, f"/api/snapshots/{snapshot}/export", world.secrets["viewer"]
    )
    assert streamed.status == 409
    assert streamed.headers["content-type"] == "application/json"
    problem = json.loads(streamed.body)
    assert victim in problem["message"]
    assert "record seq 5" in problem["message"]
    async with world.client("viewer") as client:
        checked = (await client.get(f"/api/snapshots/{snapshot}?check=true")).json()["check"]
        assert (checked["ok"], checked["trajectory"], checked["seq"]) == (False, victim, 5)
        one = (await client.get(f"/api/trajectories/{victim}")).json()["check"]
        assert (one["ok"], one["seq"]) == (False, 5)
        assert "altered" in one["problem"]
        rows = await client.get(f"/api/datasets/{dataset}/export")
        assert rows.status_code == 409
        assert victim in rows.json()["message"]


async def test_datasets_list_show_export_and_only_an_admin_creates_one(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    async with world.client("viewer") as client:
        page = msgspec.json.decode((await client.get("/api/datasets")).content, type=DatasetPage)
        assert [d.name for d in page.datasets] == [dataset]
        assert page.datasets[0].reward == "total"
        shown = (await client.get(f"/api/datasets/{page.datasets[0].id}")).json()
        assert shown["dataset"]["name"] == dataset
        assert shown["snapshots"][0]["id"] == snapshot
        exported = await client.get(f"/api/datasets/{dataset}/export")
        denied = await client.post("/api/datasets", json={"name": "x", "snapshots": [snapshot]})
    assert denied.status_code == 403
    rows = [msgspec.json.decode(line, type=DatasetRow) for line in exported.content.splitlines()]
    assert len(rows) == 20
    assert {row.dataset for row in rows} == {dataset}
    assert all(row.messages[0].role == "user" for row in rows)
    trio = await trio_session(world)
    async with world.client("admin") as client:
        plain = (await client.post("/api/snapshots", json={"sessions": [trio]})).json()["id"]
        refused = await client.post("/api/datasets", json={"name": "t", "snapshots": [plain]})
        assert refused.status_code == 422
        assert "training-entitled" in refused.json()["message"]
        shared = {"snapshots": [snapshot], "shared_reward": True}
        same = await client.post(
            "/api/datasets", json={"name": dataset, "reward": "total", **shared}
        )
        assert same.status_code == 201
        assert same.json()["id"] == page.datasets[0].id
        taken = await client.post(
            "/api/datasets", json={"name": dataset, "reward": "turns", **shared}
        )
        assert taken.status_code == 422
        assert "already exists" in taken.json()["message"]
        for bad, status in (
            ({"name": "n", "snapshots": ["snp_00000000"]}, 404),
            ({"name": "n", "snapshots": []}, 422),
            ({"name": "", "snapshots": [snapshot]}, 422),
            ({"name": "n", "snapshots": [snapshot], "reward": "nope"}, 422),
        ):
            response = await client.post("/api/datasets", json=bad)
            assert response.status_code == status, (bad, response.text)


def _import_body(source: str, *, episodes: int = 1, move: str = "up") -> bytes:
    chain = SourceChain(source)
    rows = []
    for n in range(episodes):
        name = f"run-{n}"
        rows += [
            chain.seal(
                name, "episode.started", {"environment": "grid@1"}, at="2026-01-05T09:00:00Z"
            ),
            chain.seal(
                name, "step", {"move": move}, at="2026-01-05T09:00:01Z", turn=1, participant="bot"
            ),
            chain.seal(name, "episode.ended", {"status": "completed"}, at="2026-01-05T09:00:02Z"),
        ]
    return b"".join(encode_source_row(row) + b"\n" for row in rows)


async def test_sources_health_and_imports_an_admin_sends(world: World) -> None:
    async with world.client("viewer") as client:
        [health] = (await client.get("/api/sources")).json()["sources"]
    assert (health["source"], health["head_position"], health["episodes"]) == (
        "quickstart/replay",
        8,
        2,
    )
    assert health["capture_failures"] == 1
    assert health["gaps"] == []
    body = _import_body("tests/api", episodes=2)
    ndjson = {"Content-Type": "application/x-ndjson"}
    params = {"source": "tests/api"}
    for role, status in (("viewer", 403), ("alice", 403), ("none", 401)):
        async with world.client(role) as client:
            response = await client.post(
                "/api/imports", params=params, content=body, headers=ndjson
            )
            assert response.status_code == status, role
    async with world.client("admin") as client:
        first = await client.post("/api/imports", params=params, content=body, headers=ndjson)
        assert first.status_code == 201, first.text
        assert (first.json()["stored"], first.json()["duplicates"]) == (6, 0)
        again = await client.post("/api/imports", params=params, content=body, headers=ndjson)
        assert (again.json()["stored"], again.json()["duplicates"]) == (0, 6)
        other = _import_body("tests/api", move="down")  # well chained, but not what is held
        conflict = await client.post("/api/imports", params=params, content=other, headers=ndjson)
        assert conflict.status_code == 409
        assert "position 1" in conflict.json()["message"]
        broken = body.replace(b'"up"', b'"left"', 1)
        refused = await client.post(
            "/api/imports", params={"source": "tests/other"}, content=broken, headers=ndjson
        )
        assert refused.status_code == 422
        assert refused.json()["parameter"] == "body"
        for query, content, headers, status, parameter in (
            ({"source": "not a source"}, body, ndjson, 422, "source"),
            ({}, body, ndjson, 422, "source"),
            ({"source": "tests/x", "format": "csv"}, body, ndjson, 422, "format"),
            ({"source": "tests/x"}, b"", ndjson, 422, "body"),
            ({"source": "tests/x"}, b"not json\n", ndjson, 422, "body"),
            ({"source": "tests/x"}, body, {"Content-Type": "text/csv"}, 415, None),
        ):
            response = await client.post(
                "/api/imports", params=query, content=content, headers=headers
            )
            assert response.status_code == status, (query, response.text)
            assert response.json()["parameter"] == parameter, query
        listed = (await client.get("/api/trajectories", params={"source": "tests/api"})).json()
        health = (await client.get("/api/sources", params={"source": "tests/api"})).json()
    assert [t["id"] for t in listed["trajectories"]] == ["tests/api:run-0", "tests/api:run-1"]
    assert health["sources"][0]["refused"] == 1  # the conflicting import, noted


async def test_the_typed_client_reads_and_writes_through_the_same_endpoints(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    trio = await trio_session(world)
    transport = httpx.ASGITransport(world.app)
    async with AsyncClient(BASE, world.secrets["admin"], transport=transport) as client:
        page = await client.trajectories(origin="imported")
        assert [t.id for t in page.trajectories] == list(IMPORTED)
        assert len([t async for t in client.iter_trajectories()]) == 16
        detail = await client.trajectory(IMPORTED[1])
        assert detail.check is not None
        assert detail.check.ok
        assert detail.summary.collection == "gaps"
        assert (await client.snapshot(snapshot, check=True)).check is not None
        lines = [line async for line in client.export_snapshot(snapshot)]
        assert json.loads(lines[0])["id"] == snapshot
        assert (await client.snapshots()).snapshots[0].id == snapshot
        assert (await client.dataset(dataset)).dataset.name == dataset
        assert (await client.datasets()).datasets[0].name == dataset
        rows = [row async for row in client.export_dataset(dataset)]
        assert len(rows) == 20
        made = await client.create_snapshot([trio], label="from the client", entitlement="mine")
        assert made.entitlement is not None
        assert made.entitlement.basis == "mine"
        receipt = await client.import_lines("tests/client", _import_body("tests/client"))
        assert receipt.stored == 3
        assert (await client.sources("tests/client")).sources[0].records == 3
        created = await client.create_dataset(
            "from-client", [snapshot], reward="total", shared_reward=True
        )
        assert created.trajectories == 10
    async with AsyncClient(BASE, world.secrets["alice"], transport=transport) as client:
        with pytest.raises(ServiceError) as refused:
            await client.snapshots()
        assert refused.value.status == 403
        with pytest.raises(ServiceError) as hidden:
            await client.trajectory(IMPORTED[0])
        assert hidden.value.status == 404


def test_the_blocking_client_and_the_api_docs_example(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(BASE, world.secrets["viewer"], transport=httpx.ASGITransport(world.app)) as client:
        assert len(client.trajectories(limit=3).trajectories) == 3
        assert client.trajectory(IMPORTED[0], check=False).check is None
        assert len(list(client.iter_trajectories(origin="native"))) == 14
    [example] = [block for block in api_doc_examples() if "client.trajectories(" in block]
    run_api_doc_example(example, world, monkeypatch)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("quickstart/replay:game-2 gaps interrupted")
    assert any(line.startswith("snp_") and line.endswith(" lines, checked") for line in printed)


async def test_the_openapi_document_describes_the_new_endpoints(world: World) -> None:
    async with world.client("none") as client:
        document = (await client.get("/openapi.json")).json()
    paths = document["paths"]
    assert paths["/api/trajectories"]["get"]["x-roles"] == ["admin", "participant", "viewer"]
    assert paths["/api/snapshots"]["post"]["x-roles"] == ["admin"]
    assert paths["/api/imports"]["post"]["requestBody"]["content"]["application/x-ndjson"]
    for path in ("/api/snapshots/{snapshot_id}/export", "/api/datasets/{dataset}/export"):
        success = paths[path]["get"]["responses"]["200"]
        assert "application/x-ndjson" in success["content"]
        assert "x-lines" in success
        assert "409" in paths[path]["get"]["responses"]
    detail = paths["/api/trajectories/{trajectory_id}"]["get"]
    assert [p["name"] for p in detail["parameters"]] == ["trajectory_id", "check"]
    schemas = document["components"]["schemas"]
    assert {
        "TrajectorySummary",
        "TrajectoryDetail",
        "EvidenceCheck",
        "SnapshotDetail",
        "Dataset",
        "DatasetRow",
        "SourceHealth",
        "ImportReceipt",
        "Trajectory",
        "SourceRecordLine",
    } <= set(schemas)
