"""Imports in bounded memory: a large file is checked and stored a chunk at a time, and a
refusal anywhere in it still stores nothing (docs/imports.md, "Large imports")."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from envharness.store.database import DATABASE_NAME
from envharness.store.sources import (
    ImportBatch,
    RowSpool,
    SourceChainError,
    SourceFormatError,
    SourceRow,
    SourceStore,
    spool,
)
from envharness.trajectories.sources import SourceChain, encode_source_row, import_file
from tests.trajectories.sources._support import AT, SOURCE, database, dump

pytestmark = pytest.mark.anyio

CHUNK = 500
"""Records per chunk in these tests (smaller than the default, so a file spans many)."""
IN_MEMORY = 1_000_000
"""Spooled bytes kept in memory before the spool moves to its file, in these tests."""
PAYLOAD = 1_000
"""Bytes of padding in each record's payload: 10,000 records are a 12 MB file."""


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool, "CHUNK_ROWS", CHUNK)
    monkeypatch.setattr(spool, "IN_MEMORY", IN_MEMORY)


def rows(
    count: int, *, first: int = 0, prev: str | None = None, source: str = SOURCE
) -> Iterator[SourceRow]:
    chain = SourceChain(source, next_position=first, prev=prev)
    for n in range(first, first + count):
        yield chain.seal(
            f"run-{n // 100}", "step", {"n": n, "pad": "x" * PAYLOAD}, at=AT, turn=n,
            participant="bot",
        )  # fmt: skip


def write(path: Path, records: Iterator[SourceRow]) -> Path:
    with path.open("wb") as out:
        for row in records:
            out.write(encode_source_row(row) + b"\n")
    return path


async def test_a_large_import_holds_about_one_chunk_in_memory(
    store_path: Path, tmp_path: Path
) -> None:
    count = 10_000
    big = write(tmp_path / "big.jsonl", rows(count))
    small = write(tmp_path / "small.jsonl", rows(10, source="warm/up"))
    await import_file(store_path, "warm/up", small)  # lazy imports, worker threads, the store
    gc.collect()
    tracemalloc.start()
    try:
        receipt = await import_file(store_path, SOURCE, big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (receipt.stored, receipt.head_position) == (count, count - 1)
    # Held whole, the batch alone would be over 12 MB (each record's bytes, and more); here
    # the spool's memory part, a few chunks of CHUNK records of about 1.2 KB, and 1 MB more.
    file_size = big.stat().st_size
    assert file_size > 12_000_000
    assert peak < IN_MEMORY + 4 * CHUNK * (PAYLOAD + 200) + 1_000_000 < file_size / 2, peak
    with database(store_path) as connection:
        stored = connection.execute(
            "SELECT count(*), max(position) FROM source_records WHERE source = ?", (SOURCE,)
        ).fetchone()
    assert stored == (count, count - 1)


async def test_a_refusal_late_in_a_large_file_stores_nothing(
    store_path: Path, tmp_path: Path
) -> None:
    held = list(rows(10))
    write(tmp_path / "held.jsonl", iter(held))
    await import_file(store_path, SOURCE, tmp_path / "held.jsonl")
    before = dump(store_path)
    path = write(tmp_path / "big.jsonl", rows(3_000, first=10, prev=held[-1].hash))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2_500] = lines[2_500].replace(b'"turn":2510', b'"turn":7')  # after five chunks
    path.write_bytes(b"".join(lines))
    with pytest.raises(SourceChainError) as refused:
        await import_file(store_path, SOURCE, path)
    assert refused.value.position == 2_510
    assert str(refused.value).startswith("big.jsonl line 2501: position 2510: its hash")
    assert dump(store_path) == before  # not a record of the 2,500 good ones before it
    with database(store_path) as connection:
        [(status, first, last)] = connection.execute(
            "SELECT status, first_position, last_position FROM source_imports"
            " WHERE source = ? AND status = 'refused'",
            (SOURCE,),
        ).fetchall()
    assert (status, first, last) == ("refused", 10, 2_509)  # what it offered before the fault


async def test_a_refused_first_import_of_a_large_file_creates_no_store(tmp_path: Path) -> None:
    path = write(tmp_path / "big.jsonl", rows(2_000))
    with path.open("ab") as out:
        out.write(b"not json\n")
    store = tmp_path / "never"
    with pytest.raises(SourceFormatError, match=r"big\.jsonl line 2001: not a JSON object"):
        await import_file(store, SOURCE, path)
    assert not (store / DATABASE_NAME).exists()


async def test_a_failure_after_some_chunks_were_inserted_rolls_all_of_them_back(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = list(rows(3))
    sources = SourceStore(store_path)
    batch = ImportBatch(source=SOURCE, format="envharness", importer="tests/1", origin="t")
    await sources.append(batch, held)
    before = dump(store_path)
    spooled = RowSpool(SOURCE)
    for row in rows(2_000, first=3, prev=held[-1].hash):
        spooled.add(row)
    chunks = spooled.chunks

    def failing() -> Iterator[list[SourceRow]]:
        for number, chunk in enumerate(chunks()):
            if number == 2:  # two chunks are inserted in the transaction by now
                raise OSError("the spool's disk failed")
            yield chunk

    monkeypatch.setattr(spooled, "chunks", failing)
    with pytest.raises(OSError, match="disk failed"):
        await sources.append_spooled(batch, spooled)
    spooled.close()
    assert dump(store_path) == before


def test_a_spool_gives_back_what_it_was_given_in_chunks() -> None:
    given = list(rows(1_234))
    spooled = RowSpool(SOURCE)
    try:
        for row in given:
            spooled.add(row)
        chunks = list(spooled.chunks())
        assert [len(chunk) for chunk in chunks] == [CHUNK, CHUNK, 234]
        assert [row for chunk in chunks for row in chunk] == given
        assert spooled.span == (0, 1_233)
        assert spooled.count == 1_234
    finally:
        spooled.close()
