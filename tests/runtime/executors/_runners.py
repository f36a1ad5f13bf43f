"""Experiments at once through one executor, and which worker processes ran their sessions (as
each session's segments recorded)."""

from __future__ import annotations

from pathlib import Path

import anyio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import SegmentStarted
from envharness.runtime.executors.seam import Executor
from envharness.store import read_store

SCENARIOS = [
    Scenario(id=f"start-{total}", input=SyntheticScenarioInput(starting_total=total))
    for total in (-2, 0, 2, 4)
]


async def two_experiments_at_once(
    store: Path, executor: Executor, second: Executor | None = None
) -> None:
    """Experiments "first" and "second" of four sessions each, started together, the second
    through ``second`` when given."""
    harness = AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}, max_concurrency=4
    )

    async def one(name: str, through: Executor) -> None:
        run = harness.experiment(name, SCENARIOS, turns=3, executor=through)
        result = await run.run()
        assert (result.status, result.completed) == ("completed", len(SCENARIOS))

    async with harness, anyio.create_task_group() as group:
        group.start_soon(one, "first", executor)
        group.start_soon(one, "second", second or executor)


async def worker_pids(store: Path) -> dict[str, set[int]]:
    """The processes each experiment's sessions ran in, by experiment name (in the order the
    experiments were created)."""
    reader = await read_store(store)
    found: dict[str, set[int]] = {}
    for info in await reader.experiments():
        pids = found.setdefault(info.name, set())
        for session in await reader.sessions(experiment_id=info.id):
            async for record in reader.records(session.id):
                if isinstance(record.payload, SegmentStarted) and record.payload.runner:
                    pids.add(record.payload.runner.pid)
    return found
