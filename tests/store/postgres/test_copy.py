"""``copy_store``: SQLite to PostgreSQL and back, every digest checked, the evidence unchanged,
snapshots and datasets with it; a non-empty destination and an altered source — a record, a
snapshot, a dataset, a snapshot whose evidence is gone — refused; what a runner writes to the
source during the copy left out."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest

from envharness import AsyncEnvironmentHarness
from envharness.errors import StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
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
from envharness.trajectories.sources import SourceChain
from tests import _engines
from tests.trajectories.sources._support import SOURCE, episode

from .._support import logs, new_session, plain, status_row, turn_rows
from ._support import experiment_rows, optimizer_rows

pytestmark = pytest.mark.anyio


@pytest.fixture
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A database per test: a copy needs an empty destination."""
    with _engines.fresh_database(postgres_server, "pgcopy") as url:
        yield url


IMPORTED = f"{SOURCE}:run-1"
"""The trajectory of the first of the two episodes :func:`_fill` imports."""


async def _fill(path: Path) -> list[str]:
    """A store with an experiment, sessions with states and an artifact, an optimizer run, an
    imported source of two episodes."""
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
    harness = AsyncEnvironmentHarness(
        path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    source = SourceChain(SOURCE)
    await harness.sources().import_records(
        SOURCE, [*episode(source, "run-1"), *episode(source, "run-2")]
    )
    return [experiment.session_id, chain.session_id]


def _trajectory(session_id: str, source: str | None = None) -> bytes:
    """A stored trajectory's bytes, cut to what a copy reads of them: its session, and the
    evidence it binds (its own chain, or the imported source's)."""
    if source is None:
        return msgspec.json.encode({"session_id": session_id, "journal": {"chain": session_id}})
    return msgspec.json.encode(
        {
            "session_id": session_id,
            "provenance": {"origin": "imported", "source": source},
            "journal": {"chain": source},
        }
    )


def _put_by_hand(
    connection: sqlite3.Connection, held: list[tuple[str, bytes]], name: str, at: str
) -> tuple[str, str]:
    """A snapshot of ``held`` and a dataset ``name`` of it written straight into a SQLite
    store, as another runner's freezing would; their ids."""
    header = b'{"label":"%s"}' % name.encode()
    snapshot_id = content_address(SNAPSHOT_PREFIX, header, (data for _, data in held))
    connection.execute("INSERT INTO snapshots VALUES (?, ?, ?)", (snapshot_id, header, at))
    for position, (session_id, data) in enumerate(held):
        connection.execute(
            "INSERT INTO snapshot_trajectories VALUES (?, ?, ?, ?)",
            (snapshot_id, position, session_id, data),
        )
    content = msgspec.json.encode({"name": name, "snapshots": [snapshot_id]})
    dataset_id = content_address(DATASET_PREFIX, content)
    connection.execute("INSERT INTO datasets VALUES (?, ?, ?, ?)", (name, dataset_id, content, at))
    return snapshot_id, dataset_id


async def _freeze_by_hand(store: AnyStore, session_id: str) -> tuple[list[str], list[str]]:
    """Two snapshots, the second of a native and two imported trajectories, and a dataset of
    each, stored as freezing and making a dataset store them (the store knows bytes, not
    trajectories); their ids, oldest first."""
    snapshots = SnapshotStore(store.backend)
    made: list[str] = []
    native = (session_id, _trajectory(session_id))
    imported = [
        (f"{SOURCE}:{name}", _trajectory(f"{SOURCE}:{name}", SOURCE)) for name in ("run-1", "run-2")
    ]
    for number, members in enumerate([[native], [native, *imported]]):
        header = b'{"label":"frozen %d"}' % number
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
            ticked: list[str] = []
            there = await copy_store(source, middle, on_snapshot=ticked.append)
            frozen_there = await _held(middle)
            report = await middle.verify()
            info = await middle.experiment(chains[0])
            analyzed = await middle.backend.read_native(
                lambda connection: connection.execute(
                    "SELECT count(*) FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL"
                    " AND relname IN ('records', 'snapshot_trajectories', 'datasets')"
                ).fetchone()
            )
            async with open_store(tmp_path / "back") as back:
                again = await copy_store(middle, back)
                returned = {chain: [row async for row in back.rows(chain)] for chain in chains}
                frozen_back = await _held(back)
                back_report = await back.verify()
    assert (there.chains, there.records, there.blobs, there.artifacts) == (3, 20, 2, 1)
    assert (there.snapshots, there.datasets, there.sources) == (2, 2, 1)
    assert again == there
    assert returned == originals  # every byte, every digest
    assert frozen_there == frozen_back == frozen  # ids, bytes, times and order
    assert ticked == [row.id for row, _ in frozen[0]]  # what a progress line counts
    assert report.ok, report.breaks
    assert back_report.ok, back_report.breaks
    assert (info.status, info.sessions.completed) == ("completed", 1)
    assert analyzed == (3,)  # the planner has statistics before the first page is served


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


_ALTERED = b'{"session_id":"%s","altered":true}' % IMPORTED.encode()
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
        f"position 1 is of '{IMPORTED}' but is filed under 'ses_mallory'",
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


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the cases differ in timing, not loops
@pytest.mark.parametrize("during", ["chains", "snapshots"])
async def test_what_a_runner_freezes_during_the_copy_is_left_out(
    tmp_path: Path, during: str
) -> None:
    """Another runner freezes a session made after the copy started and makes a dataset of it,
    while the chains (or the snapshots) are copied: the copy is of the store as it was."""
    chains = await _fill(tmp_path / "source")
    late = "ses_made_during_the_copy"
    made: list[tuple[str, str]] = []

    def another_runner(_: str) -> None:
        if not made:
            with plain(tmp_path / "source") as connection:
                held = [(late, _trajectory(late))]
                made.append(_put_by_hand(connection, held, "late", "2027-01-01T00Z"))

    async with open_store(tmp_path / "source") as source:
        await _freeze_by_hand(source, chains[1])
        before = await _held(source)
        async with open_store(tmp_path / "copy") as destination:
            report = await copy_store(
                source,
                destination,
                on_chain=another_runner if during == "chains" else None,
                on_snapshot=another_runner if during == "snapshots" else None,
            )
            there = await _held(destination)
        after = await _held(source)
    assert made  # the runner did write
    assert (report.snapshots, report.datasets) == (2, 2)
    assert there == before
    assert [row.id for row, _ in after[0]][-1] == made[0][0]  # the source holds it


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the cases differ in checks, not loops
@pytest.mark.parametrize(
    ("held", "named"),
    [
        (("ses_gone", _trajectory("ses_gone")), "the session 'ses_gone'"),
        (
            ("acme/gone:run-1", _trajectory("acme/gone:run-1", "acme/gone")),
            "the imported source 'acme/gone'",
        ),
    ],
)
async def test_a_snapshot_whose_evidence_the_source_lacks_stops_the_copy(
    tmp_path: Path, held: tuple[str, bytes], named: str
) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source:
        await _freeze_by_hand(source, chains[1])
    with plain(tmp_path / "source") as connection:
        lacking, _ = _put_by_hand(connection, [held], "dangling", "2026-01-03T00Z")

    async with open_store(tmp_path / "source") as source, open_store(tmp_path / "copy") as dest:
        binds = f"snapshot {lacking}: its trajectory at position 0 binds {named}"
        with pytest.raises(StoreError, match=binds) as refused:
            await copy_store(source, dest)
        frozen, _ = await _held(dest)
    assert "which the source does not hold" in str(refused.value)
    assert "copy again into a new, empty destination" in str(refused.value)
    assert len(frozen) == 2  # the two before it, whole
    assert lacking not in [row.id for row, _ in frozen]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_dataset_naming_a_snapshot_made_while_copying_says_so(tmp_path: Path) -> None:
    """A dataset listed with a snapshot the listing missed (the order of the lists keeps this
    from a real runner; by hand it is written first): not blamed on an alteration."""
    chains = await _fill(tmp_path / "source")
    header, members = b'{"label":"late"}', [(chains[1], _trajectory(chains[1]))]
    snapshot_id = content_address(SNAPSHOT_PREFIX, header, [members[0][1]])
    content = msgspec.json.encode({"name": "early", "snapshots": [snapshot_id]})
    async with open_store(tmp_path / "source") as source:
        await SnapshotStore(source.backend).put_dataset(
            "early", content_address(DATASET_PREFIX, content), content, "2026-01-01T00Z"
        )

    def freeze_now(_: str) -> None:
        with plain(tmp_path / "source") as connection:
            connection.execute(
                "INSERT OR IGNORE INTO snapshots VALUES (?, ?, ?)", (snapshot_id, header, "now")
            )

    async with open_store(tmp_path / "source") as source, open_store(tmp_path / "copy") as dest:
        made_while = f"names snapshot {snapshot_id}, made while copying"
        with pytest.raises(StoreError, match=made_while) as refused:
            await copy_store(source, dest, on_chain=freeze_now)
    assert "restore" not in str(refused.value)
