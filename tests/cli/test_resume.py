"""``resume``: sessions and experiments continue from the command line, with the same code."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from envharness import AsyncEnvironmentHarness, EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from tests.cli._support import Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "agent=envharness.fixtures:SyntheticAgent"
START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=-9, target=50))


def stopped_session(store: Path) -> str:
    async def main() -> str:
        harness = AsyncEnvironmentHarness(
            store, environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
        )
        ids: list[str] = []
        two = anyio.Event()

        def progress(session_id: str, completed: int, planned: int) -> None:
            ids.append(session_id)
            if completed == 2:
                two.set()

        async with anyio.create_task_group() as group:
            group.start_soon(lambda: harness.run(START, turns=6, progress=progress))
            await two.wait()
            group.cancel_scope.cancel()
        return ids[0]

    return anyio.run(main)


def test_a_stopped_session_resumes_from_the_command_line(invoke: Invoke, store_path: Path) -> None:
    session_id = stopped_session(store_path)
    result = invoke("--store", store_path, "resume", session_id, SYNTHETIC, "--agent", AGENT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"resumed {session_id}: completed after 6 turns"
    assert invoke("--store", store_path, "verify").exit_code == 0


def test_different_code_is_refused_unless_declared(invoke: Invoke, store_path: Path) -> None:
    session_id = stopped_session(store_path)
    other = "agent=tests.cli.agents:PaddedAgent"
    refused = invoke("--store", store_path, "resume", session_id, SYNTHETIC, "--agent", other)
    assert refused.exit_code == 2
    assert "was recorded with different code: agent 'agent' was 'synthetic-agent@1'" in (
        refused.stderr
    )
    declared = invoke(
        "--store", store_path, "resume", session_id, SYNTHETIC, "--agent", other,
        "--declare-changes", "a better agent",
    )  # fmt: skip
    assert declared.exit_code in (0, 1), declared.stderr
    assert declared.stdout.startswith(f"resumed {session_id}:")


def test_what_cannot_resume_is_named(invoke: Invoke, store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
    )
    done = harness.run(START, turns=1)
    result = invoke("--store", store_path, "resume", done.id, SYNTHETIC, "--agent", AGENT)
    assert result.exit_code == 2
    assert f"error: session {done.id} cannot be resumed: it completed" in result.stderr
    missing = invoke("--store", store_path, "resume", done.id, SYNTHETIC)
    assert missing.exit_code == 2
    assert "resume needs the code that ran it" in missing.stderr


def test_a_stopped_experiment_resumes_from_the_command_line(
    invoke: Invoke, store_path: Path
) -> None:
    class Slow(SyntheticAgent):
        def act(self, observation: Any) -> dict[str, int]:
            time.sleep(0.002)
            return super().act(observation)

    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i, target=40))
        for i in range(3)
    ]
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"agent": Slow}, max_concurrency=1
    )
    experiment = harness.experiment("cli resume", scenarios, turns=30)
    experiment.start()
    while experiment.progress.running < 1:
        time.sleep(0.001)
    experiment.stop()
    result = invoke("--store", store_path, "resume", experiment.id, SYNTHETIC, "--agent", AGENT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"resumed {experiment.id}: 3 of 3 sessions completed"
