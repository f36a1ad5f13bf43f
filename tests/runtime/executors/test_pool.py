"""The process pool executor: sessions in worker processes, evidence through the driver."""

from __future__ import annotations

import os
import signal
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.contracts.agent import AgentReply
from envharness.contracts.budget import Budget
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticObservation,
    SyntheticScenarioInput,
)
from envharness.records import Cost, SegmentStarted
from envharness.runtime.executors import ProcessPoolExecutor, WorkerError
from envharness.runtime.executors import pool as pool_module
from envharness.store import read_store
from envharness.store.database import DATABASE_NAME
from tests.runtime.executors._agents import IN_A_WORKER
from tests.runtime.executors._evidence import evidence

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so that one open pool per backend serves every experiment here (a
    worker's start, a fresh Python importing envharness, is the cost these tests would pay)."""
    return str(request.param)


ON_ASYNCIO, ON_TRIO = (
    pytest.mark.parametrize("anyio_backend", [name], indirect=True, scope="module")
    for name in ("asyncio", "trio")
)
"""For the tests whose worth is in the workers more than in the driver's event loop: one
backend each, the two taken in turn (the pools of both are started anyway)."""


@pytest.fixture(scope="module")
async def pool(anyio_backend: str) -> AsyncIterator[ProcessPoolExecutor]:
    async with ProcessPoolExecutor(workers=2) as opened:
        yield opened


@pytest.fixture(scope="module")
async def lone_pool(anyio_backend: str) -> AsyncIterator[ProcessPoolExecutor]:
    """One worker: every session of an experiment in the same process."""
    async with ProcessPoolExecutor(workers=1) as opened:
        yield opened


SCENARIOS = [
    Scenario(id="down", input=SyntheticScenarioInput(starting_total=3)),
    Scenario(id="up", input=SyntheticScenarioInput(starting_total=-2)),
    Scenario(id="early", input=SyntheticScenarioInput(starting_total=0, target=2)),
]


SLOW_TURNS = 60


class SlowAgent:
    """Takes a while per turn in a pool worker for a session's first turns, so that a pause or
    a stop asked at turn 2 lands mid-session however loaded the machine; then it is quick, and
    so is a resumed segment (its first turn is not the session's)."""

    implementation = "slow-agent@1"

    def __init__(self) -> None:
        self.resumed: bool | None = None

    async def act(self, observation: SyntheticObservation) -> dict[str, int]:
        if self.resumed is None:
            self.resumed = observation.turn > 0
        if IN_A_WORKER and not self.resumed and observation.turn < SLOW_TURNS:
            await anyio.sleep(0.01)
        return {"value": 0}


def harness(store: Path, agent: Any = SyntheticAgent) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": agent}, max_concurrency=4
    )


async def nothing_recorded(store: Path) -> bool:
    if not (store / DATABASE_NAME).exists():
        return True
    return await (await read_store(store)).experiments() == []


async def test_the_pool_records_the_same_evidence_as_in_process(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    results = {}
    for name, executor in (("here", None), ("pool", pool)):
        run = harness(tmp_path / name).experiment(
            "sweep", SCENARIOS, turns=5, trials=2, seed=7, executor=executor
        )
        result = await run.run()
        assert (result.status, result.completed, result.total) == ("completed", 6, 6)
        results[name] = await evidence(tmp_path / name, result)
        report = await (await read_store(tmp_path / name)).verify()
        assert report.ok
        assert report.sessions == 7  # six sessions and the experiment's chain
    assert results["pool"] == results["here"]
    assert sum(len(chain) for chain in results["pool"]) > 6 * 10


@ON_TRIO
async def test_the_pool_reports_each_sessions_progress_and_result(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    seen: list[tuple[str, int, int]] = []
    run = harness(tmp_path / "s").experiment("sweep", SCENARIOS, turns=3, seed=1, executor=pool)
    result = await run.run(progress=lambda sid, done, planned: seen.append((sid, done, planned)))
    ids = {s.result.id for s in result.sessions}
    assert {sid for sid, _, _ in seen} == ids
    assert {(done, planned) for _, done, planned in seen} >= {(0, 3), (3, 3)}
    assert [s.result.ended_by for s in result.sessions] == ["turn_limit", "turn_limit", "done"]


@pytest.mark.parametrize("workers", [0, -1, True, 1.5, "2"])
def test_workers_must_be_a_positive_integer(workers: Any) -> None:
    with pytest.raises(ConfigurationError, match="workers must be a positive integer"):
        ProcessPoolExecutor(workers=workers)


def test_something_that_is_no_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ProcessPoolExecutor"):
        harness(tmp_path / "s").experiment("x", SCENARIOS, turns=1, executor="pool")  # type: ignore[arg-type]


async def test_a_lambda_factory_is_refused_by_name_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    refused = r"agent 'agent' \(.*<lambda>\) cannot be sent.*module level"
    with pytest.raises(ConfigurationError, match=refused):
        harness(tmp_path / "s", agent=lambda: SyntheticAgent()).experiment(
            "x", SCENARIOS, turns=1, executor=ProcessPoolExecutor(workers=1)
        )
    assert await nothing_recorded(tmp_path / "s")


def test_a_factory_of_the_script_being_run_is_refused(tmp_path: Path) -> None:
    scripted = type("ScriptAgent", (SyntheticAgent,), {"__module__": "__main__"})
    with pytest.raises(ConfigurationError, match=r"ScriptAgent is defined in the script"):
        harness(tmp_path / "s", agent=scripted).experiment(
            "x", SCENARIOS, turns=1, executor=ProcessPoolExecutor(workers=1)
        )


@ON_ASYNCIO
async def test_a_recipe_the_worker_cannot_import_is_refused_with_nothing_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ghost = types.ModuleType("envharness_ghost_module")
    ghost_agent = type("GhostAgent", (SyntheticAgent,), {"__module__": ghost.__name__})
    ghost.GhostAgent = ghost_agent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)
    run = harness(tmp_path / "s", agent=ghost_agent).experiment(
        "x", SCENARIOS, turns=1, executor=ProcessPoolExecutor(workers=1)
    )
    with pytest.raises(WorkerError, match="refused the experiment: the recipe did not load"):
        await run.run()
    assert await nothing_recorded(tmp_path / "s")


@ON_TRIO
async def test_a_worker_that_cannot_start_is_named_with_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "_ENTRY", "envharness_no_such_worker_module")
    run = harness(tmp_path / "s").experiment(
        "x", SCENARIOS, turns=1, executor=ProcessPoolExecutor(workers=1)
    )
    with pytest.raises(WorkerError) as raised:
        await run.run()
    message = str(raised.value)
    assert "process pool worker 0 did not start" in message
    assert "exited with code 1" in message
    assert "No module named envharness_no_such_worker_module" in message
    assert await nothing_recorded(tmp_path / "s")


@ON_ASYNCIO
async def test_pause_reaches_the_workers_and_the_resume_runs_in_them_too(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    store = tmp_path / "s"
    run = harness(store, agent=SlowAgent).experiment("x", SCENARIOS[:2], turns=100, executor=pool)

    def pause_once_started(session_id: str, done: int, planned: int) -> None:
        if done >= 2:
            run.pause()

    result = await run.run(progress=pause_once_started)
    assert result.status == "paused"
    assert {s.result.status for s in result.sessions} == {"paused"}
    assert all(0 < s.result.turns_completed < SLOW_TURNS for s in result.sessions)
    resumed = await run.resume()
    assert (resumed.status, resumed.completed) == ("completed", 2)
    opened = await read_store(store)
    assert (await opened.verify()).ok
    for session in resumed.sessions:
        records = [r async for r in opened.records(session.result.id)]
        segments = [r.payload for r in records if isinstance(r.payload, SegmentStarted)]
        assert [(s.segment, s.cause) for s in segments] == [(0, "start"), (1, "resume")]
        assert {s.runner.pid for s in segments}.isdisjoint({os.getpid()})  # both in workers


@ON_TRIO
async def test_stop_records_stopped_through_the_driver(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    store = tmp_path / "s"
    run = harness(store, agent=SlowAgent).experiment("x", SCENARIOS, turns=150, executor=pool)

    def stop_once_started(session_id: str, done: int, planned: int) -> None:
        if done >= 2:
            run.stop()

    result = await run.run(progress=stop_once_started)
    assert result.status == "stopped"
    opened = await read_store(store)
    for session in result.sessions:
        info = await opened.session(session.result.id)
        assert info.status == "stopped"
    assert (await opened.verify()).ok


class Spender:
    """Adds one each turn and says it cost 7 + 3 tokens."""

    implementation = "spender@1"

    def act(self, observation: Any) -> AgentReply:
        return AgentReply({"value": 1}, Cost(input_tokens=7, output_tokens=3))


@ON_ASYNCIO
async def test_the_experiment_budget_counts_what_the_workers_spend(
    tmp_path: Path, lone_pool: ProcessPoolExecutor
) -> None:
    """The driver counts the costs that pass through it; a worker's sessions also watch what
    they spend themselves, so one worker stops where in-process sessions stop."""
    endings = {}
    for name, executor in (("here", None), ("pool", lone_pool)):
        h = AsyncEnvironmentHarness(
            tmp_path / name, environment=SyntheticEnvironment, agents={"agent": Spender},
            max_concurrency=1,
        )  # fmt: skip
        run = h.experiment("x", SCENARIOS, turns=3, budget=Budget(tokens=45), executor=executor)
        result = await run.run()
        endings[name] = (
            result.status,
            [(s.result.status, s.result.reason, s.result.turns_completed) for s in result.sessions],
        )
    assert endings["pool"] == endings["here"]
    status, sessions = endings["pool"]
    assert status == "stopped"
    assert sessions[1] == (
        "stopped",
        "budget: the experiment used 50 tokens of a 45-token budget",
        2,
    )


class WorkerShyAgent(SyntheticAgent):
    """Cannot be created in a pool worker (a missing credential there, say)."""

    def __init__(self) -> None:
        if IN_A_WORKER:
            raise RuntimeError("no credentials on this machine")


@ON_TRIO
async def test_a_factory_that_fails_in_a_worker_is_a_configuration_error(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    run = harness(tmp_path / "s", agent=WorkerShyAgent).experiment(
        "x", SCENARIOS[:1], turns=1, executor=pool
    )
    with pytest.raises(ConfigurationError, match=r"WorkerShyAgent.*no credentials on this machine"):
        await run.run()
    [recorded] = await (await read_store(tmp_path / "s")).experiments()
    assert recorded.status == "stopped"  # resumable once the worker's machine is fixed


def ran_in(records: list[Any]) -> set[int]:
    return {
        record.payload.runner.pid
        for record in records
        if isinstance(record.payload, SegmentStarted) and record.payload.runner
    }


async def test_an_open_pool_keeps_its_workers_for_the_next_experiment(
    tmp_path: Path, lone_pool: ProcessPoolExecutor
) -> None:
    """Workers started once serve one experiment after another, the evidence unchanged, and a
    kept worker that dies meanwhile is replaced."""
    h = harness(tmp_path / "s")
    store = tmp_path / "s"
    runners: list[set[int]] = []
    chains: list[list[Any]] = []
    assert lone_pool.kept == 1  # waiting between experiments
    for _ in range(3):
        if len(runners) == 2:
            assert runners[0] == runners[1]  # the same process
            assert os.getpid() not in runners[0]
            assert chains[0] == chains[1]  # and the same evidence
            [doomed] = runners[0]
            os.kill(doomed, signal.SIGKILL)  # the kept worker dies while it waits
        result = await h.experiment("x", SCENARIOS, turns=2, seed=3, executor=lone_pool).run()
        assert (result.status, result.completed) == ("completed", len(SCENARIOS))
        assert lone_pool.kept == 1
        chains.append(await evidence(store, result))
        reader = await read_store(store)
        runners.append(set())
        for session in result.sessions:
            runners[-1] |= ran_in([record async for record in reader.records(session.result.id)])
    assert doomed not in runners[2]  # replaced, with the same evidence again
    assert chains[2] == chains[0]
    assert (await (await read_store(store)).verify()).ok


@ON_TRIO
async def test_closing_an_open_pool_stops_its_workers(tmp_path: Path) -> None:
    async with ProcessPoolExecutor(workers=1) as opened:
        with pytest.raises(ConfigurationError, match="this ProcessPoolExecutor is already open"):
            await opened.__aenter__()
        result = (
            await harness(tmp_path / "s")
            .experiment("x", SCENARIOS[:1], turns=1, executor=opened)
            .run()
        )
        reader = await read_store(tmp_path / "s")
        [pid] = ran_in([record async for record in reader.records(result.sessions[0].result.id)])
    assert opened.kept == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
