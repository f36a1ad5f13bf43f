"""Imported trajectories' evidence reads back checked, and travels in snapshots and exports."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path

import msgspec
import pytest

from envharness.store import read_store
from envharness.trajectories import (
    Evidence,
    EvidenceMismatchError,
    JournalEvidence,
    StoreChains,
    export_snapshot,
    freeze_trajectories,
)
from envharness.trajectories.sources import (
    SourceChain,
    SourceEvidence,
    import_records,
    project_episode,
    read_source_lines,
    source_trajectories,
    verify_imported,
)
from tests.trajectories.sources._support import AT, SOURCE, database, episode

pytestmark = pytest.mark.anyio


async def interleaved(store: Path) -> list[object]:
    chain = SourceChain(SOURCE)
    rows = [
        chain.seal("a", "step", {"n": 1}, at=AT),
        chain.seal("b", "step", {"n": 2}, at=AT),
        chain.seal("a", "episode.ended", {"status": "completed"}, at=AT),
    ]
    await import_records(store, SOURCE, rows)
    return list(rows)


async def test_the_reader_yields_the_episodes_own_records_as_import_lines(
    store_path: Path,
) -> None:
    rows = await interleaved(store_path)
    trajectory = await project_episode(store_path, SOURCE, "a")
    async with aclosing(SourceEvidence(store_path).rows(trajectory)) as found:
        evidence = [row async for row in found]
    assert [row.seq for row in evidence] == [0, 2]
    lines = [json.loads(row.line) for row in evidence]
    assert {line["type"] for line in lines} == {"source_record"}
    # The inner object is an import line, bytes as stored: it reads back to the same record.
    prefix = b'{"type":"source_record","record":'
    inner = evidence[0].line.removeprefix(prefix).removesuffix(b"}")
    assert list(read_source_lines(SOURCE, [inner])) == rows[:1]
    assert await verify_imported(store_path, trajectory) == 2


async def test_a_stores_backend_reads_the_same_as_its_directory(store_path: Path) -> None:
    """The service passes ``Store.backend``, a user a path: both name one database."""
    await interleaved(store_path)
    backend = (await read_store(store_path)).backend
    by_path = await project_episode(store_path, SOURCE, "a")
    assert await project_episode(backend, SOURCE, "a") == by_path
    assert await verify_imported(backend, by_path) == 2
    assert [t async for t in source_trajectories(backend)] == [
        t async for t in source_trajectories(str(store_path))
    ]


async def test_a_record_of_another_episode_inside_the_range_is_checked_too(
    store_path: Path,
) -> None:
    await interleaved(store_path)
    trajectory = await project_episode(store_path, SOURCE, "a")
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = CAST('{\"n\":3}' AS BLOB) WHERE position = 1"
        )
    with pytest.raises(EvidenceMismatchError) as caught:
        await verify_imported(store_path, trajectory)
    assert caught.value.seq == 1
    assert caught.value.session_id == f"{SOURCE}:a"


async def test_records_removed_from_the_range_are_named(store_path: Path) -> None:
    await interleaved(store_path)
    trajectory = await project_episode(store_path, SOURCE, "a")
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_delete")
        connection.execute("DELETE FROM source_records WHERE position = 2")
    with pytest.raises(EvidenceMismatchError, match="ends at position 1, before the bound head 2"):
        await verify_imported(store_path, trajectory)


async def test_a_native_binding_is_not_read_as_a_source(store_path: Path) -> None:
    await interleaved(store_path)
    trajectory = await project_episode(store_path, SOURCE, "a")
    native = msgspec.structs.replace(
        trajectory, journal=msgspec.structs.replace(trajectory.journal, algorithm="sha256-chain/1")
    )
    with pytest.raises(EvidenceMismatchError, match="not 'sha256-source-chain/1'"):
        await verify_imported(store_path, native)


async def test_an_imported_trajectory_freezes_and_exports_through_the_evidence_plug(
    store_path: Path,
) -> None:
    await import_records(store_path, SOURCE, episode(SourceChain(SOURCE)), training=True)
    store = await read_store(store_path)
    trajectories = [t async for t in source_trajectories(store_path)]
    snapshot = await freeze_trajectories(store, trajectories, label="imported")
    reader = Evidence(JournalEvidence(StoreChains(store)), imported=SourceEvidence(store_path))
    async with aclosing(export_snapshot(store, snapshot.metadata.id, reader)) as lines:
        exported = [json.loads(line) async for line in lines]
    assert [line["type"] for line in exported] == [
        "snapshot", "trajectory", *["source_record"] * 5,
    ]  # fmt: skip
    assert exported[1]["trajectory"]["provenance"]["origin"] == "imported"
    assert exported[-1]["record"]["kind"] == "episode.ended"


async def test_altered_imported_evidence_is_not_frozen(store_path: Path) -> None:
    await interleaved(store_path)
    store = await read_store(store_path)
    trajectory = await project_episode(store_path, SOURCE, "a")
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = CAST('{\"n\":7}' AS BLOB) WHERE position = 0"
        )
    with pytest.raises(EvidenceMismatchError) as caught:
        await freeze_trajectories(store, [trajectory], label="after the change")
    message = str(caught.value)
    assert message.startswith(f"nothing was frozen: imported trajectory {SOURCE}:a")
    # The stored record was altered: the producer's hashing advice does not apply.
    assert "altered after it was imported" in message
    assert "docs/imports.md" not in message
    with database(store_path) as connection:
        assert connection.execute("SELECT count(*) FROM snapshots").fetchone() == (0,)
