"""Experiments: scenarios x trials under one frozen configuration and one concurrency limit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    ConfigurationError,
    EnvironmentHarness,
    Scenario,
    ScenarioInputError,
    StoreError,
)
from envharness.api.experiments import Experiment
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import ExperimentCreated, ExperimentStatus, SessionCreated
from envharness.runtime.experiment import derive_seed
from envharness.store import read_store

SCENARIOS = [
    Scenario(id="negative-start", input=SyntheticScenarioInput(starting_total=-3)),
    Scenario(id="positive-start", input=SyntheticScenarioInput(starting_total=3)),
]


def harness_for(store: Path, agent: Any = SyntheticAgent, **options: Any) -> EnvironmentHarness:
    return EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": agent}, **options
    )


def test_the_readme_sweep_runs_every_scenario_and_trial(store_path: Path) -> None:
    harness = harness_for(store_path, max_concurrency=4)
    experiment = harness.experiment("synthetic sweep", SCENARIOS, trials=2, seed=42, turns=5)
    result = experiment.run()
    assert (result.completed, result.total) == (4, 4)
    assert [(s.scenario_id, s.trial) for s in result.sessions] == [
        ("negative-start", 0),
        ("negative-start", 1),
        ("positive-start", 0),
        ("positive-start", 1),
    ]
    for session in result.sessions:
        assert session.seed == derive_seed(42, session.scenario_id, session.trial)
        [created] = list(harness.records(session.result.id))[:1]
        assert isinstance(created.payload, SessionCreated)
        config = created.payload.config
        assert (config.experiment_id, config.trial, config.seed) == (
            result.id,
            session.trial,
            session.seed,
        )
    assert {info.experiment_id for info in harness.sessions()} == {result.id}
    assert harness.verify().ok


def test_the_configuration_is_recorded_once_in_the_experiments_own_chain(
    store_path: Path,
) -> None:
    result = harness_for(store_path).experiment("sweep", SCENARIOS, trials=3, turns=2).run()

    async def chain() -> list[Any]:
        store = await read_store(store_path)
        return [record.payload async for record in store.records(result.id)]

    created, running, finished = anyio.run(chain)
    assert isinstance(created, ExperimentCreated)
    assert [s.id for s in created.config.scenarios] == ["negative-start", "positive-start"]
    assert created.config.participants["agent"].implementation == "synthetic-agent@1"
    assert (created.config.trials, created.config.turns) == (3, 2)
    assert isinstance(running, ExperimentStatus)
    assert running.status == "running"
    assert finished == ExperimentStatus(status="completed", total=6, completed=6)


def test_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(42, "a", 0) == derive_seed(42, "a", 0)
    seeds = {
        derive_seed(seed, scenario, trial)
        for seed in (1, 2)
        for scenario in "ab"
        for trial in (0, 1)
    }
    assert len(seeds) == 8
    assert all(0 <= seed < 2**63 for seed in seeds)


def test_same_seed_and_deterministic_agents_give_identical_evidence(tmp_path: Path) -> None:
    def payloads(store: Path) -> list[bytes]:
        result = harness_for(store).experiment("sweep", SCENARIOS, trials=2, seed=7, turns=4).run()
        found = []
        for session in result.sessions:
            for record in harness_for(store).records(session.result.id):
                payload = record.payload
                if isinstance(payload, SessionCreated):
                    payload = msgspec.structs.replace(
                        payload,
                        config=msgspec.structs.replace(payload.config, experiment_id=None),
                    )
                if record.kind != "action.attempted":  # holds a wall-clock duration
                    found.append(msgspec.json.encode(payload))
        return found

    assert payloads(tmp_path / "a") == payloads(tmp_path / "b")


def test_sessions_run_concurrently_up_to_the_limit(store_path: Path) -> None:
    active = 0
    peak = 0
    lock = threading.Lock()

    class Slow:
        implementation = "slow@1"

        def act(self, observation: Any) -> dict[str, int]:
            nonlocal active, peak
            with lock:
                active += 1
                peak = max(peak, active)
            time.sleep(0.02)
            with lock:
                active -= 1
            return {"value": 0}

    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(6)
    ]
    result = (
        harness_for(store_path, Slow)
        .experiment("limited", scenarios, turns=3, max_concurrency=3)
        .run()
    )
    assert result.completed == 6
    assert peak == 3


class Sleepy:
    implementation = "sleepy@1"

    def act(self, observation: Any) -> dict[str, int]:
        time.sleep(0.01)
        return {"value": 0}


def two_of_four_running(store_path: Path) -> Experiment:
    """Four long sessions, two at a time, started and seen running."""
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(4)
    ]
    experiment = harness_for(store_path, Sleepy).experiment(
        "to stop", scenarios, turns=10_000, max_concurrency=2
    )
    assert experiment.progress.total == 4
    experiment.start()
    deadline = time.monotonic() + 10
    while experiment.progress.running < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert experiment.progress.running == 2
    return experiment


def test_progress_is_visible_and_stop_ends_every_session_stopped(store_path: Path) -> None:
    experiment = two_of_four_running(store_path)
    result = experiment.stop()
    assert result is not None
    assert (result.status, result.completed, result.stopped, result.total) == ("stopped", 0, 4, 4)
    assert experiment.stop() == result  # stopping twice is fine
    harness = harness_for(store_path)
    assert {info.status for info in harness.sessions()} == {"stopped"}
    assert harness.verify().ok


def test_a_stopped_experiment_lists_the_sessions_it_stopped(store_path: Path) -> None:
    """Sessions cancelled mid-run are in the result (so `run` prints them); those never
    started are counted stopped but have no session to list."""
    experiment = two_of_four_running(store_path)
    result = experiment.stop()
    assert result is not None
    stored = {info.id: info for info in harness_for(store_path).sessions()}
    assert len(stored) == 2
    assert {s.result.id for s in result.sessions} == set(stored)
    for session in result.sessions:
        assert session.result.status == "stopped"
        assert session.result.turns_completed == stored[session.result.id].turns_completed
    assert (result.stopped, experiment.progress.stopped) == (4, 2)


@pytest.mark.anyio
async def test_the_async_experiment_runs_under_both_backends(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
    )
    async with harness:
        experiment = harness.experiment("async sweep", SCENARIOS, trials=2, turns=3)
        result = await experiment.run()
    assert result.completed == 4
    with pytest.raises(ConfigurationError, match="was already run"):
        await experiment.run()


@pytest.mark.anyio
async def test_many_trials_start_only_as_many_tasks_as_may_run(store_path: Path) -> None:
    """A session's task is made when it may start, not all up front: 100,000 trials under a
    limit of two hold two session tasks, and a stop is answered between two starts."""

    class Slow:
        implementation = "slow@1"

        async def act(self, observation: Any) -> dict[str, int]:
            await anyio.sleep(0.01)
            return {"value": 0}

    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"agent": Slow}
    )
    async with harness, anyio.create_task_group() as group:
        experiment = harness.experiment(
            "many", SCENARIOS[:1], trials=100_000, turns=10_000, max_concurrency=2
        )
        results: list[Any] = []
        both_running = anyio.Event()

        def progress(session_id: str, turn: int, planned: int) -> None:
            if experiment.progress.running == 2:
                both_running.set()

        async def run() -> None:
            results.append(await experiment.run(progress=progress))

        before = len(anyio.get_running_tasks())
        group.start_soon(run)
        await both_running.wait()
        assert len(anyio.get_running_tasks()) - before < 50
        experiment.stop()
    assert (results[0].stopped, results[0].total, len(results[0].sessions)) == (
        100_000,
        100_000,
        2,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"scenarios": [SCENARIOS[0], SCENARIOS[0]]}, "scenario id 'negative-start' appears twice"),
        ({"trials": 0}, "trials must be a positive integer, not 0"),
        ({"trials": 2**63}, f"trials must be at most {2**63 - 1} (2**63 - 1), not {2**63}"),
        ({"turns": 2**64}, "turns must be at most"),
        ({"max_concurrency": 2**63}, "max_concurrency must be at most"),
        ({"trials": 2**62}, "2 scenarios x 4611686018427387904 trials is more sessions than"),
        ({"turns": -1}, "turns must be a positive integer, not -1"),
        ({"scenarios": []}, "has no scenarios"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive integer"),
        ({"name": " "}, "an experiment needs a name"),
    ],
)
def test_a_bad_experiment_is_refused_before_anything_is_recorded(
    store_path: Path, arguments: dict[str, Any], message: str
) -> None:
    options: dict[str, Any] = {"name": "bad", "scenarios": SCENARIOS, "turns": 2, **arguments}
    with pytest.raises(ConfigurationError) as caught:
        harness_for(store_path).experiment(options.pop("name"), options.pop("scenarios"), **options)
    assert message in str(caught.value)
    assert not (store_path / "evidence.sqlite3").exists()


def test_an_invalid_scenario_input_is_refused_up_front(store_path: Path) -> None:
    bad = Scenario(id="bad", input={"starting_total": "three"})
    with pytest.raises(ScenarioInputError, match="scenario 'bad'"):
        harness_for(store_path).experiment("x", [SCENARIOS[0], bad], turns=2)


def test_an_experiment_stopped_before_it_started_can_still_be_resumed(store_path: Path) -> None:
    experiment = harness_for(store_path).experiment("early", SCENARIOS, turns=2)
    experiment.aio.stop()
    with pytest.raises(ConfigurationError, match="stopped before it started"):
        experiment.run()
    result = experiment.resume()
    assert (result.completed, result.total) == (2, 2)


def _portal_threads() -> set[threading.Thread]:
    """The threads anyio runs a blocking portal's event loop in (named ``<backend>-portal-...``)."""
    return {thread for thread in threading.enumerate() if "-portal-" in thread.name}


@pytest.mark.parametrize("ending", ["run", "stop", "pause"])
def test_every_way_out_of_a_failed_run_stops_its_event_loop_thread(
    tmp_path: Path, ending: str
) -> None:
    """The store's error comes out of ``run()``/``stop()``/``pause()``, and the helper thread
    that ran the experiment is gone: nothing is left for the process to wait on at exit."""
    not_a_store = tmp_path / "evidence"
    not_a_store.write_text("a file, not a store directory")
    before = _portal_threads()
    experiment = harness_for(not_a_store).experiment("doomed", SCENARIOS, turns=2)
    if ending != "run":
        experiment.start()
    with pytest.raises(StoreError, match="is a file"):
        getattr(experiment, ending)()
    assert _portal_threads() - before == set()


FULL_DISK = """
import resource, signal, sys
from envharness import EnvironmentHarness, Scenario, StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput

# A real write failure: past this size a write fails (EFBIG) instead of killing the process.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
harness = EnvironmentHarness(
    sys.argv[1], environment=SyntheticEnvironment, agents={"agent": SyntheticAgent},
    max_concurrency=4,
)
scenarios = [
    Scenario(id=f"far-{i}", input=SyntheticScenarioInput(starting_total=-1000, target=1000))
    for i in range(4)
]
try:
    harness.experiment("fills the disk", scenarios, trials=2, turns=2000).run()
except StoreError as exc:
    print(f"StoreError: {exc}")
    raise SystemExit(3) from None
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_run_that_fills_the_disk_raises_the_stores_error_and_the_process_exits(
    store_path: Path,
) -> None:
    """Every running session meets the failed write at once; the caller gets the one store
    error (not a nested exception group), and the process exits instead of hanging."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(store_path)],
        capture_output=True,
        text=True,
        timeout=90,  # a hang, not a measure: it exits at once when it works
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("StoreError: "), done.stdout
    assert f"'{store_path}'" in done.stdout  # the store's own message, naming the store
