"""The viewer's pages: every value escaped, turns windowed, live ends marked, errors as pages."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import anyio
import msgspec
import pytest

from envharness.service.pages.turns import TURNS_PER_PAGE
from envharness.store import open_store
from tests.service._support import (
    TRIO,
    SessionWriter,
    World,
    make_world,
    write_session,
    write_store,
)

pytestmark = pytest.mark.anyio

HOSTILE = '<script>alert("owned")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def hostile_store(tmp_path: Path) -> tuple[World, str]:
    writer = SessionWriter(["alice", "mallory"])
    scenario = msgspec.structs.replace(writer.config.scenario, id=HOSTILE, input={"x": HOSTILE})
    writer.config = msgspec.structs.replace(writer.config, scenario=scenario)
    store = tmp_path / "store"

    async def write() -> None:
        async with open_store(store) as opened:
            rows, blobs = writer.start()
            await opened.append(rows, blobs)
            for turn in (1, 2):
                rows, blobs = writer.turn(turn, observation={"note": HOSTILE, HOSTILE: turn})
                await opened.append(rows, blobs)
            await opened.append(writer.finish())

    anyio.run(write)
    return make_world(store), writer.id


async def test_every_value_from_evidence_is_escaped(hostile_store: tuple[World, str]) -> None:
    world, session_id = hostile_store
    async with world.client("viewer") as client:
        for path in ("", "/turns", "/config", "/records/3"):
            page = await client.get(f"/sessions/{session_id}{path}")
            assert page.status_code == 200, path
            assert "<script>alert" not in page.text
            assert "<img src=x" not in page.text
            assert "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;" in page.text, path


async def test_every_quickstart_page_renders(world: World) -> None:
    async with world.client("viewer") as client:
        sessions = (await client.get("/api/sessions")).json()["sessions"]
        for summary in sessions:
            for path in ("", "/turns", "/config", "/records/0"):
                response = await client.get(f"/sessions/{summary['id']}{path}")
                assert response.status_code == 200, (summary["id"], path)
                assert response.headers["content-type"].startswith("text/html")
        for path in ("/", "/sessions", "/sessions?status=failed", "/verify", "/docs",
                     "/experiments", "/experiments?status=completed"):  # fmt: skip
            assert (await client.get(path)).status_code == 200, path


async def test_a_session_page_links_findings_to_the_cited_records(world: World) -> None:
    async with world.client("viewer") as client:
        sessions = (await client.get("/api/sessions")).json()["sessions"]
        for summary in sessions:
            detail = (await client.get(f"/api/sessions/{summary['id']}")).json()
            if detail["findings"]:
                break
        cited = detail["findings"][0]["payload"]["cites"]
        page = (await client.get(f"/sessions/{summary['id']}")).text
        assert detail["findings"][0]["payload"]["title"] in page
        for seq in cited:
            assert f'href="/sessions/{summary["id"]}/records/{seq}"' in page
        assert "outcome, turn" in page  # the cited record is named by kind and turn
        assert "Scores" in page


@pytest.fixture
def long_store(tmp_path: Path) -> tuple[World, SessionWriter, SessionWriter]:
    done = SessionWriter(["alice", "bob"], turns=45)
    live = SessionWriter(["alice", "bob"], turns=45)
    store = tmp_path / "store"

    async def write() -> None:
        async with open_store(store) as opened:
            await write_session(opened, done, 45)
            await write_session(opened, live, 3, finish=False)

    anyio.run(write)
    return make_world(store), done, live


async def test_turns_are_windowed_with_links_between_windows(
    long_store: tuple[World, SessionWriter, SessionWriter],
) -> None:
    world, done, _ = long_store
    base = f"/sessions/{done.id}/turns"
    async with world.client("viewer") as client:
        first = (await client.get(base)).text
        shown = [int(n) for n in re.findall(r'data-turn="(\d+)"', first)]
        assert shown == list(range(1, TURNS_PER_PAGE + 1))
        assert f'href="{base}?turn={TURNS_PER_PAGE + 1}"' in first
        last = (await client.get(base, params={"turn": 41})).text
        assert [int(n) for n in re.findall(r'data-turn="(\d+)"', last)] == list(range(41, 46))
        assert f'href="{base}?turn=21"' in last
        assert "data-live" not in last  # a finished session streams nothing
        blocked = (await client.get(base)).text
        assert 'class="rec blocked"' in blocked
        assert "too big" in blocked
        only_bob = (await client.get(base, params={"participant": "bob"})).text
        assert 'data-participant="alice"' not in only_bob
        assert 'data-participant="bob"' in only_bob
        beyond = await client.get(base, params={"turn": 99})
        assert beyond.status_code == 200
        assert "No records for turn 99 yet" in beyond.text
        bad = await client.get(base, params={"turn": 0})
        assert bad.status_code == 422
        assert "turn" in bad.text


async def test_the_live_end_of_a_running_session_is_marked_for_streaming(
    long_store: tuple[World, SessionWriter, SessionWriter],
) -> None:
    world, _, live = long_store
    async with world.client("viewer") as client:
        turns = (await client.get(f"/sessions/{live.id}/turns")).text
        overview = (await client.get(f"/sessions/{live.id}")).text
    head = live.chain.next_seq - 1
    assert f'data-live="{live.id}" data-after="{head}"' in turns
    assert f'data-live="{live.id}" data-after="{head}"' in overview
    assert 'data-status="running"' in turns
    assert '<script src="/static/viewer.js" defer></script>' in turns


async def test_record_pages_show_the_envelope_and_step_through_the_chain(world: World) -> None:
    async with world.client("viewer") as client:
        session_id = (await client.get("/api/sessions")).json()["sessions"][TRIO]["id"]
        record = (await client.get(f"/api/sessions/{session_id}/records?after=7&limit=1")).json()
        page = (await client.get(f"/sessions/{session_id}/records/8")).text
        assert record["records"][0]["digest"] in page
        assert f'href="/sessions/{session_id}/records/7"' in page
        assert f'href="/sessions/{session_id}/records/9"' in page
        assert (await client.get(f"/sessions/{session_id}/records/100000")).status_code == 404


@pytest.fixture
def grouped(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(
        store,
        [(SessionWriter(["alice"], experiment_id="exp_one"), 1),
         (SessionWriter(["alice"], experiment_id="exp_one"), 1),
         (SessionWriter(["alice"]), 1)],
    )  # fmt: skip
    return make_world(store)


async def test_the_sessions_page_groups_experiments_and_keeps_standalone_ones(
    grouped: World,
) -> None:
    async with grouped.client("viewer") as client:
        page = (await client.get("/sessions")).text
        header = 'Experiment <a href="/experiments/exp_one">exp_one</a>'
        assert page.index(header) < page.index("Standalone sessions")
        assert (await client.get("/sessions", params={"page": 2})).status_code == 404
        assert (await client.get("/sessions", params={"status": "nope"})).status_code == 422


async def test_verify_shows_what_is_broken(world: World) -> None:
    async with world.client("viewer") as client:
        assert "Intact." in (await client.get("/verify")).text
        session_id = (await client.get("/api/sessions")).json()["sessions"][0]["id"]
    connection = sqlite3.connect(world.store / "evidence.sqlite3")
    try:
        connection.execute("DROP TRIGGER records_are_append_only_update")
        connection.execute(
            'UPDATE records SET payload = CAST(\'{"kind":"log","message":"x"}\' AS BLOB)'
            " WHERE session_id = ? AND seq = 3",
            (session_id,),
        )
        connection.commit()
    finally:
        connection.close()
    async with world.client("viewer") as client:
        page = (await client.get("/verify")).text
    assert "problem(s)" in page
    assert session_id in page
    assert "digest mismatch" in page


async def test_errors_are_pages_for_people(world: World) -> None:
    async with world.client("viewer") as client:
        missing = await client.get("/sessions/ses_nope")
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("text/html")
        assert "Not found" in missing.text
        nowhere = await client.get("/no/such/page")
        assert nowhere.status_code == 404
        assert "Not found" in nowhere.text
    async with world.client("none") as client:
        signin = await client.get("/sessions")
        assert signin.status_code == 401
        assert "Sign in to the viewer" in signin.text
        assert "envharness serve" in signin.text
