"""Requests left in the store reach the runs of a harness in this process, as ``envharness
stop`` / ``pause`` in another process leave them (tests/cli/test_control.py runs that)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.api import remote_control
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import RunnerRef, SessionStatus
from envharness.store import read_store
from envharness.store.control import ControlRequest, ControlRequests
from envharness.store.owners import this_process

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0, target=None))


class NappingAgent(SyntheticAgent):
    """Yields to the loop on every action, so a long run leaves room for the watcher."""

    implementation = "napping-synthetic@1"

    async def act(self, observation: Any) -> dict[str, int]:  # type: ignore[override]
        await anyio.sleep(0.005)
        return super().act(observation)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_control, "POLL_INTERVAL_S", 0.02)


def harness_for(store: Path) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": NappingAgent}
    )


async def asked_while_running(
    store: Path,
    run: Callable[[Callable[[str, int, int], None]], Awaitable[Any]],
    verb: str,
    before: Callable[[str], Awaitable[None]] | None = None,
) -> tuple[Any, ControlRequest]:
    """Run ``run`` and, once its first turn is in, ask this process to ``verb`` it (after
    awaiting ``before``, given the session id)."""
    started = anyio.Event()
    target: list[str] = []

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed >= 1 and not started.is_set():
            target.append(session_id)
            started.set()

    outcome: list[Any] = []
    async with anyio.create_task_group() as group:

        async def running() -> None:
            outcome.append(await run(progress))

        group.start_soon(running)
        await started.wait()
        requests = ControlRequests(store)
        if before is not None:
            await before(target[0])
        request = await requests.ask(target[0], verb, this_process(), "a test")
    return outcome[0], await requests.get(request.id)


async def test_a_stop_request_stops_a_running_session_as_cancelling_it_does(
    store_path: Path,
) -> None:
    harness = harness_for(store_path)

    async def run(progress: Callable[[str, int, int], None]) -> Any:
        return await harness.run(START, turns=100_000, progress=progress)

    session, request = await asked_while_running(store_path, run, "stop")
    assert (session.status, session.reason) == (
        "stopped",
        "stopped on request of a test; resume it to go on",
    )
    assert 1 <= session.turns_completed < 100_000
    assert request.taken_at is not None
    assert request.asked_by == "a test"
    records = [r async for r in harness.records(session.id)]
    assert [r.payload.status for r in records if isinstance(r.payload, SessionStatus)] == [
        "running",
        "stopped",
    ]
    assert (await harness.verify()).ok


async def test_a_pause_request_pauses_a_continued_session_at_a_turn_boundary(
    store_path: Path,
) -> None:
    harness = harness_for(store_path)
    first = await harness.run(START, turns=1)

    async def more(progress: Callable[[str, int, int], None]) -> Any:
        return await harness.continue_(first.id, turns=100_000, progress=progress)

    session, request = await asked_while_running(store_path, more, "pause")
    assert (session.status, session.reason) == (
        "paused",
        "paused on request of a test; resume it to go on",
    )
    assert request.taken_at is not None
    assert session.turns_completed > first.turns_completed


async def test_a_pause_request_pauses_an_experiment_as_experiment_pause_does(
    store_path: Path,
) -> None:
    harness = harness_for(store_path)
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i, target=None))
        for i in range(3)
    ]
    experiment = harness.experiment("pausable", scenarios, turns=100_000, max_concurrency=1)
    started = anyio.Event()

    def progress(session_id: str, completed: int, planned: int) -> None:
        if completed >= 1:
            started.set()

    outcome: list[Any] = []
    async with anyio.create_task_group() as group:

        async def running() -> None:
            outcome.append(await experiment.run(progress=progress))

        group.start_soon(running)
        await started.wait()
        request = await ControlRequests(store_path).ask(
            experiment.id, "pause", this_process(), "a test"
        )
    assert outcome[0].status == "paused"
    assert [s.result.status for s in outcome[0].sessions] == ["paused"]
    reason = "paused on request of a test; resume it to go on"
    assert outcome[0].sessions[0].result.reason == reason
    assert (await (await read_store(store_path)).experiment(experiment.id)).reason == reason
    assert (await ControlRequests(store_path).get(request.id)).taken_at is not None


async def test_requests_for_other_runs_or_other_processes_are_left_alone(
    store_path: Path,
) -> None:
    """Asked before a pause that a later poll takes: the watcher saw them, and left them."""
    harness = harness_for(store_path)
    requests = ControlRequests(store_path)
    left: list[ControlRequest] = []

    async def asking(session_id: str) -> None:
        elsewhere = RunnerRef(host="another-host", pid=1)
        left.append(await requests.ask(session_id, "stop", elsewhere, "another host"))
        left.append(await requests.ask("ses_not_here", "stop", this_process(), "a test"))

    async def run(progress: Callable[[str, int, int], None]) -> Any:
        return await harness.run(START, turns=100_000, progress=progress)

    session, _ = await asked_while_running(store_path, run, "pause", before=asking)
    assert session.status == "paused"
    assert [(await requests.get(request.id)).pending for request in left] == [True, True]


async def test_a_request_left_over_from_an_earlier_run_is_not_taken(store_path: Path) -> None:
    """Asked of this process for a session that then ended on its own: a later continue of
    it here is not stopped by it (the pause asked during the continue is taken instead)."""
    harness = harness_for(store_path)
    first = await harness.run(START, turns=1)
    requests = ControlRequests(store_path)
    stale = await requests.ask(first.id, "stop", this_process(), "too late")

    async def more(progress: Callable[[str, int, int], None]) -> Any:
        return await harness.continue_(first.id, turns=100_000, progress=progress)

    session, _ = await asked_while_running(store_path, more, "pause")
    assert session.status == "paused"
    assert (await requests.get(stale.id)).pending
