"""The spool an export holds its checked lines in: same lines, same order, memory or file."""

from __future__ import annotations

import tracemalloc

import pytest

from envharness.trajectories.spool import LineSpool

pytestmark = pytest.mark.anyio


async def read_back(spool: LineSpool) -> list[bytes]:
    try:
        return [line async for line in spool.lines()]
    finally:
        spool.close()


@pytest.mark.parametrize(("in_memory", "batch"), [(1 << 20, 1 << 16), (64, 16)])
async def test_lines_come_back_whole_and_in_order(in_memory: int, batch: int) -> None:
    # Small bounds move the spool to its file and split lines across read batches.
    lines = [b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * (n % 37)) for n in range(100)]
    spool = LineSpool(in_memory=in_memory, batch=batch)
    for line in lines:
        await spool.add(line)
    assert await read_back(spool) == lines


async def test_an_empty_spool_reads_nothing() -> None:
    assert await read_back(LineSpool()) == []


async def test_a_last_line_without_newline_comes_back_as_it_was() -> None:
    spool = LineSpool(in_memory=8, batch=4)
    for line in (b"first\n", b"", b"\n", b"last"):
        await spool.add(line)
    assert await read_back(spool) == [b"first\n", b"\n", b"last"]


async def test_past_its_memory_bound_the_spool_holds_its_lines_in_a_file() -> None:
    # 4 MB of lines held with a 64 KiB bound: traced memory stays a few batches.
    line = b'{"type":"record","record":{"payload":"%s"}}\n' % (b"x" * 1000)
    spool = LineSpool(in_memory=64 * 1024, batch=16 * 1024)
    tracemalloc.start()
    try:
        for _ in range(4_000):
            await spool.add(line)
        count = 0
        async for found in spool.lines():
            count += found == line
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        spool.close()
    assert count == 4_000
    assert peak < 1_000_000, peak  # holding them all: over 4 MB
