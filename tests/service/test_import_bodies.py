"""An import body is spooled, never held: the server's memory does not grow with the body
(docs/imports.md, "Large imports"), and its lines are read as ``bytes.splitlines`` reads them."""

from __future__ import annotations

import gc
import io
import random
import tracemalloc
from collections.abc import AsyncGenerator
from contextlib import aclosing

import pytest

from envharness.service.http import bodies, imports
from envharness.service.http.bodies import spooled_lines
from envharness.store.sources import spool
from envharness.trajectories.sources import SourceChain, encode_source_row
from tests.service._support import World

pytestmark = pytest.mark.anyio

NDJSON = {"Content-Type": "application/x-ndjson"}
RECORDS = 8_000
CHUNK = 500
PAD = "x" * 1_000


def body_lines(source: str) -> list[bytes]:
    chain = SourceChain(source)
    return [
        encode_source_row(
            chain.seal(f"run-{n // 100}", "step", {"n": n, "pad": PAD}, at="2026-01-05T09:00:00Z")
        )
        + b"\n"
        for n in range(RECORDS)
    ]


async def in_chunks(data: bytes, size: int = 64 * 1024) -> AsyncGenerator[bytes, None]:
    """The body as a server receives it: a block at a time. A server that refuses it part-way
    leaves it suspended: send it inside ``aclosing``, or the garbage collector finalizes it later,
    in another test, where trio warns."""
    for at in range(0, len(data), size):
        yield data[at : at + size]


async def test_an_import_body_is_spooled_not_held(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool, "CHUNK_ROWS", CHUNK)  # a body of many chunks
    data = b"".join(body_lines("tests/big"))
    assert len(data) > 8_000_000
    async with world.client("admin") as client:
        warm = b"".join(body_lines("tests/warm")[:10])
        response = await client.post(
            "/api/imports", params={"source": "tests/warm"}, content=warm, headers=NDJSON
        )
        assert response.status_code == 201, response.text
        gc.collect()
        tracemalloc.start()
        try:
            async with aclosing(in_chunks(data)) as body:
                response = await client.post(
                    "/api/imports", params={"source": "tests/big"}, content=body, headers=NDJSON
                )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert response.status_code == 201, response.text
    assert response.json()["stored"] == RECORDS
    # The body held whole, its lines split and its records read would be several times its
    # 8 MB; spooled, the server holds a megabyte of it, the records' spool's megabyte, and a
    # few chunks of records (about 1.2 KB each) at a time.
    chunks = 4 * CHUNK * 1_200
    assert peak < bodies.SPOOL_IN_MEMORY + spool.IN_MEMORY + chunks + 1_000_000 < len(data), peak


async def test_a_streamed_body_over_the_limit_is_refused_and_stores_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imports, "IMPORT_LIMIT", 3_000_000)
    data = b"".join(body_lines("tests/big"))
    async with world.client("admin") as client, aclosing(in_chunks(data)) as body:
        response = await client.post(
            "/api/imports", params={"source": "tests/big"}, content=body, headers=NDJSON
        )
        assert response.status_code == 413
        assert response.json()["message"] == "the body is larger than 3,000,000 bytes"
        # What the refusal left suspended would be finalized here, inside the loop, which trio
        # reports as a warning (an error in this suite): so the body must have been closed.
        gc.collect()
        sources = (await client.get("/api/sources")).json()["sources"]
    assert "tests/big" not in [source["source"] for source in sources]


async def test_a_body_refused_after_its_first_chunk_leaves_nothing_to_finalize(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body sent whole reaches the app in one chunk; refused there, httpx's iterator over it
    is left half-read unless the transport closes it (tests/service/_asgi.py)."""
    monkeypatch.setattr(imports, "IMPORT_LIMIT", 1_000)
    async with world.client("admin") as client:
        response = await client.post(
            "/api/imports", params={"source": "tests/big"}, content=b"x" * 2_000, headers=NDJSON
        )
        assert response.status_code == 413
        gc.collect()


def test_spooled_lines_split_as_splitlines_does(monkeypatch: pytest.MonkeyPatch) -> None:
    pick = random.Random(7)
    for block in (1, 2, 3, 7, 64 * 1024):
        monkeypatch.setattr(bodies, "_READ", block)
        for _ in range(200):
            data = bytes(pick.choice(b"ab\r\n") for _ in range(pick.randrange(60)))
            assert list(spooled_lines(io.BytesIO(data))) == data.splitlines(keepends=True), data
