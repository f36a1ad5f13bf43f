"""``copy_store``: SQLite to PostgreSQL and back, every digest checked, the evidence unchanged,
snapshots and datasets with it; a non-empty destination and an altered source — a record, a
snapshot, a dataset — refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest

from envharness.errors import StoreError
from envharness.records import Artifact, ExperimentStatus, SegmentEnded, SegmentStarted
from envharness.store import open_store
from envharness.store.locate import AnyStore
from envharness.store.owners import this_process
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.copy import copy_store
from envharness.store.snapshots import (
    DATASET_PREFIX,
    SNAPSHOT_PREFIX,
    SnapshotStore,
    content_address,
)
from tests import _engines

from .._support import logs, new_session, plain, status_row, turn_rows
from ._support import experiment_rows, optimizer_rows

pytestmark = pytest.mark.anyio


@pytest.fixture
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A database per test: a copy needs an empty destination."""
    with _engines.fresh_database(postgres_server, "pgcopy") as url:
        yield url


async def _fill(path: Path) -> list[str]:
    """A store with an experiment, sessions with states and an artifact, an optimizer run."""
    experiment, rows = experiment_rows("sweep", 1)
    chain, created = new_session(experiment_id=experiment.session_id)
    first, first_blobs = turn_rows(chain, 1)
    second, second_blobs = turn_rows(chain, 2)
    async with open_store(path) as store:
        await store.append([*rows, experiment.seal(ExperimentStatus(status="running", total=1))])
        sha = await store.put_artifact(b"a report")
        await store.append(
            [created, chain.seal(SegmentStarted(segment=0, runner=this_process())), *first],
            first_blobs,
        )
        await store.append(
            [
                *second,
                chain.seal(Artifact(name="report.txt", sha256=sha, size=8)),
                *logs(chain, 3),
                status_row(chain, "completed"),
                chain.seal(SegmentEnded(segment=0, status="completed")),
            ],
            second_blobs,
        )
        await store.append([experiment.seal(ExperimentStatus(status="completed", total=1))])
        await store.append(optimizer_rows("tune", "harness-1"))
        return [experiment.session_id, chain.session_id]


async def _freeze_by_hand(store: AnyStore, session_id: str) -> tuple[list[str], list[str]]:
    """Two snapshots, the second of three trajectories, and a dataset of each, stored as
    freezing and making a dataset store them (the store knows bytes, not trajectories); their
    ids, oldest first."""
    snapshots = SnapshotStore(store.backend)
    made: list[str] = []
    for number, held in enumerate([[session_id], [session_id, "ses_other", "src/a:episode-1"]]):
        header = b'{"label":"frozen %d"}' % number
        members = [(held_id, msgspec.json.encode({"session_id": held_id})) for held_id in held]
        snapshot_id = content_address(SNAPSHOT_PREFIX, header, (data for _, data in members))
        await snapshots.put_snapshot(snapshot_id, header, members, f"2026-01-0{number + 1}T00Z")
        made.append(snapshot_id)
    named: list[str] = []
    for number, snapshot_id in enumerate(made):
        content = msgspec.json.encode({"name": f"sft-{number}", "snapshots": [snapshot_id]})
        dataset_id = content_address(DATASET_PREFIX, content)
        made_at = f"2026-02-0{number + 1}T00Z"
        await snapshots.put_dataset(f"sft-{number}", dataset_id, content, made_at)
        named.append(dataset_id)
    return made, named


async def _held(store: AnyStore) -> tuple[list[object], list[object]]:
    """Every snapshot with its trajectories, and every dataset, as stored."""
    snapshots = SnapshotStore(store.backend)
    frozen: list[object] = []
    for row in await snapshots.snapshots():
        frozen.append((row, [member async for member in snapshots.members(row.id)]))
    return frozen, list(await snapshots.datasets())


async def test_a_store_goes_to_postgresql_and_back_unchanged(database: str, tmp_path: Path) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source:
        await _freeze_by_hand(source, chains[1])
        originals = {chain: [row async for row in source.rows(chain)] for chain in chains}
        frozen = await _held(source)
        async with open_postgres_store(database) as middle:
            there = await copy_store(source, middle)
            frozen_there = await _held(middle)
            report = await middle.verify()
            info = await middle.experiment(chains[0])
            analyzed = await middle.backend.read_native(
                lambda connection: connection.execute(
                    "SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'records'"
                    " AND last_analyze IS NOT NULL"
                ).fetchone()
            )
            async with open_store(tmp_path / "back") as back:
                again = await copy_store(middle, back)
                returned = {chain: [row async for row in back.rows(chain)] for chain in chains}
                frozen_back = await _held(back)
                back_report = await back.verify()
    assert (there.chains, there.records, there.blobs, there.artifacts) == (3, 20, 2, 1)
    assert (there.snapshots, there.datasets) == (2, 2)
    assert again == there
    assert returned == originals  # every byte, every digest
    assert frozen_there == frozen_back == frozen  # ids, bytes, times and order
    assert report.ok, report.breaks
    assert back_report.ok, back_report.breaks
    assert (info.status, info.sessions.completed) == ("completed", 1)
    assert analyzed == (1,)  # the planner has statistics before the first page is served


async def test_a_destination_with_records_is_refused_and_left_alone(
    database: str, tmp_path: Path
) -> None:
    await _fill(tmp_path / "source")
    _, lone = new_session()
    async with open_store(tmp_path / "source") as source, open_postgres_store(database) as full:
        await full.append([lone])
        with pytest.raises(StoreError, match="already holds records"):
            await copy_store(source, full)
        assert [info.id for info in await full.sessions()] == [lone.session_id]


async def test_an_altered_source_record_stops_the_copy(database: str, tmp_path: Path) -> None:
    _, session_id = await _fill(tmp_path / "source")
    with plain(tmp_path / "source") as connection:
        connection.execute("DROP TRIGGER records_are_append_only_update")
        connection.execute(
            "UPDATE records SET participant = 'mallory' WHERE session_id = ? AND seq = 3",
            (session_id,),
        )
    async with open_store(tmp_path / "source") as source, open_postgres_store(database) as dest:
        with pytest.raises(StoreError, match=f"{session_id} seq 3 .* was altered"):
            await copy_store(source, dest)


_ALTERED = b'{"session_id":"ses_other","altered":true}'
ALTERATIONS = {
    "trajectory": (
        "DROP TRIGGER snapshot_trajectories_are_immutable_update",
        "UPDATE snapshot_trajectories SET trajectory = :altered"
        " WHERE snapshot_id = :second AND position = 1",
        "snapshot {second}: its stored content no longer has its id",
        (1, 0),
    ),
    "filed-under": (
        "DROP TRIGGER snapshot_trajectories_are_immutable_update",
        "UPDATE snapshot_trajectories SET session_id = 'ses_mallory'"
        " WHERE snapshot_id = :second AND position = 1",
        "position 1 is of 'ses_other' but is filed under 'ses_mallory'",
        (1, 0),
    ),
    "gap": (
        "DROP TRIGGER snapshot_trajectories_are_immutable_delete",
        "DELETE FROM snapshot_trajectories WHERE snapshot_id = :second AND position = 1",
        "snapshot {second}: its trajectory at position 1 is missing",
        (1, 0),
    ),
    "dataset": (
        "DROP TRIGGER datasets_are_immutable_update",
        "UPDATE datasets SET content = :altered WHERE name = 'sft-1'",
        "dataset 'sft-1' .*: its stored content no longer has its id",
        (2, 1),
    ),
    "dataset-name": (
        "DROP TRIGGER datasets_are_immutable_update",
        "UPDATE datasets SET name = 'sft-9' WHERE name = 'sft-1'",
        "filed under 'sft-9' but its content names 'sft-1'",
        (2, 1),
    ),
    "snapshot-gone": (
        "DROP TRIGGER snapshots_are_immutable_delete",
        "DELETE FROM snapshots WHERE id = :second",
        "dataset 'sft-1' .*: it names snapshot {second}, which the source does not hold",
        (1, 1),
    ),
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the cases differ in checks, not loops
@pytest.mark.parametrize("alteration", ALTERATIONS)
async def test_an_altered_snapshot_or_dataset_stops_the_copy_after_whole_ones(
    database: str, tmp_path: Path, alteration: str
) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source:
        (_, second), _ = await _freeze_by_hand(source, chains[1])
    unguard, alter, problem, (snapshots, datasets) = ALTERATIONS[alteration]
    with plain(tmp_path / "source") as connection:
        connection.execute(unguard)
        connection.execute(alter, {"second": second, "altered": _ALTERED})

    async with open_store(tmp_path / "source") as source, open_postgres_store(database) as dest:
        with pytest.raises(StoreError, match=problem.format(second=second)) as refused:
            await copy_store(source, dest)
        held, there = await _held(source), await _held(dest)
        report = await dest.verify()
    assert "restore the source from a backup" in str(refused.value)
    assert there == (held[0][:snapshots], held[1][:datasets])  # each one before it, whole
    assert report.ok, report.breaks  # and every chain


async def test_a_snapshot_altered_in_postgresql_stops_the_copy_back(
    database: str, tmp_path: Path
) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source, open_postgres_store(database) as middle:
        (first, second), _ = await _freeze_by_hand(source, chains[1])
        await copy_store(source, middle)
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("ALTER TABLE snapshots DISABLE TRIGGER USER")
        connection.execute(
            "UPDATE snapshots SET header = %s WHERE id = %s", (b'{"label":"other"}', second)
        )

    async with open_postgres_store(database) as middle, open_store(tmp_path / "back") as back:
        with pytest.raises(StoreError, match=f"snapshot {second}: its stored content no longer"):
            await copy_store(middle, back)
        frozen, datasets = await _held(back)
    assert [row.id for row, _ in frozen] == [first]
    assert datasets == []


async def test_a_destination_with_snapshots_or_datasets_is_refused_untouched(
    database: str, tmp_path: Path
) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source, open_postgres_store(database) as dest:
        await _freeze_by_hand(dest, chains[1])  # frozen there, with no records
        before = await _held(dest)
        with pytest.raises(StoreError, match="already holds 2 snapshots and 2 datasets"):
            await copy_store(source, dest)
        assert await dest.last_position() == -1
        assert await _held(dest) == before
