"""A session records one end: a stop that arrives while its end is being committed leaves that
end as it was, instead of recording a second terminal status after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import SegmentEnded, SessionStatus
from envharness.runtime.session import SessionRunner
from envharness.store import read_store

pytestmark = pytest.mark.anyio


async def test_a_stop_while_the_end_commits_records_one_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = anyio.CancelScope()
    finish = SessionRunner._finish

    async def stopped_while_finishing(
        runner: SessionRunner, status: Any, *rest: Any, **options: Any
    ) -> Any:
        if status == "completed":
            stop.cancel()  # heard at the end's commit, after its records were made
        return await finish(runner, status, *rest, **options)

    monkeypatch.setattr(SessionRunner, "_finish", stopped_while_finishing)
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    scenario = Scenario(id="s", input=SyntheticScenarioInput(starting_total=0))
    async with harness:
        with stop:
            await harness.run(scenario, turns=2)
    assert stop.cancelled_caught
    store = await read_store(tmp_path)
    [info] = await store.sessions()
    payloads = [record.payload async for record in store.records(info.id)]
    ends = [p.status for p in payloads if isinstance(p, SessionStatus) and p.status != "running"]
    assert ends == ["completed"]
    assert [p.status for p in payloads if isinstance(p, SegmentEnded)] == ["completed"]
    assert info.status == "completed"
    assert (await store.verify()).ok
