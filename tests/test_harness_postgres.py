"""The Python API recording into PostgreSQL (issue 14, item 5): ``AsyncEnvironmentHarness`` given
a ``postgresql://`` URL runs, resumes and runs experiments (here and in worker processes) with
the evidence the same seeds record into SQLite; ``envharness stop`` reaches its runs through the
database; what still needs a store directory is refused by name; no password is ever shown."""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import AsyncEnvironmentHarness, ConfigurationError, EnvironmentHarness, Scenario
from envharness.api import remote_control
from envharness.errors import StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.experiment import ExperimentResult
from envharness.store.control import ControlRequests
from envharness.store.locate import reading_store
from envharness.store.owners import this_process
from envharness.store.postgres.backend import PostgresBackend
from tests import _engines
from tests.runtime.executors._evidence import _held_still
from tests.store.postgres._support import password_role_on

pytestmark = pytest.mark.anyio

SCENARIOS = [
    Scenario(id=f"s{n}", input=SyntheticScenarioInput(starting_total=n, target=None))
    for n in range(3)
]
SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its user, so it is never checked, only
carried — and must never be shown."""


class NappingAgent(SyntheticAgent):
    """Yields to the loop on every action while ``nap`` is set, so a stop lands mid-run; the
    same implementation (so a resume accepts it) without naps once the test clears it."""

    implementation = "napping-synthetic@1"
    nap = 0.01

    async def act(self, observation: Any) -> dict[str, int]:  # type: ignore[override]
        if NappingAgent.nap:
            await anyio.sleep(NappingAgent.nap)
        return super().act(observation)


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "pgapi") as url:
        user = postgres_server.user
        yield url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)


def _harness(store: str | Path, agent: type[SyntheticAgent] = SyntheticAgent) -> Any:
    return AsyncEnvironmentHarness(store, environment=SyntheticEnvironment, agents={"a": agent})


async def _evidence(location: str | Path, session_ids: list[str], ids: dict[str, str]) -> Any:
    """The sessions' records, with ids and what varies between runs held still."""
    ids = ids | {session_id: f"session {n}" for n, session_id in enumerate(session_ids)}
    chains = []
    async with reading_store(location) as store:
        for session_id in session_ids:
            chains.append(
                [
                    (
                        (record.seq, record.kind, record.turn, record.participant),
                        _held_still(msgspec.json.decode(msgspec.json.encode(record.payload)), ids),
                    )
                    async for record in store.records(session_id)
                ]
            )
    return chains


async def _experiment_evidence(location: str | Path, result: ExperimentResult) -> Any:
    return await _evidence(
        location, [s.result.id for s in result.sessions], {result.id: "experiment"}
    )


async def test_a_run_records_into_postgresql_what_it_records_into_sqlite(
    database: str, tmp_path: Path
) -> None:
    assert f":{SECRET}@" in database  # carried, never checked: see SECRET
    here = await _harness(tmp_path / "sqlite").run(SCENARIOS[0], turns=3, seed=5)
    harness = _harness(database)
    there = await harness.run(SCENARIOS[0], turns=3, seed=5)

    recorded = await _evidence(database, [there.id], {})
    assert (there.status, there.turns_completed) == ("completed", 3)
    assert recorded == await _evidence(tmp_path / "sqlite", [here.id], {})
    assert (await harness.verify()).ok
    assert there.id in [info.id for info in await harness.sessions()]
    assert len([r async for r in harness.records(there.id)]) == len(recorded[0])
    shown = f"{harness!r} {there!r} {harness.store} {there.store}"
    assert SECRET not in shown
    assert str(there.store).startswith("postgresql://")


def test_the_blocking_harness_holds_the_database_open_across_runs(database: str) -> None:
    with EnvironmentHarness(
        database, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    ) as harness:
        first = harness.run(SCENARIOS[0], turns=2)
        second = harness.run(SCENARIOS[1], turns=2)
        listed = {info.id: info.status for info in harness.sessions()}
    assert (listed[first.id], listed[second.id]) == ("completed", "completed")
    assert SECRET not in f"{harness.store} {first!r}"


async def test_an_experiment_records_the_same_evidence_here_and_in_worker_processes(
    database: str, tmp_path: Path
) -> None:
    expected = await _harness(tmp_path / "sqlite").experiment("e", SCENARIOS, turns=2, seed=3).run()
    harness = _harness(database)
    here = await harness.experiment("e", SCENARIOS, turns=2, seed=3).run()
    pooled = await harness.experiment(
        "e", SCENARIOS, turns=2, seed=3, executor=ProcessPoolExecutor(workers=2)
    ).run()

    wanted = await _experiment_evidence(tmp_path / "sqlite", expected)
    assert (here.completed, pooled.completed) == (3, 3)
    assert await _experiment_evidence(database, here) == wanted
    assert await _experiment_evidence(database, pooled) == wanted
    assert (await harness.report(pooled.id)).id == pooled.id
    assert (await harness.verify()).ok


async def test_a_stop_asked_through_the_database_stops_a_run_that_resume_then_finishes(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_control, "POLL_INTERVAL_S", 0.02)
    monkeypatch.setattr(NappingAgent, "nap", 0.01)
    harness = _harness(database, NappingAgent)
    started = anyio.Event()
    seen: list[str] = []

    def progress(session_id: str, completed: int, planned: int) -> None:
        if not started.is_set():
            seen.append(session_id)
            started.set()

    outcome: list[Any] = []
    async with anyio.create_task_group() as group:

        async def running() -> None:
            outcome.append(await harness.run(SCENARIOS[1], turns=100, progress=progress))

        group.start_soon(running)
        await started.wait()
        requests = ControlRequests(PostgresBackend(database))
        asked = await requests.ask(seen[0], "stop", this_process(), "a test")

    stopped = outcome[0]
    assert (stopped.status, stopped.reason) == (
        "stopped",
        "stopped on request of a test; resume it to go on",
    )
    assert (await requests.get(asked.id)).taken_at is not None
    NappingAgent.nap = 0
    resumed = await harness.resume(stopped.id)
    assert (resumed.status, resumed.turns_completed) == ("completed", 100)
    assert (await harness.verify()).ok


async def test_an_empty_import_into_postgres_is_refused_by_name(database: str) -> None:
    sources = _harness(database).sources()
    with pytest.raises(
        ConfigurationError, match=r"nothing to import into 'acme/evals': the batch has no records"
    ) as refused:
        await sources.import_records("acme/evals", [])
    assert SECRET not in str(refused.value)


@pytest.fixture(scope="module")
def password_role(postgres_server: _engines.PostgresServer) -> tuple[str, str]:
    return password_role_on(postgres_server)


async def test_a_wrong_password_is_named_without_the_password(
    postgres_server: _engines.PostgresServer, password_role: tuple[str, str]
) -> None:
    role, _ = password_role
    wrong = f"wrong-{secrets.token_hex(8)}"
    url = f"postgresql://{role}:{wrong}@{postgres_server.host}:{postgres_server.port}/postgres"
    harness = _harness(url)
    with pytest.raises(StoreError) as caught:
        await harness.run(SCENARIOS[0], turns=1)
    message = str(caught.value)
    assert "password authentication failed" in message
    assert f"user {role!r}" in message
    told = "".join(traceback.format_exception(caught.value)) + repr(harness) + str(harness.store)
    assert wrong not in told
