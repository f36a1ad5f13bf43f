"""The public facade: the blocking and async harnesses, and the errors a caller can make."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
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
    EnvironmentSpec,
    RecordFilter,
    Scenario,
    ScenarioInputError,
    StoreLayoutError,
)
from envharness.fixtures import (
    SyntheticAction,
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
)

FIRST_RUN = Scenario(id="first-run", input=SyntheticScenarioInput(starting_total=0))


class IncrementAgent:
    implementation = "increment-agent@1"

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1}


class AsyncIncrementAgent:
    implementation = "async-increment-agent@1"

    async def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1}


def test_the_readme_example_runs_and_verifies(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": IncrementAgent}
    )
    session = harness.run(FIRST_RUN, turns=5)
    assert session.status == "completed"
    assert session.id.startswith("ses_")
    [info] = harness.sessions()
    assert (info.id, info.status, info.turns_completed) == (session.id, "completed", 5)
    assert harness.verify().ok


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("agent", [IncrementAgent, AsyncIncrementAgent])
def test_the_async_harness_runs_under_anyio_run(store_path: Path, backend: str, agent: Any) -> None:
    async def main() -> str:
        harness = AsyncEnvironmentHarness(
            store_path, environment=SyntheticEnvironment, agents={"alice": agent}
        )
        session = await harness.run(FIRST_RUN, turns=5)
        assert (await harness.verify()).ok
        return session.status

    assert anyio.run(main, backend=backend) == "completed"


def test_the_blocking_harness_works_inside_a_running_event_loop(store_path: Path) -> None:
    """Notebooks run code inside a loop; the portal gives the harness a loop of its own."""
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": IncrementAgent}
    )

    async def inside() -> str:
        return harness.run(FIRST_RUN, turns=1).status

    assert anyio.run(inside) == "completed"


def test_sessions_get_distinct_time_ordered_ids(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    ids = [harness.run(FIRST_RUN, turns=1).id for _ in range(3)]
    assert len(set(ids)) == 3
    assert [info.id for info in harness.sessions()] == ids


@pytest.mark.anyio
async def test_a_prepared_session_has_its_id_before_it_runs(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    prepared = harness.prepare(FIRST_RUN, turns=2)
    assert prepared.id.startswith("ses_")
    assert not await anyio.Path(store_path).exists()  # checked and named, nothing recorded yet
    session = await prepared.run()
    assert (session.id, session.status, session.turns_completed) == (prepared.id, "completed", 2)


@pytest.mark.anyio
async def test_a_prepared_session_paused_before_it_starts_ends_paused(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    prepared = harness.prepare(FIRST_RUN, turns=5)
    prepared.pause()
    session = await prepared.run()
    assert session.status == "paused"
    assert (await harness.resume(session.id)).status == "completed"


def test_a_prepared_session_refuses_bad_arguments_before_anything_runs(store_path: Path) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    with pytest.raises(ConfigurationError, match="turns must be a positive integer"):
        harness.prepare(FIRST_RUN, turns=0)
    assert not store_path.exists()


def test_the_blocking_harness_runs_async_work_on_its_own_loop(store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    session = harness.call(harness.aio.run, FIRST_RUN, turns=1)
    assert session.status == "completed"
    with harness:
        assert [info.id for info in harness.call(harness.aio.sessions)] == [session.id]


# -- bad input: a clear error before anything is recorded ---------------------------------------


def harness_for(store: Path, **overrides: Any) -> EnvironmentHarness:
    options: dict[str, Any] = {
        "environment": SyntheticEnvironment,
        "agents": {"alice": IncrementAgent},
    }
    options.update(overrides)
    return EnvironmentHarness(store, **options)


class OtherInput(msgspec.Struct):
    name: str


@pytest.mark.parametrize(
    ("scenario_input", "message"),
    [
        (
            SyntheticScenarioInput(starting_total="zero"),  # type: ignore[arg-type]
            "scenario 'bad': input does not match SyntheticScenarioInput: "
            "Expected `int`, got `str` - at `$.starting_total`",
        ),
        ({"target": 3}, "Object missing required field `starting_total`"),
        (
            OtherInput(name="x"),
            "scenario 'bad': input is a OtherInput, but the environment expects "
            "SyntheticScenarioInput",
        ),
    ],
)
def test_a_scenario_input_of_the_wrong_type_names_the_field(
    store_path: Path, scenario_input: Any, message: str
) -> None:
    harness = harness_for(store_path)
    with pytest.raises(ScenarioInputError) as caught:
        harness.run(Scenario(id="bad", input=scenario_input), turns=1)
    assert message in str(caught.value)
    assert not (store_path / "evidence.sqlite3").exists()


def test_a_dict_input_is_validated_and_converted(store_path: Path) -> None:
    session = harness_for(store_path).run(
        Scenario(id="from-json", input={"starting_total": 4}), turns=1
    )
    assert session.status == "completed"


def test_a_scenario_id_must_be_usable(store_path: Path) -> None:
    with pytest.raises(ScenarioInputError, match="scenario id 'has space' is not valid"):
        Scenario(id="has space", input=SyntheticScenarioInput(starting_total=0))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"agents": {}}, "agents is empty"),
        ({"agents": {"alice": IncrementAgent()}}, "pass the class (or a zero-argument factory)"),
        ({"environment": SyntheticEnvironment()}, "environment must be a class or factory"),
        ({"roles": {"bob": "agent"}}, "roles names ['bob'] that are not in agents"),
        ({"roles": {"alice": "judge"}}, "has role 'judge', but environment"),
        ({"action_timeout": 0}, "action_timeout must be positive"),
        ({"agents": {"": IncrementAgent}}, "participant name '' must be"),
    ],
)
def test_a_misconfigured_harness_says_what_to_fix(
    store_path: Path, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        harness_for(store_path, **overrides)
    assert message in str(caught.value)


def test_an_agent_without_implementation_is_refused_before_the_session(store_path: Path) -> None:
    class Anonymous:
        def act(self, observation: Any) -> dict[str, int]:
            return {"value": 1}

    harness = harness_for(store_path, agents={"alice": Anonymous})
    with pytest.raises(ConfigurationError, match="has no `implementation` string"):
        harness.run(FIRST_RUN, turns=1)


def test_an_environment_without_a_spec_is_refused(store_path: Path) -> None:
    class Specless:
        pass

    with pytest.raises(ConfigurationError, match="has no `spec` EnvironmentSpec"):
        harness_for(store_path, environment=Specless)


def test_multiple_roles_need_an_explicit_roster(store_path: Path) -> None:
    class TwoRoles(SyntheticEnvironment):
        spec = EnvironmentSpec(
            name="two-roles",
            version="1",
            input_type=SyntheticScenarioInput,
            action_type=SyntheticAction,
            roles=("a", "b"),
        )

    with pytest.raises(ConfigurationError, match=r"participant 'alice' needs a role"):
        harness_for(store_path, environment=TwoRoles)
    harness = harness_for(store_path, environment=TwoRoles, roles={"alice": "b"})
    session = harness.run(FIRST_RUN, turns=1)
    assert session.status == "completed", session.reason


@pytest.mark.parametrize("turns", [0, -1, 1.5, True])
def test_turns_must_be_a_positive_integer(store_path: Path, turns: Any) -> None:
    with pytest.raises(ConfigurationError, match="turns must be a positive integer"):
        harness_for(store_path).run(FIRST_RUN, turns=turns)


def test_a_store_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-directory"
    path.write_text("keep me")
    with pytest.raises(StoreLayoutError, match="is a file; a store is a directory"):
        harness_for(path).run(FIRST_RUN, turns=1)
    assert path.read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.parametrize("opened", [False, True], ids=["plain", "with-harness"])
def test_ctrl_c_in_a_blocking_run_stops_the_session_and_keeps_the_evidence(
    tmp_path: Path, opened: bool
) -> None:
    script = tmp_path / "long_run.py"
    store = tmp_path / "store"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from envharness import EnvironmentHarness, Scenario
            from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput

            class Slow:
                implementation = "slow@1"
                def act(self, observation):
                    if observation.turn == 1:
                        print("acting", flush=True)
                    time.sleep(0.05)
                    return {{"value": 1}}

            harness = EnvironmentHarness({str(store)!r}, environment=SyntheticEnvironment,
                                         agents={{"alice": Slow}})
            scenario = Scenario(id="long", input=SyntheticScenarioInput(starting_total=0))
            try:
                if {opened!r}:
                    with harness:
                        harness.run(scenario, turns=10_000)
                else:
                    harness.run(scenario, turns=10_000)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                raise SystemExit(130)
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "acting"
    time.sleep(0.3)
    os.kill(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "interrupted" in stdout
    harness = harness_for(store)
    [info] = harness.sessions()
    assert info.status == "stopped"
    assert info.turns_completed >= 1
    assert harness.verify().ok


def test_a_factory_that_raises_is_a_setup_error(store_path: Path) -> None:
    def no_credentials() -> IncrementAgent:
        raise KeyError("MODEL_API_KEY")

    harness = harness_for(store_path, agents={"alice": no_credentials})
    with pytest.raises(ConfigurationError) as caught:
        harness.run(FIRST_RUN, turns=1)
    assert "agent 'alice': creating it with " in str(caught.value)
    assert "raised KeyError: 'MODEL_API_KEY'" in str(caught.value)
    assert not (store_path / "evidence.sqlite3").exists()


def test_progress_reports_the_session_id_before_the_first_turn(store_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    session = harness_for(store_path).run(FIRST_RUN, turns=2, progress=lambda *a: calls.append(a))
    assert calls == [(session.id, 0, 2), (session.id, 1, 2), (session.id, 2, 2)]


@pytest.mark.anyio
async def test_an_open_harness_shares_one_writer_across_concurrent_sessions(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envharness.store.journal import Journal

    transactions = 0
    original = Journal._transaction

    def counting(self: Journal, batch: Any) -> None:
        nonlocal transactions
        transactions += 1
        original(self, batch)

    monkeypatch.setattr(Journal, "_transaction", counting)
    harness = AsyncEnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"alice": AsyncIncrementAgent}
    )
    sessions = []

    async def one() -> None:
        sessions.append(await harness.run(FIRST_RUN, turns=20))

    async with harness, anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(one)
    assert len(sessions) == 8
    infos = await harness.sessions()
    assert [info.status for info in infos] == ["completed"] * 8
    # 8 sessions x (20 turns + start + end) = 176 appends, committed in far fewer transactions.
    assert transactions < 176 / 2
    assert (await harness.verify()).ok


def test_a_blocking_harness_used_as_a_context_keeps_one_loop(store_path: Path) -> None:
    with harness_for(store_path) as harness:
        first = harness.run(FIRST_RUN, turns=1)
        second = harness.run(FIRST_RUN, turns=1)
        assert [info.id for info in harness.sessions()] == [first.id, second.id]
    with pytest.raises(ConfigurationError, match="already open"), harness, harness:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_with_two_async_participants_stops_the_session(tmp_path: Path, backend: str) -> None:
    script = tmp_path / "two.py"
    store = tmp_path / "store"
    script.write_text(
        textwrap.dedent(
            f"""
            import anyio
            from envharness import AsyncEnvironmentHarness, Scenario
            from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput

            class Slow:
                implementation = "slow@1"
                async def act(self, observation):
                    if observation.turn == 1:
                        print("acting", flush=True)
                    await anyio.sleep(0.05)
                    return {{"value": 1}}

            async def main():
                harness = AsyncEnvironmentHarness({str(store)!r},
                    environment=SyntheticEnvironment, agents={{"alice": Slow, "bob": Slow}})
                await harness.run(
                    Scenario(id="long", input=SyntheticScenarioInput(starting_total=0)),
                    turns=10_000)

            try:
                anyio.run(main, backend={backend!r})
            except KeyboardInterrupt:
                raise SystemExit(130)
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "acting"
    os.kill(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    harness = harness_for(store)
    [info] = harness.sessions()
    assert info.status == "stopped"
    # asyncio turns Ctrl-C into cancelling the main task; trio raises it where the loop was.
    assert info.reason in ("interrupted by the user (Ctrl-C)", "the run was cancelled")
    assert harness.verify().ok


def test_a_misspelt_input_field_is_named_not_dropped(store_path: Path) -> None:
    with pytest.raises(ScenarioInputError) as caught:
        harness_for(store_path).run(
            Scenario(id="typo", input={"starting_total": 0, "traget": 5}), turns=1
        )
    assert "input field 'traget' is not a field of SyntheticScenarioInput" in str(caught.value)
    assert "did you mean 'target'?" in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": ""}, "EnvironmentSpec name must be a non-empty string"),
        ({"version": 2}, "EnvironmentSpec version must be a non-empty string"),
        ({"input_type": "SyntheticScenarioInput"}, "input_type must be a type"),
        (
            {"turn_order": "random"},
            "turn_order must be 'simultaneous', 'sequential' or 'environment'",
        ),
        ({"invalid_actions": "ignore"}, "invalid_actions must be 'fail' or 'block'"),
        ({"roles": ()}, "roles must name at least one role"),
    ],
)
def test_a_bad_environment_spec_says_what_to_fix(fields: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "name": "x",
        "version": "1",
        "input_type": SyntheticScenarioInput,
        **fields,
    }
    with pytest.raises(ConfigurationError) as caught:
        EnvironmentSpec(**arguments)
    assert message in str(caught.value)


def test_blocking_records_are_paged_in_order(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envharness.api.blocking as harness_module

    monkeypatch.setattr(harness_module, "RECORDS_PAGE", 7)
    harness = harness_for(store_path)
    session = harness.run(FIRST_RUN, turns=6)
    records = list(harness.records(session.id))
    assert [r.seq for r in records] == list(range(len(records)))
    assert len(records) > 21
    limited = list(harness.records(session.id, RecordFilter(after=2, limit=10)))
    assert [r.seq for r in limited] == list(range(3, 13))
    outcomes = list(harness.records(session.id, RecordFilter(kinds=("outcome",))))
    assert [r.turn for r in outcomes] == [1, 2, 3, 4, 5, 6]
