"""An experiment's sessions leave their last commit to the experiment: a session returns as soon
as its end is handed to the journal, and the experiment lists it only once that commit is done
(a failed commit fails the experiment, as the session's own wait did)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.errors import StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.runtime.session import SessionRunner
from envharness.store import read_store
from envharness.store.journal import Journal

pytestmark = pytest.mark.anyio

SCENARIO = Scenario(id="s", input=SyntheticScenarioInput(starting_total=0, target=10**9))


def _holds_sessions(batch: list[Any]) -> bool:
    return any(row.session_id.startswith("ses_") for request in batch for row in request.rows)


def _harness(store: Path) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )


def _held_back(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, anyio.Event]:
    """Sessions' commits wait for the returned gate (in the writer's thread: the event loop
    goes on); the returned event is set once a session's runner has returned."""
    gate = threading.Event()
    commit = Journal._commit

    def gated(journal: Journal, batch: list[Any]) -> None:
        if _holds_sessions(batch):
            gate.wait(10)
        commit(journal, batch)

    returned = anyio.Event()
    run = SessionRunner.run

    async def noted(runner: SessionRunner) -> Any:
        result = await run(runner)
        returned.set()
        return result

    monkeypatch.setattr(Journal, "_commit", gated)
    monkeypatch.setattr(SessionRunner, "run", noted)
    return gate, returned


async def test_a_session_is_listed_only_once_its_last_commit_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, returned = _held_back(monkeypatch)
    harness = _harness(tmp_path)
    experiment = harness.experiment("gated", [SCENARIO], turns=3)
    results = []

    async def run_it() -> None:
        results.append(await experiment.run())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run_it)
            await returned.wait()  # the session returned, its commit still held back
            assert experiment.progress.completed == 0
            gate.set()
    [result] = results
    assert (result.status, result.completed) == ("completed", 1)
    assert [session.result.status for session in result.sessions] == ["completed"]


async def test_a_failed_last_commit_fails_the_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transaction = Journal._transaction

    def refused(journal: Journal, batch: Any) -> None:
        if _holds_sessions(batch):
            raise StoreError("the disk said no")
        transaction(journal, batch)

    monkeypatch.setattr(Journal, "_transaction", refused)
    harness = _harness(tmp_path)
    with pytest.raises(StoreError, match="the disk said no"):
        await harness.experiment("refused", [SCENARIO], turns=3).run()
    [info] = await (await read_store(tmp_path)).experiments()
    assert info.status == "stopped"  # its end recorded all the same: never left "running"
    assert info.reason == "stopped by StoreError: the disk said no"


async def test_a_stop_while_the_last_commits_are_awaited_records_the_experiment_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, returned = _held_back(monkeypatch)
    harness = _harness(tmp_path)
    experiment = harness.experiment("stopped while settling", [SCENARIO], turns=3)
    results = []

    async def run_it() -> None:
        results.append(await experiment.run())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run_it)
            await returned.wait()
            await anyio.wait_all_tasks_blocked()  # only the last commit is awaited now
            experiment.stop()
            await anyio.wait_all_tasks_blocked()
            gate.set()
    [result] = results
    assert result.status == "stopped"
    store = await read_store(tmp_path)
    [info] = await store.experiments()
    assert info.status == "stopped"
    assert (await store.verify()).ok  # no position left empty by an end never handed over


async def test_a_session_that_leaves_its_commits_keeps_its_slot_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks: set[object] = set()
    run = SessionRunner.run

    async def noted(runner: SessionRunner) -> Any:
        tasks.add(anyio.get_current_task().id)
        return await run(runner)

    monkeypatch.setattr(SessionRunner, "run", noted)
    harness = _harness(tmp_path)
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(12)
    ]
    result = await harness.experiment("kept", scenarios, turns=2, max_concurrency=2).run()
    assert result.completed == 12
    assert len(tasks) == 2  # each player went on in its slot: no task handed it on
