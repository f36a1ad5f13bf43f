"""ProcessEnvironment end to end: the reference programs play whole sessions, and every way a
program can misbehave fails its session clearly, with no process left behind."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import envharness.adapters.process as process_module
from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.adapters.process import ProcessEnvironment, ProgramLimits
from envharness.contracts.environment import ChecksActions, DecidesWhoActs, RendersText
from envharness.records import (
    ActionBlocked,
    ActionExecuted,
    Observation,
    Outcome,
    ParticipantOutcome,
    Score,
    SessionStatus,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
NIM = [sys.executable, str(ROOT / "environments" / "python" / "nim.py")]
GRIDWORLD = ["node", str(ROOT / "environments" / "node" / "gridworld.js")]
SCRIPT = Path(__file__).parent / "scripted_environment.py"
QUICK = ProgramLimits(ready_timeout=10.0, call_timeout=10.0, shutdown_grace=0.5)
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


class Nimmer:
    """Takes one stone from the first heap with any; first tries an illegal move once."""

    implementation = "nimmer@1"

    def __init__(self) -> None:
        self.tried_illegal = False

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        if not self.tried_illegal:
            self.tried_illegal = True
            return {"heap": 0, "take": 99}
        heap = next(i for i, stones in enumerate(observation["heaps"]) if stones)
        return {"heap": heap, "take": 1}


class Walker:
    """East, then south, toward the goal."""

    implementation = "walker@1"

    def act(self, observation: dict[str, Any]) -> dict[str, Any]:
        (x, y), (gx, gy) = observation["position"], observation["goal"]
        return {"move": "east" if x < gx else "south" if y < gy else "north"}


class Counter:
    implementation = "counter@1"

    def act(self, observation: Any) -> dict[str, Any]:
        return {"value": 1}


@pytest.fixture(scope="module")
def nim() -> ProcessEnvironment:
    """Described once for the module (the blocking constructor); each session runs its own."""
    return ProcessEnvironment(NIM, limits=QUICK)


@pytest.fixture(scope="module")
def grid() -> ProcessEnvironment:
    return ProcessEnvironment(GRIDWORLD, limits=QUICK)


async def records_of(harness: AsyncEnvironmentHarness, session_id: str) -> list[Any]:
    return [record async for record in harness.records(session_id)]


def payloads(records: list[Any], kind: type[Any]) -> list[Any]:
    return [r.payload for r in records if isinstance(r.payload, kind)]


def assert_gone(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    with open(f"/proc/{pid}/stat") as stat:  # a zombie of someone else's, at worst
        assert stat.read().split()[2] == "Z", f"process {pid} is still running"


def pids(pidfile: Path) -> list[int]:
    found = [int(line) for line in pidfile.read_text().split()]
    assert found, "the program did not note its pid"
    return found


async def scripted(mode: str, pidfile: Path, **limits: float) -> ProcessEnvironment:
    options = {"ready_timeout": 10.0, "call_timeout": 10.0, "shutdown_grace": 0.2, **limits}
    return await ProcessEnvironment.create(
        [sys.executable, str(SCRIPT), mode],
        env={"PIDFILE": str(pidfile)},
        limits=ProgramLimits(**options),  # type: ignore[arg-type]
    )


# -- the reference environments ------------------------------------------------------------------


async def test_python_nim_plays_a_two_player_game_the_environment_orders(
    store_path: Path, nim: ProcessEnvironment
) -> None:
    assert nim.spec.turn_order == "environment"
    assert nim.implementation == "nim-python@1"
    assert isinstance(nim, DecidesWhoActs | ChecksActions | RendersText)
    reference = nim.spec.reference()
    assert reference.action_type == "environment_program.nim.Action"
    assert reference.action_schema is not None
    assert reference.action_schema["required"] == ["heap", "take"]
    harness = AsyncEnvironmentHarness(
        store_path, environment=nim, agents={"alice": Nimmer, "bob": Nimmer}
    )
    session = await harness.run(Scenario(id="small", input={"heaps": [1, 2]}), turns=20, seed=3)
    assert session.status == "completed", session.reason
    records = await records_of(harness, session.id)
    # Only the player to move is observed each turn; the first illegal move is blocked.
    observed = [(r.turn, r.participant) for r in records if isinstance(r.payload, Observation)]
    assert len(observed) == len({turn for turn, _ in observed})
    blocked = payloads(records, ActionBlocked)
    assert [b.by for b in blocked] == ["environment", "environment"]
    assert "take must be from 1 to" in blocked[0].reason
    # The loser did not make the last move, and still learns who won.
    executed = [r for r in records if isinstance(r.payload, ActionExecuted)]
    [loser_outcome] = [r for r in records if isinstance(r.payload, ParticipantOutcome)]
    winner = executed[-1].participant
    assert loser_outcome.participant != winner
    assert loser_outcome.payload.outcome == {"winner": winner}
    assert (executed[-1].payload.reward, loser_outcome.payload.reward) == (1.0, -1.0)
    [score] = payloads(records, Score)
    assert score.per_participant == {
        winner: {"won": 1.0},
        loser_outcome.participant: {"won": 0.0},
    }
    texts = [o.text for o in payloads(records, Observation)]
    assert texts[0].startswith("heap 0: | (1)")
    assert (await harness.verify()).ok


async def test_a_branch_intervenes_in_a_process_of_its_own_and_continues(
    store_path: Path, nim: ProcessEnvironment
) -> None:
    harness = AsyncEnvironmentHarness(
        store_path, environment=nim, agents={"alice": Nimmer, "bob": Nimmer}, checkpoint_every=1
    )
    session = await harness.run(Scenario(id="big", input={"heaps": [5, 5]}), turns=3)
    assert session.status == "completed", session.reason
    [first, *_] = await harness.checkpoints(session.id)
    child = await harness.branch(first, intervention={"heaps": [0, 1]}, reason="endgame")
    finished = await harness.continue_(child.id, turns=5)
    assert finished.status == "completed", finished.reason
    records = await records_of(harness, child.id)
    assert payloads(records, Outcome)[-1].done
    with pytest.raises(ConfigurationError, match="an intervention sets the heaps"):
        await harness.branch(first, intervention={"heaps": "none"})


@needs_node
async def test_node_gridworld_walks_to_the_goal_and_renders_text(
    store_path: Path, grid: ProcessEnvironment
) -> None:
    assert grid.capabilities == {"check_action", "render_text", "score"}
    harness = AsyncEnvironmentHarness(store_path, environment=grid, agents={"walker": Walker})
    session = await harness.run(Scenario(id="grid", input={"size": 3}), turns=20, seed=1)
    assert session.status == "completed", session.reason
    assert session.reason == "the environment reported done at turn 4"
    records = await records_of(harness, session.id)
    [score] = payloads(records, Score)
    assert (score.passed, score.metrics) == (True, {"steps": 4.0, "reached": 1.0})
    first = payloads(records, Observation)[0]
    assert first.text.splitlines()[0] == "@.."
    assert "\x1b[32mG\x1b[0m" in first.text  # the goal, in green
    assert payloads(records, ActionExecuted)[-1].reward == 1.0


@needs_node
async def test_node_gridworld_is_truncated_at_its_step_limit(
    store_path: Path, grid: ProcessEnvironment
) -> None:
    harness = AsyncEnvironmentHarness(store_path, environment=grid, agents={"walker": Walker})
    session = await harness.run(Scenario(id="short", input={"max_steps": 2}), turns=20)
    assert session.status == "completed"
    assert session.reason == "the environment truncated the episode at turn 2"
    records = await records_of(harness, session.id)
    last = payloads(records, Outcome)[-1]
    assert (last.done, last.truncated) == (False, True)


async def test_async_code_reads_the_spec_without_blocking() -> None:
    nim = await ProcessEnvironment.create(" ".join(NIM), limits=QUICK)
    assert nim.spec.name == "nim"
    fresh = nim()
    assert fresh is not nim
    assert fresh.spec is nim.spec
    assert repr(fresh).startswith("ProcessEnvironment(")


# -- one process per session, none left behind ---------------------------------------------------


async def test_one_process_per_session_stopped_when_the_session_ends(
    store_path: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    counter = await scripted("good", pidfile)
    [describing] = pids(pidfile)
    assert_gone(describing)
    harness = AsyncEnvironmentHarness(store_path, environment=counter, agents={"a": Counter})
    session = await harness.run(Scenario(id="s", input=None), turns=5)
    assert session.status == "completed", session.reason
    assert session.turns_completed == 3
    assert len(pids(pidfile)) == 2  # the describing process, and one for the whole session
    for pid in pids(pidfile):
        assert_gone(pid)


async def test_calls_outside_a_lifespan_run_in_their_own_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    counter = (await scripted("good", pidfile))()
    assert await counter.intervene({"n": 1}, {"n": 2}) == {"n": 2}
    async with counter.lifespan():
        assert await counter.observe({"n": 5}, "a") == {"n": 5}
        resolution = await counter.resolve({"n": 5}, {"a": {"value": 1}})
        assert (resolution.state, resolution.done, resolution.signals) == ({"n": 6}, True, {"n": 6})
        with pytest.raises(ConfigurationError, match="already running a session"):
            async with counter.lifespan():
                pass
    assert len(pids(pidfile)) == 3
    for pid in pids(pidfile):
        assert_gone(pid)


@pytest.mark.parametrize("mode", ["ignore-sigterm", "child"])
async def test_stubborn_programs_and_their_children_are_killed(
    store_path: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_module, "TERMINATE_GRACE", 0.1)
    pidfile = tmp_path / "pids"
    with anyio.fail_after(30):
        counter = await scripted(mode, pidfile, shutdown_grace=0.1)
        harness = AsyncEnvironmentHarness(store_path, environment=counter, agents={"a": Counter})
        session = await harness.run(Scenario(id="s", input=None), turns=1)
    assert session.status == "completed", session.reason
    for pid in pids(pidfile):
        assert_gone(pid)


# -- a program that misbehaves fails its session, named, with its last words ---------------------


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("crash", "closed: the environment program's output ended"),
        ("hang", "timeout: no `result` within 0.3s after `resolve`"),
        ("invalid-json", "invalid_json: the line is not valid JSON"),
        ("wrong-id", "wrong_id: the environment program answered id '999'"),
        ("duplicate-id", "duplicate_id: the environment program answered id"),
        ("unexpected", "unexpected_message: the environment program sent 'ready'"),
        ("bad-value", "invalid_field: the `result` of `resolve` must hold a resolution"),
        ("huge-line", "line_too_long: a line is longer than the limit"),
        ("error", "the environment program reported an error answering resolve"),
    ],
)
async def test_a_misbehaving_program_fails_its_session_and_is_stopped(
    store_path: Path, tmp_path: Path, mode: str, reason: str
) -> None:
    pidfile = tmp_path / "pids"
    counter = await scripted(mode, pidfile, call_timeout=0.3)
    harness = AsyncEnvironmentHarness(store_path, environment=counter, agents={"a": Counter})
    with anyio.fail_after(30):
        session = await harness.run(Scenario(id="s", input=None), turns=3)
    assert session.status == "failed"
    assert session.reason is not None
    assert session.reason.startswith("environment resolve() raised "), session.reason
    assert reason in session.reason
    status = payloads(await records_of(harness, session.id), SessionStatus)[-1]
    assert status.error is not None
    assert f"scripted environment {mode} started" in (status.error.stderr_tail or "")
    for pid in pids(pidfile):
        assert_gone(pid)


async def test_a_crash_names_its_exit_status_and_last_stderr_line(
    store_path: Path, tmp_path: Path
) -> None:
    counter = await scripted("crash", tmp_path / "pids")
    harness = AsyncEnvironmentHarness(store_path, environment=counter, agents={"a": Counter})
    session = await harness.run(Scenario(id="s", input=None), turns=3)
    assert "(exit status 3); its stderr ends: 'boom: the rules crashed'" in (session.reason or "")


async def test_a_program_that_describes_itself_differently_later_fails_the_session(
    store_path: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    counter = await scripted("spec-changes", pidfile)
    assert counter.spec.version == "1"
    harness = AsyncEnvironmentHarness(store_path, environment=counter, agents={"a": Counter})
    session = await harness.run(Scenario(id="s", input=None), turns=3)
    assert session.status == "failed"
    assert "now describes itself differently" in (session.reason or "")
    assert session.turns_completed == 0
    for pid in pids(pidfile):
        assert_gone(pid)


# -- bad input: refused before any session ------------------------------------------------------


async def test_a_program_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="environment program 'no-such-env-program'"):
        await ProcessEnvironment.create("no-such-env-program --level 1")
    with pytest.raises(ConfigurationError, match="does not exist"):
        await ProcessEnvironment.create([str(tmp_path / "missing.py")])
    with pytest.raises(ConfigurationError, match="empty command"):
        await ProcessEnvironment.create("")
    with pytest.raises(ConfigurationError, match="ProgramLimits"):
        await ProcessEnvironment.create(NIM, limits={"call_timeout": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("exit-before-ready", "its stderr ends: 'cannot find the level file levels/1.txt'"),
        ("never-ready", "timeout: no `ready` within 0.3s"),
        ("bad-spec", "declares turn_order 'environment' but not the 'acting' capability"),
    ],
)
async def test_a_program_that_cannot_describe_itself_is_refused(
    tmp_path: Path, mode: str, problem: str
) -> None:
    pidfile = tmp_path / "pids"
    with pytest.raises(ConfigurationError, match="environment program") as caught:
        await scripted(mode, pidfile, ready_timeout=0.3)
    assert problem in str(caught.value)
    for pid in pids(pidfile):
        assert_gone(pid)
