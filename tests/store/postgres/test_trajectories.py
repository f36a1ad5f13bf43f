"""Trajectories, snapshots and datasets of a PostgreSQL store (issue 14, scope 5): the same
evidence gives the same bytes as on the SQLite store it was copied from — trajectories,
snapshot ids and exports, dataset ids and rows — and bad input is named as on SQLite."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    CheckpointRef,
    ConfigurationError,
    EnvironmentHarness,
    Scenario,
)
from envharness.errors import NotFoundError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store import read_store
from envharness.store.locate import reading_store
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.copy import copy_store
from envharness.trajectories import (
    AdmissionError,
    EvidenceMismatchError,
    export_snapshot,
    verify_snapshot,
)
from tests import _engines
from tests.trajectories._support import MISS, REACH

ENTITLED = "own evaluation data"
SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its user, so it is only carried — and must
never be shown."""


def _async(store: Path | str) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )


def _blocking(store: Path | str) -> EnvironmentHarness:
    return EnvironmentHarness(store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent})


async def _copy(source: Path, url: str) -> None:
    async with open_postgres_store(url) as destination:
        await copy_store(await read_store(source), destination)


@pytest.fixture(scope="module")
def stores(
    postgres_server: _engines.PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str, list[str]]]:
    """A SQLite store with a passed and a failed session, the database it was copied into
    (its URL carrying a password), and the two session ids."""
    sqlite = tmp_path_factory.mktemp("pgtraj") / "store"
    harness = _blocking(sqlite)
    ids = [harness.run(REACH, turns=5).id, harness.run(MISS, turns=2).id]
    with _engines.fresh_database(postgres_server, "pgtraj") as url:
        user = postgres_server.user
        url = url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)
        anyio.run(_copy, sqlite, url)
        yield sqlite, url, sorted(ids)


@pytest.mark.anyio
async def test_a_trajectory_read_from_postgres_is_the_one_read_from_sqlite(
    stores: tuple[Path, str, list[str]],
) -> None:
    sqlite, url, ids = stores
    on_sqlite, on_postgres = _async(sqlite), _async(url)
    for session_id in ids:
        expected = msgspec.json.encode(await on_sqlite.trajectory(session_id))
        assert msgspec.json.encode(await on_postgres.trajectory(session_id)) == expected
        assert msgspec.json.encode(await on_postgres.trajectory(session_id[:-3])) == expected


@pytest.mark.anyio
async def test_snapshots_and_datasets_get_the_same_ids_exports_and_rows_on_both(
    stores: tuple[Path, str, list[str]],
) -> None:
    sqlite, url, ids = stores
    on_sqlite, on_postgres = _async(sqlite), _async(url)
    frozen = await on_sqlite.snapshot(ids, label="both", entitlement=ENTITLED)
    copied = await on_postgres.snapshot(ids, label="both", entitlement=ENTITLED)
    snapshot_id = frozen.metadata.id
    assert copied == frozen.__class__(
        metadata=msgspec.structs.replace(frozen.metadata, created_at=copied.metadata.created_at),
        trajectories=frozen.trajectories,
    )
    assert snapshot_id in [found.id for found in await on_postgres.snapshots()]

    exported = []
    for location in (sqlite, url):
        async with reading_store(location) as store:
            assert (await verify_snapshot(store, snapshot_id[:10])).id == snapshot_id
            exported.append([line async for line in export_snapshot(store, snapshot_id)])
    assert exported[1][1:] == exported[0][1:]  # the first line holds each one's created_at
    through_the_api = [line async for line in on_postgres.sources().export_snapshot(snapshot_id)]
    assert [line.encode() + b"\n" for line in through_the_api] == exported[1]
    assert len(exported[0]) > 2

    dataset = await on_sqlite.create_dataset("both-sft", [snapshot_id])
    assert await on_postgres.create_dataset("both-sft", [snapshot_id]) == msgspec.structs.replace(
        dataset, created_at=(await on_postgres.dataset("both-sft")).created_at
    )
    assert (await on_postgres.dataset(dataset.id)).name == "both-sft"
    assert [found.id for found in await on_postgres.datasets()] == [dataset.id]
    rows = [
        [row async for row in harness.dataset_rows(dataset.id)]
        for harness in (on_sqlite, on_postgres)
    ]
    assert rows[1] == rows[0]
    assert {row.session_id for row in rows[0]} == set(ids)


@pytest.mark.anyio
async def test_runners_freezing_the_same_selection_at_once_get_the_one_snapshot(
    stores: tuple[Path, str, list[str]],
) -> None:
    _, url, ids = stores
    harness = _async(url)
    label = f"at once {secrets.token_hex(4)}"
    snapshots: set[str] = set()
    datasets: set[str] = set()

    async def freeze_then_name() -> None:
        snapshot = await harness.snapshot(ids, label=label, entitlement=ENTITLED)
        snapshots.add(snapshot.metadata.id)
        datasets.add((await harness.create_dataset(label, [snapshot.metadata.id])).id)

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(freeze_then_name)

    assert len(snapshots) == len(datasets) == 1
    listed = [found.id for found in await harness.snapshots()]
    assert listed.count(snapshots.pop()) == 1
    assert [found.name for found in await harness.datasets()].count(label) == 1


def test_a_session_recorded_into_postgres_projects_and_freezes_itself(
    stores: tuple[Path, str, list[str]],
) -> None:
    _, url, _ = stores
    harness = _blocking(url)
    session = harness.run(REACH, turns=5)

    trajectory = session.trajectory()
    snapshot = session.snapshot(label="one", entitlement=ENTITLED)

    assert SECRET not in str(session.store)
    assert trajectory == harness.trajectory(session.id)
    assert (trajectory.termination.cause, trajectory.outcome.passed) == ("done", True)
    assert snapshot.trajectories == (trajectory,)
    assert harness.snapshot([session.id], label="one", entitlement=ENTITLED).metadata.id == (
        snapshot.metadata.id
    )


@pytest.mark.anyio
async def test_bad_input_on_postgres_is_named(stores: tuple[Path, str, list[str]]) -> None:
    _, url, ids = stores
    harness = _async(url)
    with pytest.raises(NotFoundError, match="ses_nope"):
        await harness.trajectory("ses_nope")
    with pytest.raises(NotFoundError, match="no snapshot 'snp_ffffffff'"):
        async with reading_store(url) as store:
            await verify_snapshot(store, "snp_ffffffff")
    with pytest.raises(ConfigurationError, match="is not a snapshot id"):
        await harness.create_dataset("bad", ["xyz"])
    with pytest.raises(NotFoundError, match="no dataset 'nope'"):
        await harness.dataset("nope")
    with pytest.raises(NotFoundError, match="no records of source 'tool/run'"):
        await harness.trajectory("tool/run:episode-1")
    with pytest.raises(ConfigurationError, match="session_ids must be a list"):
        await harness.snapshot(ids[0])  # type: ignore[arg-type]

    unentitled = await harness.snapshot(ids, label="no training rights")
    with pytest.raises(AdmissionError) as refused:
        await harness.create_dataset("unentitled", [unentitled.metadata.id])
    assert {refusal.condition for refusal in refused.value.refusals} == {"training-entitled"}
    entitled = await harness.snapshot(ids, label="taken", entitlement=ENTITLED)
    await harness.create_dataset("taken", [entitled.metadata.id])
    with pytest.raises(ConfigurationError, match="already exists with other snapshots"):
        await harness.create_dataset("taken", [entitled.metadata.id], reward="turns")
    sources = harness.sources()
    assert await sources.health() == []
    assert await sources.problems() == {}
    assert await sources.trajectories() == []
    with pytest.raises(NotFoundError, match="no source 'acme/evals'"):
        await sources.health("acme/evals")


def test_altered_evidence_on_postgres_is_refused_before_a_snapshot_is_written(
    stores: tuple[Path, str, list[str]], postgres_server: _engines.PostgresServer
) -> None:
    sqlite, _, ids = stores
    with _engines.fresh_database(postgres_server, "pgtrajbad") as url:
        anyio.run(_copy, sqlite, url)
        harness = _blocking(url)
        snapshot = harness.snapshot(ids, entitlement=ENTITLED)
        before = [found.id for found in harness.snapshots()]  # with those copied from SQLite
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("ALTER TABLE records DISABLE TRIGGER USER")
            connection.execute(
                "UPDATE records SET participant = 'mallory' WHERE session_id = %s AND seq = 3",
                (ids[0],),
            )

        async def export() -> list[bytes]:
            async with reading_store(url) as store:
                return [line async for line in export_snapshot(store, snapshot.metadata.id)]

        with pytest.raises(EvidenceMismatchError, match=f"{ids[0]}: record seq 3"):
            anyio.run(export)
        with pytest.raises(EvidenceMismatchError, match="nothing was frozen"):
            harness.snapshot(ids, label="after the change")
        assert snapshot.metadata.id in before
        assert [found.id for found in harness.snapshots()] == before


START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=5))
_BY_ID_OR_TIME = frozenset({"session.created", "branch", "action.attempted"})


def _branched(
    store: Path | str,
) -> tuple[list[tuple[str, int | None, Any]], tuple[Any, Any], CheckpointRef]:
    """Run, checkpoint, branch with an intervention and continue both, as a user would:
    the branch's records (kind, turn, payload, ids aside), the comparison of the two, and
    the checkpoint."""
    harness = _blocking(store)
    session = harness.run(START, turns=3)
    checkpoint = harness.checkpoint(session)
    assert harness.checkpoints(session) == [checkpoint]
    child = harness.branch(
        checkpoint, intervention={"kind": "reset-total", "value": -4}, reason="what if"
    )
    assert child.status == "paused"
    assert harness.continue_(child, turns=3).turns_completed == 6
    assert harness.continue_(session, turns=3).turns_completed == 6
    assert [c.session_id for c in harness.lineage(session).children] == [child.id]
    assert harness.verify().ok
    records = [
        # session.created and branch name the parent by id; an attempt records its time
        (record.kind, record.turn, None if record.kind in _BY_ID_OR_TIME else record.payload)
        for record in harness.records(child.id)
    ]
    diff = harness.compare(session.id, child.id)
    return records, (diff.turns_compared, diff.scores), checkpoint


def test_a_checkpoint_and_a_branch_on_postgres_record_what_they_record_on_sqlite(
    stores: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    on_sqlite, compared, sqlite_checkpoint = _branched(tmp_path / "store")
    _, url, _ = stores

    on_postgres, compared_there, checkpoint = _branched(url)

    assert msgspec.json.encode(on_postgres) == msgspec.json.encode(on_sqlite)
    assert compared_there == compared
    assert isinstance(checkpoint.store, str)
    assert checkpoint.store.startswith("postgresql://")
    assert SECRET not in checkpoint.store
    with pytest.raises(ConfigurationError, match="is not in the store at 'postgresql://") as bad:
        _blocking(url).branch(sqlite_checkpoint, intervention={"kind": "reset-total"})
    assert SECRET not in str(bad.value)
