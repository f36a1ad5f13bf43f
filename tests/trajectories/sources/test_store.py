"""The store side of imports: whole batches, idempotent retries, loud conflicts, health, verify."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from envharness.errors import ConfigurationError, NotFoundError
from envharness.store import open_store, read_store
from envharness.store.database import SCHEMA_VERSION
from envharness.store.sources import (
    ImportBatch,
    SourceChainError,
    SourceConflictError,
    SourceFormatError,
    SourceGap,
    SourceImportError,
    SourceRow,
    SourceStore,
    check_source_id,
    source_hash_of,
)
from envharness.trajectories.sources import SourceChain
from tests.trajectories.sources._support import AT, SOURCE, database, dump, episode

pytestmark = pytest.mark.anyio

BATCH = ImportBatch(source=SOURCE, format="envharness", importer="tests/1", origin="test")


def rehashed(row: SourceRow, **changes: object) -> SourceRow:
    """``row`` with fields changed and its hash recomputed (a record that is self-consistent)."""
    changed = row._replace(**changes)  # type: ignore[arg-type]
    return changed._replace(hash=source_hash_of(*changed[:10]))


async def test_a_batch_is_stored_and_its_head_acknowledged(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    receipt = await SourceStore(store_path).append(BATCH, rows)
    assert (receipt.stored, receipt.duplicates) == (len(rows), 0)
    assert (receipt.head_position, receipt.head_hash) == (rows[-1].position, rows[-1].hash)
    assert await SourceStore(store_path).head(SOURCE) == (rows[-1].position, rows[-1].hash)
    stored = [row async for row in SourceStore(store_path).rows(SOURCE)]
    assert stored == rows


async def test_an_identical_retry_stores_nothing(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    sources = SourceStore(store_path)
    await sources.append(BATCH, rows)
    before = dump(store_path)
    again = await sources.append(BATCH, rows)
    assert (again.stored, again.duplicates) == (0, len(rows))
    assert dump(store_path) == before


async def test_a_retry_that_overlaps_stores_only_what_is_new(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    first, second = episode(chain, "run-1"), episode(chain, "run-2")
    sources = SourceStore(store_path)
    await sources.append(BATCH, first)
    receipt = await sources.append(BATCH, [*first[2:], *second])
    assert (receipt.stored, receipt.duplicates) == (len(second), len(first) - 2)
    assert receipt.head_position == second[-1].position


async def test_a_retry_with_different_content_is_refused_and_changes_nothing(
    store_path: Path,
) -> None:
    rows = episode(SourceChain(SOURCE))
    sources = SourceStore(store_path)
    await sources.append(BATCH, rows)
    before = dump(store_path)
    chain = SourceChain(SOURCE)
    other = [chain.seal("run-1", "note", {"text": "another history"}, at=AT) for _ in rows]
    with pytest.raises(SourceConflictError) as caught:
        await sources.append(BATCH, [*other, chain.seal("run-1", "note", {}, at=AT)])
    assert caught.value.position == 0
    message = str(caught.value)
    assert "position 0 is already imported" in message
    assert "import it as a new source" in message
    assert dump(store_path) == before


async def test_a_gap_after_the_head_is_refused_naming_the_missing_positions(
    store_path: Path,
) -> None:
    rows = episode(SourceChain(SOURCE))
    sources = SourceStore(store_path)
    await sources.append(BATCH, rows[:2])
    before = dump(store_path)
    with pytest.raises(SourceChainError) as caught:
        await sources.append(BATCH, rows[3:])
    assert (caught.value.problem, caught.value.position) == ("gap", 3)
    assert "position(s) 2 were never imported" in str(caught.value)
    assert "starting at position 2" in str(caught.value)
    assert dump(store_path) == before
    [health] = await sources.health()
    assert health.gaps == (SourceGap(2, 2),)
    assert health.backlog == rows[-1].position - 1
    assert health.refused == 1
    # Filling the gap heals it.
    await sources.append(BATCH, rows[2:])
    [health] = await sources.health()
    assert (health.gaps, health.backlog, health.refused) == ((), 0, 0)


async def test_a_first_import_must_start_at_position_zero(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceChainError, match=r"position\(s\) 0 were never imported"):
        await SourceStore(store_path).append(BATCH, rows[1:])
    assert dump(store_path)[0] == []


async def test_a_hash_that_does_not_match_its_content_is_refused(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    edited = rows[1]._replace(payload=b'{"cells":[1,3]}')
    with pytest.raises(SourceChainError) as caught:
        await SourceStore(store_path).append(BATCH, [rows[0], edited, *rows[2:]])
    assert (caught.value.problem, caught.value.position) == ("hash", 1)
    assert "does not match its content" in str(caught.value)
    assert dump(store_path)[0] == []


async def test_a_prev_that_does_not_chain_is_refused(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    broken = rehashed(rows[2], prev=rows[0].hash)
    with pytest.raises(SourceChainError) as caught:
        await SourceStore(store_path).append(BATCH, [*rows[:2], broken])
    assert (caught.value.problem, caught.value.position) == ("chain", 2)
    assert "is not the hash of position 1" in str(caught.value)


async def test_a_batch_that_does_not_continue_the_stored_chain_is_refused(
    store_path: Path,
) -> None:
    rows = episode(SourceChain(SOURCE))
    sources = SourceStore(store_path)
    await sources.append(BATCH, rows[:2])
    elsewhere = SourceChain(SOURCE, next_position=2, prev="0" * 64)
    with pytest.raises(SourceChainError) as caught:
        await sources.append(BATCH, [elsewhere.seal("run-1", "note", {}, at=AT)])
    assert (caught.value.problem, caught.value.position) == ("chain", 2)
    assert "acknowledged position 1" in str(caught.value)


async def test_an_unknown_schema_version_is_refused(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    future = rehashed(rows[0], schema_version=2)
    with pytest.raises(SourceFormatError) as caught:
        await SourceStore(store_path).append(BATCH, [future])
    assert caught.value.problem == "schema"
    assert "schema_version 2 is not one this envharness reads (1)" in str(caught.value)
    assert "upgrade envharness" in str(caught.value)


async def test_a_record_of_another_source_is_refused(store_path: Path) -> None:
    rows = episode(SourceChain("other/source"))
    with pytest.raises(SourceFormatError, match="belongs to source 'other/source'"):
        await SourceStore(store_path).append(BATCH, rows)


def test_source_ids_must_be_namespaced() -> None:
    assert check_source_id("otel/host-a") == "otel/host-a"
    for bad in ("plain", "/x", "a/", "a b/c", "a:b/c", "x" * 300 + "/y"):
        with pytest.raises(ConfigurationError, match="NAMESPACE/NAME"):
            check_source_id(bad)


async def test_an_empty_batch_is_an_error(store_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no records"):
        await SourceStore(store_path).append(BATCH, [])


async def test_two_imports_of_the_same_source_at_once_one_wins(store_path: Path) -> None:
    """Conflicting batches race: exactly one is stored, the other refused, the chain intact."""
    mine, theirs = episode(SourceChain(SOURCE), "run-a"), episode(SourceChain(SOURCE), "run-b")
    outcomes: dict[str, object] = {}

    async def send(name: str, rows: list[SourceRow]) -> None:
        try:
            outcomes[name] = await SourceStore(store_path).append(BATCH, rows)
        except SourceImportError as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as group:
        group.start_soon(send, "mine", mine)
        group.start_soon(send, "theirs", theirs)
    refused = [name for name, outcome in outcomes.items() if isinstance(outcome, Exception)]
    assert len(refused) == 1
    assert isinstance(outcomes[refused[0]], SourceConflictError)
    winner = theirs if refused == ["mine"] else mine
    assert [row async for row in SourceStore(store_path).rows(SOURCE)] == winner
    report = await (await read_store(store_path)).verify()
    assert report.ok, report.breaks


async def test_two_identical_imports_at_once_store_one_copy(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    receipts = []

    async def send() -> None:
        receipts.append(await SourceStore(store_path).append(BATCH, rows))

    async with anyio.create_task_group() as group:
        group.start_soon(send)
        group.start_soon(send)
    assert sorted((receipt.stored, receipt.duplicates) for receipt in receipts) == [
        (0, len(rows)),
        (len(rows), 0),
    ]


async def test_imports_share_the_store_with_a_running_journal(store_path: Path) -> None:
    async with open_store(store_path):
        receipt = await SourceStore(store_path).append(BATCH, episode(SourceChain(SOURCE)))
    assert receipt.stored == 5


async def test_imported_records_are_append_only(store_path: Path) -> None:
    await SourceStore(store_path).append(BATCH, episode(SourceChain(SOURCE)))
    with database(store_path) as connection:
        for statement in (
            "UPDATE source_records SET kind = 'x'",
            "DELETE FROM source_records",
            "UPDATE source_imports SET training = 1",
            "DELETE FROM source_imports",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)


async def test_health_reports_head_backlog_capture_failures_and_refusals(
    store_path: Path,
) -> None:
    chain = SourceChain(SOURCE)
    rows = [
        *episode(chain, "run-1"),
        chain.seal("run-2", "capture.failed", {"detail": "lost 3 spans", "lost": 3}, at=AT),
    ]
    sources = SourceStore(store_path)
    await sources.append(BATCH, rows)
    extra = SourceChain(SOURCE, next_position=len(rows), prev=rows[-1].hash)
    with pytest.raises(SourceChainError):
        await sources.append(BATCH, [rehashed(extra.seal("run-2", "x", {}, at=AT), prev=None)])
    [health] = await sources.health()
    assert (health.head_position, health.head_hash) == (rows[-1].position, rows[-1].hash)
    assert (health.records, health.episodes) == (len(rows), 2)
    assert health.formats == ("envharness",)
    assert health.capture_failures == 1
    assert health.last_capture_failure == f"position {rows[-1].position}: lost 3 spans"
    assert (health.imports, health.refused, health.backlog) == (2, 1, 1)
    assert health.last_refusal is not None
    assert "prev" in health.last_refusal
    assert await sources.health(SOURCE) == [health]
    with pytest.raises(NotFoundError, match="no source 'nobody/here'"):
        await sources.health("nobody/here")


async def test_episodes_say_where_their_records_lie(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    first, second = episode(chain, "run-1"), episode(chain, "run-2")
    sources = SourceStore(store_path)
    await sources.append(BATCH, first)
    training = ImportBatch(source=SOURCE, format="envharness", importer="tests/1", training=True)
    await sources.append(training, second)
    found = {info.episode: info for info in await sources.episodes(SOURCE)}
    assert (found["run-1"].first_position, found["run-1"].last_position) == (0, 4)
    assert (found["run-2"].records, found["run-2"].head_hash) == (5, second[-1].hash)
    assert (found["run-1"].training, found["run-2"].training) == (False, True)
    with pytest.raises(NotFoundError):
        await sources.episodes("nobody/here")


async def test_verify_checks_imported_chains(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    await SourceStore(store_path).append(BATCH, rows)
    report = await (await read_store(store_path)).verify()
    assert report.ok
    assert report.records >= len(rows)
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = ? WHERE position = 1", (b'{"cells":[9]}',)
        )
    report = await (await read_store(store_path)).verify()
    [found] = report.breaks
    assert (found.session_id, found.seq) == (SOURCE, 1)
    assert "does not match its stored content" in found.problem
    # The fault is the store's, not the producer's: no advice on how to hash a line.
    assert "altered after it was imported" in found.problem
    assert "docs/imports.md" not in found.problem


async def test_verify_sees_records_deleted_from_the_end_of_a_source(store_path: Path) -> None:
    rows = episode(SourceChain(SOURCE))
    await SourceStore(store_path).append(BATCH, rows)
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_delete")
        connection.execute("DELETE FROM source_records WHERE position = ?", (rows[-1].position,))
    report = await (await read_store(store_path)).verify()
    assert [(found.session_id, found.seq) for found in report.breaks] == [
        (SOURCE, rows[-2].position)
    ]
    assert "acknowledged head is position 4" in report.breaks[0].problem


async def test_the_migration_is_one_step_of_the_schema(store_path: Path) -> None:
    await SourceStore(store_path).append(BATCH, episode(SourceChain(SOURCE)))
    with database(store_path) as connection:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert version == SCHEMA_VERSION
    assert {"sources", "source_records", "source_imports"} <= tables
