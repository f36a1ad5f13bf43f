"""``envharness --store postgresql://... stop`` and ``pause``, each run as a process of its own,
reach sessions that this process runs against the same database: the requests travel only
through the database, as they would between hosts, and no password is printed on the way."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from anyio.from_thread import start_blocking_portal

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.experiment import ExperimentResult
from tests import _engines
from tests.cli import _two_sessions as two_sessions
from tests.cli._support import ROOT, Invoke, environment
from tests.cli.agents import NappingAgent

SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its user, so it is only carried."""
WAIT_S = 60
"""How long the runner may take to commit its first turns (a wait, not a speed check)."""


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "clistop") as url:
        user = postgres_server.user
        yield url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)


def envharness(database: str, *args: str) -> subprocess.Popen[str]:
    """``envharness --store DATABASE ARGS``, started in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "envharness.cli", "--store", database, *args], cwd=ROOT,
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """A started command's exit status, stdout and stderr, once it has ended."""
    try:
        out, err = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def running_with_a_turn(invoke: Invoke, database: str, count: int) -> list[str]:
    """The ids of the ``count`` running sessions, once each has committed a turn (read here:
    only the requests need a process of their own)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        assert time.monotonic() < deadline, f"{count} sessions did not each commit a turn"
        listed = invoke("--store", database, "sessions", "list", "--json")
        if "holds no envharness store" in listed.stderr:  # the runner has not opened it yet
            time.sleep(0.05)
            continue
        assert listed.exit_code == 0, listed.output
        found = [json.loads(line) for line in listed.stdout.splitlines()]
        running = [s for s in found if s["status"] == "running"]
        if len(running) == count and all(int(s["turns_completed"]) >= 1 for s in running):
            return sorted(str(s["id"]) for s in running)
        time.sleep(0.05)


def test_stop_and_pause_from_other_processes_reach_a_run_on_postgresql(
    invoke: Invoke, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """This process runs two sessions (on a portal's event loop); two commands, started at once
    in processes of their own, pause one and stop the other: each is recorded as the in-process
    call would be, and the runner sees each end so."""
    with start_blocking_portal() as portal:
        runner = portal.start_task_soon(two_sessions.main, database)
        try:
            first, second = running_with_a_turn(invoke, database, 2)
            capsys.readouterr()  # what the listing printed
            pausing = envharness(database, "pause", first[:-2])  # a unique prefix will do
            stopping = envharness(database, "stop", second)
            paused, stopped = finished(pausing), finished(stopping)
            runner.result(timeout=WAIT_S)
        finally:
            runner.cancel()  # the test failed before the runner could end
    out = capsys.readouterr().out
    assert paused[0] == 0, paused[2]
    assert paused[1].startswith(f"session {first} paused after ")
    assert ": paused on request of `envharness pause`, pid " in paused[1]
    assert stopped[0] == 0, stopped[2]
    assert stopped[1].startswith(f"session {second} stopped after ")
    assert ": stopped on request of `envharness stop`, pid " in stopped[1]
    assert out.splitlines() == [f"{first} paused", f"{second} stopped"]
    for said in (*paused[1:], *stopped[1:], out):
        assert SECRET not in said
    again = invoke("--store", database, "stop", second)
    assert again.exit_code == 2
    assert f"session {second} is not running (it is stopped); nothing to stop" in again.stderr
    assert SECRET not in again.output
    verified = invoke("--store", database, "verify")
    assert verified.exit_code == 0, verified.output


async def _experiment_in_workers(database: str) -> ExperimentResult:
    harness = AsyncEnvironmentHarness(
        database, environment=SyntheticEnvironment, agents={"alice": NappingAgent}
    )
    scenarios = [
        Scenario(id=f"s{start}", input=SyntheticScenarioInput(starting_total=start))
        for start in (0, 1)
    ]
    executor = ProcessPoolExecutor(workers=2)
    return await harness.experiment(
        "long", scenarios, turns=two_sessions.TURNS, executor=executor
    ).run()


def test_stop_from_another_process_reaches_an_experiment_whose_sessions_run_in_workers(
    invoke: Invoke, database: str
) -> None:
    """The request reaches the process that writes the experiment; its sessions, played in
    worker processes, end stopped and the evidence verifies."""
    with start_blocking_portal() as portal:
        runner = portal.start_task_soon(_experiment_in_workers, database)
        try:
            deadline = time.monotonic() + WAIT_S
            while (experiment := _running_experiment(invoke, database)) is None:
                if runner.done():  # ended before it was stopped: say how
                    raise AssertionError(f"the experiment ended first: {runner.result()!r}")
                assert time.monotonic() < deadline, "the experiment's sessions committed no turn"
                time.sleep(0.05)
            stopped = finished(envharness(database, "stop", experiment))
            result = runner.result(timeout=WAIT_S)
        finally:
            runner.cancel()
    assert stopped[0] == 0, stopped[2]
    assert stopped[1].startswith(f"experiment {experiment} stopped: stopped on request of ")
    assert SECRET not in stopped[1] + stopped[2]
    assert (result.id, result.status) == (experiment, "stopped")
    assert [member.result.status for member in result.sessions] == ["stopped", "stopped"]
    verified = invoke("--store", database, "verify")
    assert verified.exit_code == 0, verified.output


def _running_experiment(invoke: Invoke, database: str) -> str | None:
    """The running experiment's id once each of its two sessions has committed a turn."""
    listed = invoke("--store", database, "sessions", "list", "--json")
    if "holds no envharness store" in listed.stderr:  # the runner has not opened it yet
        return None
    assert listed.exit_code == 0, listed.output
    found = [json.loads(line) for line in listed.stdout.splitlines()]
    running = [s for s in found if s["status"] == "running" and s["experiment_id"]]
    if len(running) != 2 or not all(int(s["turns_completed"]) >= 1 for s in running):
        return None
    return str(running[0]["experiment_id"])
