"""Experiments through the service: the API, a participant's cut of them, the live stream that
resumes with no gap, and the viewer's pages."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness.runtime.experiment import derive_seed
from envharness.service.access import Access
from envharness.service.auth import Principal
from envharness.service.http import events
from envharness.service.http.events import experiment_events
from envharness.service.state import Address, Service
from envharness.service.wire.sessions import ExperimentDetail, ExperimentPage, Problem
from envharness.store import open_store, read_store
from envharness.store.tokens import TokenStore
from tests.service._support import (
    KEEP_ALIVE,
    ExperimentWriter,
    SessionWriter,
    World,
    make_world,
    until_keep_alive,
    write_session,
)

pytestmark = pytest.mark.anyio

HOSTILE = "<script>alert(1)</script> sweep"


def _blocks(text: str) -> list[dict[str, str]]:
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.partition(": ")[::2] for line in block.splitlines())
        if fields:
            found.append(fields)
    return found


# -- the quickstart experiment -----------------------------------------------------------------


async def _quickstart_experiment(world: World) -> ExperimentDetail:
    async with world.client("viewer") as client:
        listed = msgspec.json.decode(
            (await client.get("/api/experiments")).content, type=ExperimentPage
        )
        [summary] = listed.experiments
        response = await client.get(f"/api/experiments/{summary.id}")
    return msgspec.json.decode(response.content, type=ExperimentDetail)


async def test_an_experiment_has_its_configuration_counts_and_placed_sessions(
    world: World,
) -> None:
    detail = await _quickstart_experiment(world)
    summary = detail.experiment
    assert (summary.name, summary.status, summary.terminal) == (
        "quickstart sweep",
        "completed",
        True,
    )
    assert summary.total == summary.sessions.recorded == summary.sessions.completed == 10
    assert detail.config is not None
    assert [s.id for s in detail.config.scenarios][:2] == ["warm-up", "count-down"]
    assert set(detail.config.participants) == {"alice", "bob"}
    cells = {(s.scenario_id, s.trial) for s in detail.sessions}
    assert cells == {(s.id, t) for s in detail.config.scenarios for t in (0, 1)}
    for session in detail.sessions:
        assert session.trial is not None
        assert session.seed == derive_seed(detail.config.seed, session.scenario_id, session.trial)
    async with world.client("viewer") as client:
        listed = (await client.get("/api/sessions", params={"experiment": summary.id})).json()
    assert {s["id"] for s in listed["sessions"]} == {s.id for s in detail.sessions}


async def test_the_experiment_pages_show_the_grid_the_configuration_and_the_links(
    world: World,
) -> None:
    detail = await _quickstart_experiment(world)
    experiment_id = detail.experiment.id
    async with world.client("viewer") as client:
        listing = (await client.get("/experiments")).text
        page = (await client.get(f"/experiments/{experiment_id}")).text
        sessions = (await client.get("/sessions")).text
        one = (await client.get(f"/sessions/{detail.sessions[0].id}")).text
        config = (await client.get(f"/sessions/{detail.sessions[0].id}/config")).text
        navigation = (await client.get("/")).text
    assert f'href="/experiments/{experiment_id}"' in listing
    assert "quickstart sweep" in listing
    assert '<a href="/experiments" aria-current="page" class="active">Experiments</a>' in page
    for session in detail.sessions:
        assert f'href="/sessions/{session.id}" data-session="{session.id}"' in page
    assert page.count('data-scenario="far-target"') == 2
    assert "Trial 1</th>" in page
    assert "synthetic-total @ 1" in page
    assert "quickstart-overreacher@1" in page
    assert "Configuration shared by every session" in page
    assert "data-live-experiment" not in page  # it has ended: nothing to follow
    link = f'<a href="/experiments/{experiment_id}">quickstart sweep</a>'
    assert sessions.index(link) < sessions.index("Standalone sessions")
    assert f'experiment <a href="/experiments/{experiment_id}">' in one
    assert f'<a href="/experiments/{experiment_id}">{experiment_id}</a>' in config
    assert 'href="/experiments">Experiments</a>' in navigation


async def test_the_experiment_stream_sends_every_change_then_ends(world: World) -> None:
    detail = await _quickstart_experiment(world)
    url = f"/api/experiments/{detail.experiment.id}/events"
    async with world.client("viewer") as client:
        whole = await client.get(url)
        blocks = _blocks(whole.text)
        ids = [int(block["id"]) for block in blocks if "id" in block]
        resumed = await client.get(url, headers={"Last-Event-ID": str(ids[5])}, params={"after": 0})
        started = await client.get(url, params={"after": ids[-3]})
        bad = await client.get(url, headers={"Last-Event-ID": "soon"})
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert blocks[0] == {"retry": "1000"}
    assert ids == sorted(set(ids))
    kinds = Counter(block["event"] for block in blocks if "id" in block)
    assert kinds == {"session.created": 10, "session.status": 20, "experiment.status": 2}
    assert blocks[-1]["event"] == "end"
    assert msgspec.json.decode(blocks[-1]["data"]) == {"status": "completed", "last_id": ids[-1]}
    created = [
        msgspec.json.decode(b["data"]) for b in blocks if b.get("event") == "session.created"
    ]
    assert {(c["scenario_id"], c["trial"]) for c in created} == {
        (s.scenario_id, s.trial) for s in detail.sessions
    }
    assert [int(b["id"]) for b in _blocks(resumed.text) if "id" in b] == ids[6:]
    assert [int(b["id"]) for b in _blocks(started.text) if "id" in b] == ids[-2:]
    assert bad.status_code == 422
    assert msgspec.json.decode(bad.content, type=Problem).parameter == "Last-Event-ID"


# -- several experiments, mixed rosters ------------------------------------------------------


@dataclass
class Mixed:
    """Experiment ``a`` (stopped): (first, 0) alice+bob, (first, 1) bob, (second, 0) carol,
    (second, 1) never ran. Experiment ``b`` (completed, hostile name): carol. Experiment ``c``
    (running): nothing started yet. A standalone session of alice's."""

    world: World
    a: ExperimentWriter
    b: ExperimentWriter
    c: ExperimentWriter
    a1: SessionWriter
    a2: SessionWriter
    a3: SessionWriter
    b1: SessionWriter
    alone: SessionWriter


@pytest.fixture
def mixed(tmp_path: Path) -> Mixed:
    a = ExperimentWriter(("first", "second"), trials=2)
    b = ExperimentWriter(("only",), trials=1, participants=("carol",), name=HOSTILE)
    a1, a2, a3 = (
        a.session("first", 0),
        a.session("first", 1, ["bob"]),
        a.session("second", 0, ["carol"]),
    )
    b1 = b.session("only", 0)
    c = ExperimentWriter(("solo",), trials=1)
    alone = SessionWriter(["alice"])
    store = tmp_path / "store"

    async def write() -> None:
        async with open_store(store) as opened:
            await opened.append(a.start())
            for writer in (a1, a2, a3):
                await write_session(opened, writer, 2)
            await opened.append(b.start())
            await write_session(opened, b1, 1)
            await opened.append(b.finish())
            await write_session(opened, alone, 1)
            await opened.append(a.finish("stopped"))
            await opened.append(c.start())

    anyio.run(write)
    return Mixed(make_world(store), a, b, c, a1, a2, a3, b1, alone)


async def test_experiments_page_by_cursor_and_filter_by_status(mixed: Mixed) -> None:
    async with mixed.world.client("viewer") as client:
        first = (await client.get("/api/experiments", params={"limit": 1})).json()
        assert [e["id"] for e in first["experiments"]] == [mixed.a.id]
        assert first["next_after"] == mixed.a.id
        second = await client.get("/api/experiments", params={"limit": 1, "after": mixed.a.id})
        assert [e["id"] for e in second.json()["experiments"]] == [mixed.b.id]
        assert second.json()["next_after"] == mixed.b.id
        third = await client.get("/api/experiments", params={"after": mixed.b.id})
        assert [e["id"] for e in third.json()["experiments"]] == [mixed.c.id]
        assert third.json()["next_after"] is None
        done = (await client.get("/api/experiments", params={"status": "completed"})).json()
        assert [e["id"] for e in done["experiments"]] == [mixed.b.id]
        summary = first["experiments"][0]
        assert (summary["status"], summary["terminal"], summary["total"]) == ("stopped", True, 4)
        assert summary["reason"] == "ended stopped"
        assert summary["sessions"]["completed"] == sum(summary["sessions"].values()) == 3
        malformed: list[tuple[dict[str, str | int], str]] = [
            ({"after": "exp_nope"}, "after"),
            ({"limit": 0}, "limit"),
            ({"status": "done"}, "status"),
            ({"colour": "red"}, "colour"),
        ]
        for params, name in malformed:
            bad = await client.get("/api/experiments", params=params)
            assert bad.status_code == 422, params
            assert bad.json()["parameter"] == name
        for path in (
            "/api/experiments/exp_nope",
            f"/api/experiments/{mixed.a.id[:-2]}",
            "/api/experiments/exp_nope/events",
            "/experiments/exp_nope",
        ):
            assert (await client.get(path)).status_code == 404, path


async def test_a_participant_sees_its_experiments_and_only_its_own_sessions(mixed: Mixed) -> None:
    world = mixed.world
    dana = await world.service.tokens.issue("participant", participant="dana")
    bound = await world.service.tokens.issue(
        "participant", participant="alice", sessions=[mixed.alone.id]
    )
    world.secrets |= {"dana": dana.secret, "bound": bound.secret}
    expected = {
        "alice": {mixed.a.id: {mixed.a1.id}},
        "bob": {mixed.a.id: {mixed.a1.id, mixed.a2.id}},
        "dana": {},
        "bound": {},
        "viewer": {
            mixed.a.id: {mixed.a1.id, mixed.a2.id, mixed.a3.id},
            mixed.b.id: {mixed.b1.id},
            mixed.c.id: set(),
        },
    }
    everyone = {mixed.a1.id, mixed.a2.id, mixed.a3.id, mixed.b1.id}
    for who, visible in expected.items():
        async with world.client(who) as client:
            listed = msgspec.json.decode(
                (await client.get("/api/experiments")).content, type=ExperimentPage
            )
            assert {e.id: e.sessions.recorded for e in listed.experiments} == {
                key: len(ids) for key, ids in visible.items()
            }, who
            for experiment_id in (mixed.a.id, mixed.b.id):
                response = await client.get(f"/api/experiments/{experiment_id}")
                page = await client.get(f"/experiments/{experiment_id}")
                stream = await client.get(f"/api/experiments/{experiment_id}/events")
                if experiment_id not in visible:
                    missing = await client.get("/api/experiments/exp_00000000000000000000ff")
                    assert response.status_code == stream.status_code == page.status_code == 404
                    assert response.text.replace(experiment_id, "X") == missing.text.replace(
                        "exp_00000000000000000000ff", "X"
                    )
                    continue
                detail = msgspec.json.decode(response.content, type=ExperimentDetail)
                assert {s.id for s in detail.sessions} == visible[experiment_id], who
                streamed = {
                    msgspec.json.decode(b["data"])["session_id"]
                    for b in _blocks(stream.text)
                    if b.get("event", "").startswith("session.")
                }
                assert streamed == visible[experiment_id], who
                hidden = everyone - visible[experiment_id]
                for body in (response.text, page.text, stream.text):
                    assert not any(session_id in body for session_id in hidden), who
                if who != "viewer":
                    assert detail.config is None
                    assert detail.experiment.total is None
                    assert all(s.seed is None and s.reason is None for s in detail.sessions)
                    for body in (response.text, page.text, stream.text):
                        assert "secret-" not in body  # the scenarios' reference answers
                        assert "ended " not in body  # reasons speak of everyone
            pages = (await client.get("/experiments")).text
            assert ("&lt;script&gt;" in pages) == (mixed.b.id in visible), who


async def test_experiment_pages_escape_names_and_mark_a_running_experiment_live(
    mixed: Mixed,
) -> None:
    store = await read_store(mixed.world.store)
    position = await store.last_position()
    async with mixed.world.client("viewer") as client:
        stopped = (await client.get(f"/experiments/{mixed.a.id}")).text
        hostile = (await client.get(f"/experiments/{mixed.b.id}")).text
        running = (await client.get(f"/experiments/{mixed.c.id}")).text
        listing = (await client.get("/experiments")).text
    async with mixed.world.client("alice") as client:
        alices = (await client.get(f"/experiments/{mixed.a.id}")).text
    assert f'data-live-experiment="{mixed.c.id}" data-after="{position}"' in running
    assert 'data-scenario="solo" data-trial="0"><span class="run pending">not started' in running
    assert "data-live-experiment" not in stopped
    assert 'data-scenario="second" data-trial="1"><span class="run pending">never ran' in stopped
    assert '<span data-count="recorded">3</span><span class="of"> / 4</span>' in stopped
    assert "ended stopped" in stopped
    assert "As participant <b>alice</b>" in alices
    assert 'data-scenario="second"' not in alices  # carol's row: not alice's business
    for body in (hostile, listing):
        assert "<script>alert(1)" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt; sweep" in body
    assert "never ran" not in hostile
    assert "data-live-experiment" not in hostile


# -- the live stream ---------------------------------------------------------------------------


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(events, "EXPERIMENT_PAGE", 3)  # several pages per poll


async def _collect(
    stream: AsyncGenerator[bytes, None], stop_after: int | None
) -> tuple[list[tuple[int, str, dict[str, Any]]], bool]:
    """Events read until ``end`` or ``stop_after`` events, then the stream is closed."""
    got: list[tuple[int, str, dict[str, Any]]] = []
    ended = False
    try:
        async for chunk in stream:
            for block in _blocks(chunk.decode()):
                if block.get("event") == "end":
                    ended = True
                elif "id" in block:
                    got.append(
                        (int(block["id"]), block["event"], msgspec.json.decode(block["data"]))
                    )
            if ended or (stop_after is not None and len(got) >= stop_after):
                break
    finally:
        await stream.aclose()
    return got, ended


def _principal(role: str, participant: str | None = None) -> Principal:
    return Principal("tok_test", role, participant, None, "bearer")  # type: ignore[arg-type]


async def test_a_resumed_experiment_stream_has_no_gap_and_no_duplicate(
    tmp_path: Path, fast_polls: None
) -> None:
    experiment = ExperimentWriter(("first", "second", "third"), trials=2)
    writers = [
        experiment.session(scenario, trial, ["alice"] if trial else ["alice", "bob"])
        for scenario in ("first", "second", "third")
        for trial in (0, 1)
    ]
    path = tmp_path / "store"
    async with open_store(path) as store:
        await store.append(experiment.start())
        reader = await read_store(path)
        service = Service(store=reader, address=Address("127.0.0.1", 8765), tokens=TokenStore(path))
        other = SessionWriter(["carol"])  # a standalone session written meanwhile
        rows, blobs = other.start()
        await store.append(rows, blobs)

        async def write() -> None:
            for turn, writer in enumerate(writers, start=1):
                await write_session(store, writer, 2)
                rows, blobs = other.turn(turn)
                await store.append(rows, blobs)
                await anyio.sleep(0.005)
            await store.append(experiment.finish())

        received: list[tuple[int, str, dict[str, Any]]] = []
        async with anyio.create_task_group() as group:
            group.start_soon(write)
            cursor = -1
            viewer = Access(service, _principal("viewer"))
            for stop_after in (2, 5, 1, 9, None):  # four disconnects, then to the end
                got, ended = await _collect(
                    experiment_events(viewer, experiment.id, cursor), stop_after
                )
                received += got
                if got:
                    cursor = got[-1][0]
        assert ended
        whole, _ = await _collect(experiment_events(viewer, experiment.id, -1), None)
        bobs, _ = await _collect(
            experiment_events(Access(service, _principal("participant", "bob")), experiment.id, -1),
            None,
        )
    assert received == whole
    assert [pos for pos, _, _ in whole] == sorted({pos for pos, _, _ in whole})
    kinds = Counter(kind for _, kind, _ in whole)
    assert kinds == {"session.created": 6, "session.status": 12, "experiment.status": 2}
    assert whole[-1][2]["status"] == "completed"
    with_bob = {w.id for w in writers if "bob" in w.participants}
    assert {e["session_id"] for _, k, e in bobs if k.startswith("session.")} == with_bob
    assert all(e.get("seed") is None and e.get("reason") is None for _, _, e in bobs)
    assert [k for _, k, _ in bobs].count("experiment.status") == 2


async def test_an_idle_experiment_stream_sends_keep_alives(
    mixed: Mixed, fast_polls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "HEARTBEAT_INTERVAL", 0.03)
    service = mixed.world.service
    position = await service.store.last_position()
    stream = experiment_events(Access(service, _principal("viewer")), mixed.c.id, position)
    chunks = await until_keep_alive(stream)
    assert chunks[0].startswith(b"retry:")
    assert chunks[1:] == [KEEP_ALIVE]
