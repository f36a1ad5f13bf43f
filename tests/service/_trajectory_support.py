"""Helpers for the trajectory, snapshot and progression tests: long sessions written fast, the
quickstart's frozen things found by name, and a raw ASGI call that sees each body chunk."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from starlette.types import ASGIApp, Message

from envharness.records import Observation, Outcome, Score, SegmentEnded, SessionStatus
from envharness.store import open_store
from tests.service._support import BASE, SessionWriter, World

Signals = Callable[[int], Mapping[str, float | None]]
BATCH = 2000
"""Rows per append when writing a long session."""


def rising(turn: int) -> dict[str, float | None]:
    """Two signals: ``total`` rises with the turn, ``parity`` alternates 0/1, and every 100th
    turn ``parity`` is not a number (recorded as null)."""
    return {"total": float(turn), "parity": None if turn % 100 == 0 else float(turn % 2)}


def write_signal_session(
    store: Path,
    turns: int,
    signals: Signals = rising,
    *,
    participants: tuple[str, ...] = ("alice",),
    observe: bool = False,
) -> str:
    """A completed session of ``turns`` turns whose outcomes carry ``signals(turn)``; with
    ``observe`` each participant is shown one observation per turn too. Written in large
    batches: a 10,000-turn session takes about a second."""
    writer = SessionWriter(participants, turns=turns)
    rows, blobs = writer.start()
    [state] = blobs  # every outcome keeps the state the session started with
    chain = writer.chain
    for turn in range(1, turns + 1):
        if observe:
            for name in participants:
                shown = Observation(observation={"turn": turn})
                rows.append(chain.seal(shown, turn=turn, participant=name))
        outcome = Outcome(state=state, signals=dict(signals(turn)))
        rows.append(chain.seal(outcome, turn=turn))
    rows += [
        chain.seal(Score(version="test@1", metrics={"total": float(turns)}, passed=True)),
        chain.seal(SessionStatus(status="completed")),
        chain.seal(SegmentEnded(segment=0, status="completed")),
    ]

    async def write() -> None:
        async with open_store(store) as opened:
            for start in range(0, len(rows), BATCH):
                await opened.append(rows[start : start + BATCH], blobs)

    anyio.run(write)
    return writer.id


async def frozen_names(world: World) -> tuple[str, str]:
    """The quickstart's snapshot id and the name of the dataset made from it."""
    async with world.client("admin") as client:
        [dataset] = (await client.get("/api/datasets")).json()["datasets"]
    return str(dataset["snapshots"][0]), str(dataset["name"])


async def trio_session(world: World) -> str:
    """The quickstart's standalone trio session (alice, bob, carol), not its branch."""
    async with world.client("admin") as client:
        found = (await client.get("/api/sessions", params={"limit": 100})).json()["sessions"]
        for summary in found:
            lineage = (await client.get(f"/api/sessions/{summary['id']}/lineage")).json()
            if lineage["children"]:
                return str(summary["id"])
    raise AssertionError("the quickstart has no branched session")


async def solo_session(world: World) -> str:
    """The quickstart's session whose only participant is alice."""
    async with world.client("admin") as client:
        found = (await client.get("/api/sessions", params={"limit": 100})).json()["sessions"]
        for summary in found:
            detail = (await client.get(f"/api/sessions/{summary['id']}")).json()
            if set(detail["config"]["participants"]) == {"alice"}:
                return str(summary["id"])
    raise AssertionError("the quickstart has no session of alice alone")


@dataclass
class Streamed:
    """What an ASGI app sent for one request: the status, the headers, each body chunk."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """The size of every body chunk, kept or not."""

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


async def asgi_get(app: ASGIApp, path: str, token: str, *, keep: bool = True) -> Streamed:
    """GET ``path`` through the app's ASGI interface itself, recording every body message (an
    httpx transport would join them); ``keep=False`` records only their sizes."""
    found = Streamed()
    host = BASE.removeprefix("http://").encode()
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
        "headers": [(b"host", host), (b"authorization", f"Bearer {token}".encode())],
    }
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            found.status = message["status"]
            found.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body" and message.get("body"):
            found.sizes.append(len(message["body"]))
            if keep:
                found.chunks.append(message["body"])

    await app(scope, receive, send)
    return found
