"""``envharness stop`` and ``pause`` reach a session that another process runs, and an
experiment; they refuse, naming the fix, what nothing runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.api import remote_control
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import RunnerRef, SegmentStarted, SessionChain, SessionCreated
from envharness.records import SessionStatus as StatusChange
from envharness.store import open_store
from envharness.store.control import ControlRequests
from envharness.store.owners import this_process
from tests.cli._support import ROOT, Invoke, environment
from tests.cli.agents import NappingAgent
from tests.store._support import config

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
SLOW = "agent=tests.cli.agents:SlowAgent"


def sessions(invoke: Invoke, store: Path) -> list[dict[str, object]]:
    listed = invoke("--store", store, "sessions", "--json")
    return [json.loads(line) for line in listed.stdout.splitlines()]


def turns_in(invoke: Invoke, store: Path, count: int) -> list[str]:
    """The ids of the ``count`` running sessions, once each has committed a turn."""
    deadline = time.monotonic() + 20
    while True:
        assert time.monotonic() < deadline, f"{count} sessions did not each commit a turn in 20 s"
        if store.exists():
            found = [s for s in sessions(invoke, store) if s["status"] == "running"]
            if len(found) == count and all(int(str(s["turns_completed"])) >= 1 for s in found):
                return sorted(str(s["id"]) for s in found)
        time.sleep(0.05)


def test_stop_and_pause_reach_sessions_that_another_process_runs(
    invoke: Invoke, tmp_path: Path
) -> None:
    """One process runs two sessions with one harness; from here, one is paused and the other
    stopped, each recorded as the in-process call would, and the runner sees each end so."""
    store = tmp_path / "store"
    with subprocess.Popen(
        [sys.executable, "-m", "tests.cli._two_sessions", str(store)], cwd=ROOT,
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as process:  # fmt: skip
        try:
            first, second = turns_in(invoke, store, 2)
            paused = invoke("--store", store, "pause", first[:-2])  # a unique prefix will do
            stopped = invoke("--store", store, "stop", second)
            out, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
    assert paused.exit_code == 0, paused.stderr
    assert paused.stdout.startswith(f"session {first} paused after ")
    assert ": paused on request of `envharness pause`, pid " in paused.stdout
    assert f"resume {first} ...` and the code that ran it" in paused.stdout
    assert stopped.exit_code == 0, stopped.stderr
    assert stopped.stdout.startswith(f"session {second} stopped after ")
    assert ": stopped on request of `envharness stop`, pid " in stopped.stdout
    assert process.returncode == 0, err
    assert out.splitlines() == [f"{first} paused", f"{second} stopped"]
    refused = invoke("--store", store, "stop", first)
    assert refused.exit_code == 2
    assert f"session {first} is paused; nothing runs it to stop. Go on with " in refused.stderr
    again = invoke("--store", store, "pause", second)
    assert f"session {second} is not running (it is stopped); nothing to pause" in again.stderr


@pytest.fixture
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_control, "POLL_INTERVAL_S", 0.02)


@pytest.mark.usefixtures("quick_polls")
def test_an_experiment_pauses_as_a_whole(invoke: Invoke, tmp_path: Path) -> None:
    """Run here, in a background thread: the command's request reaches it all the same."""
    store = tmp_path / "store"
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": NappingAgent}
    )
    scenarios = [Scenario(id=f"s{i}", input=SyntheticScenarioInput(starting_total=i))
                 for i in range(2)]  # fmt: skip
    experiment = harness.experiment("long", scenarios, turns=100_000, max_concurrency=1)
    experiment.start()
    try:
        deadline = time.monotonic() + 20
        while not any(int(str(s["turns_completed"])) >= 1 for s in sessions(invoke, store)):
            assert time.monotonic() < deadline, "no turn was committed in 20 s"
            time.sleep(0.05)
        [member] = sessions(invoke, store)
        one = invoke("--store", store, "pause", member["id"])
        assert one.exit_code == 2
        assert f"runs in experiment {experiment.id}, which stops and pauses as a whole: " in (
            one.stderr
        )
        assert f"`envharness pause {experiment.id}`" in one.stderr
        asked = invoke("--store", store, "pause", experiment.id, "--no-wait")
        assert asked.exit_code == 0, asked.stderr
        assert asked.stdout.startswith(f"asked process {os.getpid()} on ")
        assert f"to pause experiment {experiment.id}; `envharness experiments show " in (
            asked.stdout
        )
        result = experiment.wait(timeout=20)
    finally:
        experiment.stop()
    assert result.status == "paused"
    done = invoke("--store", store, "pause", experiment.id)
    assert done.exit_code == 2
    assert f"experiment {experiment.id} is paused; nothing runs it to pause" in done.stderr


def test_a_session_whose_runner_is_gone_is_refused_with_the_resume_command(
    invoke: Invoke, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    gone = RunnerRef(host=socket.gethostname(), pid=_free_pid(), started=None)
    chain = SessionChain("ses_orphan")

    async def crashed() -> None:
        async with open_store(store) as writable:
            await writable.append(
                [
                    chain.seal(SessionCreated(config=config())),
                    chain.seal(StatusChange(status="running")),
                    chain.seal(SegmentStarted(segment=0, state="0" * 64, runner=gone)),
                ]
            )

    anyio.run(crashed)
    for verb in ("stop", "pause"):
        refused = invoke("--store", store, verb, "ses_orphan")
        assert refused.exit_code == 2
        assert f"session ses_orphan is not running: its runner (pid {gone.pid} on " in (
            refused.stderr
        )
        assert f"so there is nothing to {verb}. Go on with `envharness --store " in refused.stderr
        assert "resume ses_orphan ...`" in refused.stderr


def test_unknown_and_ended_targets_are_refused(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": NappingAgent}
    )
    scenario = Scenario(id="s", input=SyntheticScenarioInput(starting_total=0))
    done = harness.run(scenario, turns=1)
    for verb in ("stop", "pause"):
        ended = invoke("--store", store, verb, done.id)
        assert ended.exit_code == 2
        assert f"session {done.id} is not running (it is completed); nothing to {verb}" in (
            ended.stderr
        )
    for unknown in ("ses_nope", "exp_nope"):
        refused = invoke("--store", store, "stop", unknown)
        assert refused.exit_code == 2
        assert f"{unknown!r}" in refused.stderr
    negative = invoke("--store", store, "stop", done.id, "--timeout", "-1")
    assert negative.exit_code == 2
    assert "--timeout" in negative.stderr


def _free_pid() -> int:
    """A pid that no process has now: well above the highest in use, checked free."""
    pid = max(int(name) for name in os.listdir("/proc") if name.isdigit()) + 1000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_a_request_nobody_takes_is_withdrawn(invoke: Invoke, tmp_path: Path) -> None:
    """A live runner that does not watch (an older envharness, say): the command waits out
    its timeout, withdraws the request, and says what to do instead."""
    store = tmp_path / "store"
    chain = SessionChain("ses_unwatched")

    async def running() -> None:
        async with open_store(store) as writable:
            await writable.append(
                [
                    chain.seal(SessionCreated(config=config())),
                    chain.seal(StatusChange(status="running")),
                    chain.seal(SegmentStarted(segment=0, state="0" * 64, runner=this_process())),
                ]
            )

    anyio.run(running)
    waited = invoke("--store", store, "pause", "ses_unwatched", "--timeout", "0.2")
    assert waited.exit_code == 1
    assert waited.stderr.startswith(f"process {os.getpid()} on ")
    assert "did not take the request to pause session ses_unwatched within 0.2s, so it was " in (
        waited.stderr
    )
    assert "withdrawn and nothing changed" in waited.stderr

    control = ControlRequests(store)
    assert anyio.run(control.pending, this_process()) == []
    request = anyio.run(control.get, 1)
    assert request.verb == "pause"
    assert request.withdrawn_at is not None
