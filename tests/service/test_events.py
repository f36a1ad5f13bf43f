"""Live timelines: server-sent events resume exactly, end when the session does, and let go
of everything when the client leaves."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness.service.http import events
from envharness.service.http.events import ClosingStream, record_events
from envharness.service.state import Address, Service
from envharness.store import RecordFilter, open_store, read_store
from envharness.store.tokens import TokenStore
from tests.service._support import KEEP_ALIVE, TRIO, SessionWriter, World, until_keep_alive

pytestmark = pytest.mark.anyio


def _parse(text: str) -> list[dict[str, str]]:
    found = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            found.append(fields)
    return found


async def _a_session(world: World) -> tuple[str, int]:
    async with world.client("viewer") as client:
        summary = (await client.get("/api/sessions")).json()["sessions"][TRIO]
    return summary["id"], summary["records"]


async def test_a_finished_session_streams_every_record_then_ends(world: World) -> None:
    session_id, count = await _a_session(world)
    async with world.client("viewer") as client:
        response = await client.get(f"/api/sessions/{session_id}/events")
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    blocks = _parse(response.text)
    assert blocks[0] == {"retry": "1000"}
    records = [block for block in blocks if block.get("event") == "record"]
    assert [int(block["id"]) for block in records] == list(range(count))
    assert [msgspec.json.decode(b["data"])["seq"] for b in records] == list(range(count))
    assert blocks[-1]["event"] == "end"
    assert msgspec.json.decode(blocks[-1]["data"]) == {"status": "completed", "last_seq": count - 1}


async def test_last_event_id_resumes_after_it_and_wins_over_after(world: World) -> None:
    session_id, count = await _a_session(world)
    async with world.client("viewer") as client:
        url = f"/api/sessions/{session_id}/events"
        resumed = await client.get(url, params={"after": 2}, headers={"Last-Event-ID": "20"})
        started = await client.get(url, params={"after": 2})
        bad = await client.get(url, headers={"Last-Event-ID": "twenty"})
    ids = lambda text: [int(b["id"]) for b in _parse(text) if "id" in b]  # noqa: E731
    assert ids(resumed.text) == list(range(21, count))
    assert ids(started.text) == list(range(3, count))
    assert bad.status_code == 422
    assert bad.json()["parameter"] == "Last-Event-ID"


@pytest.fixture
def live_store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "POLL_INTERVAL", 0.01)


async def _collect(
    stream: AsyncGenerator[bytes, None], stop_after: int | None
) -> list[dict[str, Any]]:
    """Records read from ``stream`` until ``end`` or ``stop_after`` records, then closed."""
    got: list[dict[str, Any]] = []
    try:
        async for chunk in stream:
            text = chunk.decode()
            if text.startswith("event: end") or "\nevent: end" in text:
                break
            for data in re.findall(r"^data: (.*)$", text, flags=re.M):
                got.append(msgspec.json.decode(data))
            if stop_after is not None and len(got) >= stop_after:
                break
    finally:
        await stream.aclose()
    return got


async def test_a_stream_resumed_while_the_session_is_written_has_no_gap_and_no_duplicate(
    live_store: Path, fast_polls: None
) -> None:
    writer = SessionWriter(["alice", "bob"], turns=30)
    async with open_store(live_store) as store:
        rows, blobs = writer.start()
        await store.append(rows, blobs)
        service = await _service(live_store)
        received: list[dict[str, Any]] = []
        everyone = RecordFilter()

        async def write() -> None:
            for turn in range(1, 31):
                rows, blobs = writer.turn(turn)
                await store.append(rows, blobs)
                await anyio.sleep(0.005)
            await store.append(writer.finish())

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            cursor = -1
            for stop_after in (7, 50, 1, 100, None):  # four disconnects, then to the end
                got = await _collect(
                    record_events(service, writer.id, everyone, cursor), stop_after
                )
                received += got
                if got:
                    cursor = got[-1]["seq"]
        seqs = [record["seq"] for record in received]
        assert seqs == list(range(writer.chain.next_seq))
        alices = await _collect(
            record_events(service, writer.id, RecordFilter(participant="alice"), -1), None
        )
        assert alices
        assert {r["participant"] for r in alices} == {"alice"}


async def _service(store_path: Path) -> Service:
    """A service built inside the running loop (``make_world`` runs a loop of its own)."""
    store = await read_store(store_path)
    return Service(store=store, address=Address("127.0.0.1", 8765), tokens=TokenStore(store_path))


async def test_an_idle_stream_sends_keep_alives(
    live_store: Path, fast_polls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "HEARTBEAT_INTERVAL", 0.03)
    writer = SessionWriter(["alice"])
    async with open_store(live_store) as store:
        rows, blobs = writer.start()
        await store.append(rows, blobs)
        service = await _service(live_store)
        chunks = await until_keep_alive(record_events(service, writer.id, RecordFilter(), 2))
    assert chunks[0].startswith(b"retry:")
    assert chunks[-1] == KEEP_ALIVE


async def test_a_disconnect_stops_the_stream_and_closes_its_generator() -> None:
    closed = anyio.Event()
    sent: list[dict[str, Any]] = []

    async def endless() -> AsyncGenerator[bytes, None]:
        try:
            while True:
                yield b": tick\n\n"
                await anyio.sleep(0.01)
        finally:
            closed.set()

    messages = [{"type": "http.request", "body": b"", "more_body": False}]
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 4:
            gone.set()

    with anyio.fail_after(5):
        await ClosingStream(endless(), media_type="text/event-stream")(
            {"type": "http"}, receive, send
        )
    assert closed.is_set()
    assert sent[0]["type"] == "http.response.start"
