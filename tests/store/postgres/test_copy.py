"""``copy_store``: SQLite to PostgreSQL and back, every digest checked, the evidence unchanged;
a non-empty destination and an altered source refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envharness.errors import StoreError
from envharness.records import Artifact, ExperimentStatus, SegmentEnded, SegmentStarted
from envharness.store import open_store
from envharness.store.owners import this_process
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.copy import copy_store
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


async def test_a_store_goes_to_postgresql_and_back_unchanged(database: str, tmp_path: Path) -> None:
    chains = await _fill(tmp_path / "source")
    async with open_store(tmp_path / "source") as source:
        originals = {chain: [row async for row in source.rows(chain)] for chain in chains}
        async with open_postgres_store(database) as middle:
            there = await copy_store(source, middle)
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
                back_report = await back.verify()
    assert (there.chains, there.records, there.blobs, there.artifacts) == (3, 20, 2, 1)
    assert again == there
    assert returned == originals  # every byte, every digest
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
