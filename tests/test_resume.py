"""Resume: stopped, interrupted (even by kill -9) and paused sessions continue where they were."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    ConfigurationError,
    EnvironmentHarness,
    NotFoundError,
    Record,
    Scenario,
)
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import SegmentStarted

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=-4, target=100))


class Stepper(SyntheticAgent):
    implementation = "stepper@1"


def harness_for(store: Path, agent: Any = Stepper, **options: Any) -> EnvironmentHarness:
    return EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": agent, "b": SyntheticAgent}, **options
    )


def comparable(records: list[Record]) -> list[tuple[str, int | None, str | None, bytes]]:
    """What must be equal between an interrupted-and-resumed run and one that never stopped."""
    skipped = {"session.status", "segment.started", "segment.ended", "action.attempted"}
    return [
        (r.kind, r.turn, r.participant, msgspec.json.encode(r.payload))
        for r in records
        if r.kind not in skipped
    ]


def stopped_session(store: Path, turns: int, stop_after: int) -> str:
    """A session cancelled once ``stop_after`` turns are committed."""

    async def main() -> str:
        harness = AsyncEnvironmentHarness(
            store, environment=SyntheticEnvironment, agents={"a": Stepper, "b": SyntheticAgent}
        )
        done = anyio.Event()
        found: list[str] = []

        def progress(session_id: str, completed: int, planned: int) -> None:
            found.append(session_id)
            if completed == stop_after:
                done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(lambda: harness.run(START, turns=turns, seed=3, progress=progress))
            await done.wait()
            group.cancel_scope.cancel()
        return found[0]

    return anyio.run(main)


def test_a_stopped_session_resumes_after_its_last_complete_turn(tmp_path: Path) -> None:
    store = tmp_path / "resumed"
    session_id = stopped_session(store, turns=8, stop_after=3)
    harness = harness_for(store)
    [info] = harness.sessions()
    assert info.status == "stopped"
    resumed = harness.resume(session_id)
    assert (resumed.status, resumed.turns_completed) == ("completed", 8)
    records = list(harness.records(session_id))
    segments = [r.payload for r in records if isinstance(r.payload, SegmentStarted)]
    assert [(s.segment, s.cause, s.previous, s.turn) for s in segments] == [
        (0, "start", None, 0),
        (1, "resume", 0, info.turns_completed),
    ]
    outcome_turns = [r.turn for r in records if r.kind == "outcome"]
    assert outcome_turns == sorted(set(outcome_turns)) == list(range(1, 9))
    assert harness.verify().ok
    # What the turns did equals a run that never stopped. (The stopped turn's observations
    # were shown before the stop, so they are evidence too, and appear again when replayed.)
    straight = harness_for(tmp_path / "straight")
    whole = straight.run(START, turns=8, seed=3)
    results = {"action.executed", "outcome", "score", "finding"}
    assert [c for c in comparable(records) if c[0] in results] == [
        c for c in comparable(list(straight.records(whole.id))) if c[0] in results
    ]


def test_resuming_with_different_code_is_refused_unless_declared(tmp_path: Path) -> None:
    session_id = stopped_session(tmp_path, turns=6, stop_after=2)

    class Changed(SyntheticAgent):
        implementation = "stepper@2"

    with pytest.raises(ConfigurationError) as caught:
        harness_for(tmp_path, Changed).resume(session_id)
    assert "agent 'a' was 'stepper@1', is now 'stepper@2'" in str(caught.value)
    assert "declare_changes" in str(caught.value)
    resumed = harness_for(tmp_path, Changed).resume(session_id, declare_changes="fixed a typo")
    assert resumed.status == "completed"
    [_, segment] = [
        r.payload
        for r in harness_for(tmp_path).records(session_id)
        if isinstance(r.payload, SegmentStarted)
    ]
    assert segment.changes == (
        "agent 'a' was 'stepper@1', is now 'stepper@2'",
        "declared: fixed a typo",
    )


def test_completed_and_failed_sessions_do_not_resume(tmp_path: Path) -> None:
    harness = harness_for(tmp_path)
    done = harness.run(START, turns=1)
    with pytest.raises(ConfigurationError, match="cannot be resumed: it completed"):
        harness.resume(done.id)

    class Broken:
        implementation = "broken@1"

        def act(self, observation: Any) -> dict[str, int]:
            raise RuntimeError("boom")

    failed = harness_for(tmp_path, Broken).run(START, turns=1)
    with pytest.raises(ConfigurationError, match="cannot be resumed: it failed"):
        harness_for(tmp_path, Broken).resume(failed.id)


@pytest.mark.anyio
async def test_two_resumes_of_one_session_at_once_one_refuses(tmp_path: Path) -> None:
    session_id = await anyio.to_thread.run_sync(lambda: stopped_session(tmp_path, 50, 1))
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": Stepper, "b": SyntheticAgent}
    )
    outcomes: list[str] = []

    async def resume() -> None:
        try:
            outcomes.append((await harness.resume(session_id)).status)
        except ConfigurationError as exc:
            outcomes.append(str(exc))

    async with anyio.create_task_group() as group:
        group.start_soon(resume)
        group.start_soon(resume)
    assert "completed" in outcomes
    [refusal] = [o for o in outcomes if o != "completed"]
    assert "is being" in refusal or "cannot be resumed: it is running" in refusal
    assert (await harness.verify()).ok


@pytest.mark.anyio
async def test_a_resume_refuses_a_session_that_grew_while_it_was_read(tmp_path: Path) -> None:
    """The race behind two resumes at once: one reads the session's status, the other then
    plays the rest and commits it in one go; the first must refuse, not resume after it."""
    from envharness.runtime.resume import find_resume_point
    from envharness.store import open_store

    session_id = await anyio.to_thread.run_sync(lambda: stopped_session(tmp_path, 50, 1))
    harness = AsyncEnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"a": Stepper, "b": SyntheticAgent}
    )
    async with open_store(tmp_path) as store:
        stale = await store.session(session_id)  # read as the first resume reads it
    assert (await harness.resume(session_id)).status == "completed"  # the other one wins
    async with open_store(tmp_path) as store:

        async def as_read_before(session: str) -> Any:
            return stale

        store.session = as_read_before  # type: ignore[method-assign]
        with pytest.raises(ConfigurationError, match="is being run elsewhere: its chain grew"):
            await find_resume_point(store, session_id)
    assert (await harness.verify()).ok


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 4, 9])
def test_after_kill_9_the_session_is_interrupted_and_resumes_to_the_same_evidence(
    tmp_path: Path, kill_after: int
) -> None:
    store = tmp_path / "crashed"
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from envharness import EnvironmentHarness, Scenario
            from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
            from envharness.fixtures import SyntheticScenarioInput

            class Stepper(SyntheticAgent):
                implementation = "stepper@1"

            def progress(session_id, completed, planned):
                if completed == {kill_after}:
                    print(session_id, flush=True)
                    time.sleep(60)  # killed here, mid-run

            harness = EnvironmentHarness({str(store)!r}, environment=SyntheticEnvironment,
                                         agents={{"a": Stepper, "b": SyntheticAgent}})
            harness.run(Scenario(id="start",
                                 input=SyntheticScenarioInput(starting_total=-4, target=100)),
                        turns=12, seed=3, progress=progress)
            """
        )
    )
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    session_id = process.stdout.readline().strip()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    process.stdout.close()

    harness = harness_for(store)
    resumed = harness.resume(session_id)  # no lease to wait out: the owner is known dead
    assert (resumed.status, resumed.turns_completed) == ("completed", 12)
    records = list(harness.records(session_id))
    statuses = [r.payload.status for r in records if r.kind == "session.status"]  # type: ignore[union-attr]
    assert statuses == ["running", "interrupted", "running", "completed"]
    assert harness.verify().ok
    straight = harness_for(tmp_path / "straight")
    whole = straight.run(START, turns=12, seed=3)
    assert comparable(records)[1:] == comparable(list(straight.records(whole.id)))[1:]


def test_a_stopped_experiment_resumes_to_the_evidence_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    scenarios = [
        Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i, target=100))
        for i in range(3)
    ]

    class Slow(Stepper):
        def act(self, observation: Any) -> dict[str, int]:
            import time

            time.sleep(0.002)
            return super().act(observation)

    harness = harness_for(tmp_path / "resumed", Slow, max_concurrency=2)
    experiment = harness.experiment("sweep", scenarios, trials=2, seed=5, turns=30)
    experiment.start()
    while experiment.progress.running < 2:
        pass
    stopped = experiment.stop()
    assert stopped is not None
    assert stopped.status == "stopped"
    finished = experiment.resume()
    assert (finished.status, finished.completed, finished.total) == ("completed", 6, 6)
    assert harness.verify().ok

    straight = harness_for(tmp_path / "straight", Slow)
    whole = straight.experiment("sweep", scenarios, trials=2, seed=5, turns=30).run()
    results = {"action.executed", "outcome", "score", "finding"}

    def evidence(h: EnvironmentHarness, result: Any) -> list[Any]:
        return [
            [c for c in comparable(list(h.records(s.result.id))) if c[0] in results]
            for s in result.sessions
        ]

    assert [(s.scenario_id, s.trial, s.seed) for s in finished.sessions] == [
        (s.scenario_id, s.trial, s.seed) for s in whole.sessions
    ]
    assert evidence(harness, finished) == evidence(straight, whole)


def test_resuming_an_unknown_or_completed_experiment_is_refused(tmp_path: Path) -> None:
    harness = harness_for(tmp_path)
    with pytest.raises(NotFoundError, match="no experiment 'exp_nope'"):
        harness.resume_experiment("exp_nope")
    done = harness.experiment("done", [START], turns=1).run()
    with pytest.raises(ConfigurationError, match="cannot be resumed: it is completed"):
        harness.resume_experiment(done.id)


def test_an_experiment_resumes_by_a_unique_prefix_of_its_id(tmp_path: Path) -> None:
    """As `experiments show` takes a prefix, so does resume; the chain continued is the full
    id's (a prefix used to be reported as no experiment at all)."""
    harness = harness_for(tmp_path, max_concurrency=1)
    experiment = harness.experiment("sweep", [START], trials=2, turns=2_000)
    experiment.start()
    while experiment.progress.running < 1:
        pass
    experiment.stop()
    prefix = experiment.id[:8]
    with pytest.raises(NotFoundError, match="no experiment 'exp_nope'"):
        harness.resume_experiment("exp_nope")
    resumed = harness.resume_experiment(prefix)
    assert (resumed.id, resumed.completed) == (experiment.id, 2)
    assert {info.experiment_id for info in harness.sessions()} == {experiment.id}
    assert harness.verify().ok


class Sequential(SyntheticEnvironment):
    spec = dataclasses.replace(
        SyntheticEnvironment.spec, name="synthetic-sequential", turn_order="sequential"
    )


def stop_during(store: Path, harness: Any, *, turns: int, at: tuple[int, str], resume: bool) -> str:
    """Run (or resume) until participant ``at[1]`` is asked to act in turn ``at[0]``, then stop."""

    async def main() -> str:
        reached = anyio.Event()

        class Stopping(SyntheticAgent):
            implementation = "stepper@1"

            async def act(self, observation: Any) -> dict[str, int]:
                if len(observation.my_contributions) + 1 == at[0] and self.name == at[1]:
                    reached.set()
                    await anyio.sleep(10)
                return SyntheticAgent.act(self, observation)

        agents = {name: type(name, (Stopping,), {"name": name}) for name in ("a", "b", "c")}
        aio = AsyncEnvironmentHarness(store, environment=Sequential, agents=agents)
        ids: list[str] = []
        async with anyio.create_task_group() as group:
            if resume:
                group.start_soon(aio.resume, harness)
            else:
                group.start_soon(
                    lambda: aio.run(START, turns=turns, progress=lambda s, *_: ids.append(s))
                )
            await reached.wait()
            group.cancel_scope.cancel()
        return ids[0] if ids else harness

    return anyio.run(main)


def test_a_sequential_session_stopped_mid_turn_twice_resumes_where_it_was(tmp_path: Path) -> None:
    session_id = stop_during(tmp_path, None, turns=6, at=(3, "b"), resume=False)
    stop_during(tmp_path, session_id, turns=6, at=(5, "b"), resume=True)
    harness = EnvironmentHarness(
        tmp_path, environment=Sequential, agents={n: Stepper for n in ("a", "b", "c")}
    )
    assert harness.resume(session_id).turns_completed == 6
    segments = [
        r.payload for r in harness.records(session_id) if isinstance(r.payload, SegmentStarted)
    ]
    assert [s.turn for s in segments] == [0, 2, 4]  # never back to a turn already complete
    assert harness.verify().ok


def test_a_stopped_continuation_resumes_to_its_own_target(tmp_path: Path) -> None:
    harness = harness_for(tmp_path)
    session = harness.run(START, turns=3)

    class Slow(Stepper):
        async def act(self, observation: Any) -> dict[str, int]:
            await anyio.sleep(0.01)
            return SyntheticAgent.act(self, observation)

    async def continue_and_stop() -> None:
        aio = AsyncEnvironmentHarness(
            tmp_path, environment=SyntheticEnvironment, agents={"a": Slow, "b": SyntheticAgent}
        )
        with anyio.move_on_after(0.2):
            await aio.continue_(session.id, turns=100)

    anyio.run(continue_and_stop)
    assert harness_for(tmp_path).sessions()[0].status == "stopped"
    resumed = harness.resume(session.id)
    # Past the recorded plan of 3 turns, toward the continuation's 103, until the target.
    assert (resumed.status, resumed.turns_completed) == ("completed", 52)
    assert resumed.reason == "the environment reported done at turn 52"


def test_declared_changes_are_recorded_even_when_none_is_detected(tmp_path: Path) -> None:
    session_id = stopped_session(tmp_path, turns=4, stop_after=1)
    harness_for(tmp_path).resume(session_id, declare_changes="fixed resolve() in place")
    [_, segment] = [
        r.payload
        for r in harness_for(tmp_path).records(session_id)
        if isinstance(r.payload, SegmentStarted)
    ]
    assert segment.changes == ("declared: fixed resolve() in place",)


def test_an_experiment_resumed_with_different_code_is_refused(tmp_path: Path) -> None:
    harness = harness_for(tmp_path, max_concurrency=1)
    experiment = harness.experiment("sweep", [START], trials=3, turns=2_000)
    experiment.start()
    while experiment.progress.running < 1:
        pass
    experiment.stop()

    class Changed(SyntheticAgent):
        implementation = "stepper@2"

    with pytest.raises(ConfigurationError, match="agent 'a' was 'stepper@1', is now 'stepper@2'"):
        harness_for(tmp_path, Changed).resume_experiment(experiment.id)
    assert harness.resume_experiment(experiment.id).completed == 3
