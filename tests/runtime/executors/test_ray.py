"""The Ray executor on a real local Ray cluster (``tests/_engines.py``), never mocked.

Every Ray test of the suite lives in this module: each module that asks for Ray starts a
cluster of its own (~10 s), so they share this one. What it pins down: Ray's behaviour the
executor stands on (a task's result reaches a driver on either backend; one async actor runs
several anyio task groups at once), the carrier (frames both ways in order and batched, the end
of a worker told apart from its death, frames held for the next pull sent at once to a worker
that waits for them), an experiment's evidence identical to in-process, a
worker killed with SIGKILL mid-experiment, actors kept by an open executor from one experiment
to the next, a local cluster of an experiment's own (in a process of its own, ~7 s: the one
test here that starts a second cluster, started with the first Ray test so that it runs while
the others do), and the bad inputs.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
)
from envharness.records import RunnerRef, SegmentStarted
from envharness.runtime.executors import WorkerError, ray_channel
from envharness.runtime.executors import ray_cluster as joining
from envharness.runtime.executors.channel import Channel
from envharness.runtime.executors.ray import RayExecutor, RaySpawner
from envharness.runtime.executors.ray_channel import RayChannel
from envharness.runtime.experiment import ExperimentResult
from envharness.store.locate import reading_store
from tests import _engines
from tests.runtime.executors._agents import PacedAgent
from tests.runtime.executors._evidence import Location, evidence, nothing_lost_nothing_duplicated
from tests.runtime.executors._runners import two_experiments_at_once, worker_pids

pytestmark = pytest.mark.anyio

RAY_WAIT_S = 120
"""How long a Ray call may take before the test fails instead of hanging (not a speed check)."""
SCENARIOS = [
    Scenario(id="down", input=SyntheticScenarioInput(starting_total=3)),
    Scenario(id="up", input=SyntheticScenarioInput(starting_total=-2)),
    Scenario(id="early", input=SyntheticScenarioInput(starting_total=0, target=2)),
]

# -- Ray itself, as the executor relies on it -------------------------------------------------


def _remote_functions() -> tuple[Any, Any]:
    """Ray's remote task and actor, defined here so that they travel by value: a Ray worker
    does not import the tests package unless told where it is."""
    import ray

    @ray.remote
    def digest(payload: bytes) -> tuple[int, str]:
        import hashlib

        return os.getpid(), hashlib.sha256(payload).hexdigest()

    @ray.remote
    class SessionRunner:
        """Many sessions per actor: each call is an anyio task group on Ray's asyncio loop."""

        def __init__(self, sessions: int) -> None:
            self.sessions = sessions
            self.started = 0
            self.all_started: anyio.Event | None = None

        async def run(self, name: str, turns: int) -> list[str]:
            if self.all_started is None:
                self.all_started = anyio.Event()
            self.started += 1
            if self.started == self.sessions:
                self.all_started.set()
            await self.all_started.wait()  # every session is in flight at once
            send, receive = anyio.create_memory_object_stream[str](1)
            records: list[str] = []

            async def turns_loop() -> None:
                async with send:
                    for turn in range(turns):
                        await send.send(f"{name}:{turn}")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(turns_loop)
                async with receive:
                    records.extend([record async for record in receive])
            return records

    return digest, SessionRunner


async def test_a_ray_task_round_trips_to_a_driver_on_either_backend(
    ray_cluster: _engines.RayCluster,
) -> None:
    import hashlib

    import ray

    digest, _ = _remote_functions()
    pid, hexdigest = await anyio.to_thread.run_sync(
        lambda: ray.get(digest.remote(b"evidence"), timeout=RAY_WAIT_S)
    )
    assert hexdigest == hashlib.sha256(b"evidence").hexdigest()
    assert pid != os.getpid()  # it ran in a Ray worker process
    assert ray_cluster.address


def test_one_async_actor_runs_several_anyio_sessions_at_once(
    ray_cluster: _engines.RayCluster,
) -> None:
    import ray

    _, session_runner = _remote_functions()
    runner = session_runner.remote(3)
    calls = [runner.run.remote(f"s{n}", 4) for n in range(3)]
    results = ray.get(calls, timeout=RAY_WAIT_S)  # a serial actor would never finish
    assert results == [[f"s{n}:{turn}" for turn in range(4)] for n in range(3)]
    ray.kill(runner)


def test_without_ray_installed_the_engine_fixture_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # an import of it now fails
    with (
        pytest.raises(_engines.EngineUnavailable, match=r"pip install -e '\.\[ray\]'"),
        _engines.running_ray(),
    ):
        pass


# -- the carrier: frames over actor calls ------------------------------------------------------


def _serves() -> dict[str, Any]:
    """Worker sides for the carrier's tests, made here so that Ray sends them by value."""

    async def echo(channel: Channel) -> None:
        """Sends each frame back doubled, and ends when told ``stop``."""
        while (frame := await channel.receive()) != b"stop":
            await channel.send(frame * 2)

    async def burst_then_crash(channel: Channel) -> None:
        """Sends ``count`` frames as fast as it can, then raises."""
        count = int(await channel.receive())
        for n in range(count):
            await channel.send(str(n).encode())
        raise LookupError("the worker's own bug")

    async def hold(channel: Channel) -> None:
        await channel.send(str(os.getpid()).encode())
        await anyio.sleep_forever()

    return {"echo": echo, "burst_then_crash": burst_then_crash, "hold": hold}


@pytest.fixture
async def spawners(ray_cluster: _engines.RayCluster) -> AsyncIterator[dict[str, RaySpawner]]:
    made = {name: RaySpawner(serve) for name, serve in _serves().items()}
    try:
        yield made
    finally:
        for spawner in made.values():
            await spawner.aclose()


async def _receive(channel: Channel) -> bytes:
    with anyio.fail_after(RAY_WAIT_S):
        return await channel.receive()


async def test_frames_cross_both_ways_in_order_and_a_cancelled_receive_loses_none(
    spawners: dict[str, RaySpawner],
) -> None:
    channel = await spawners["echo"].start(0)
    with anyio.move_on_after(0):  # cancelled while its pull is out: the next receive takes it
        await channel.receive()
    frames = [f"frame {n}".encode() for n in range(40)]
    async with anyio.create_task_group() as group:
        for part in range(4):  # four tasks send at once: each one's frames stay in its order
            group.start_soon(_send_all, channel, frames[part::4])
    echoed = [await _receive(channel) for _ in frames]
    assert sorted(echoed) == sorted(frame * 2 for frame in frames)
    for part in range(4):
        mine = [frame * 2 for frame in frames[part::4]]
        assert [frame for frame in echoed if frame in mine] == mine
    await channel.send(b"stop")  # the worker's serve returns: its end closes
    with pytest.raises(anyio.EndOfStream):
        await _receive(channel)
    with pytest.raises(anyio.EndOfStream):  # and stays ended
        await _receive(channel)
    await channel.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await channel.send(b"after close")
    with pytest.raises(anyio.ClosedResourceError):
        await channel.receive()


async def _send_all(channel: Channel, frames: list[bytes]) -> None:
    for frame in frames:
        await channel.send(frame)


# The driver's end waits in worker threads the same way on either backend, so the tests below
# run on asyncio only; the test above and the experiments run on both.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_frame_held_for_the_next_call_goes_alone_once_the_hold_ends(
    spawners: dict[str, RaySpawner],
) -> None:
    """No call comes (the driver is not receiving) and the worker never says it waits (this
    echo cannot): the held frame is pushed by itself when the hold ends, so a worker whose
    sessions send nothing for a while still gets its acknowledgements."""
    channel = await spawners["echo"].start(0)
    assert isinstance(channel, RayChannel)
    await channel.send(b"first")
    assert await _receive(channel) == b"firstfirst"  # its pull said: the worker does not wait
    with anyio.fail_after(RAY_WAIT_S):
        await channel.send_soon(b"held")  # returns once pushed: nothing else would take it
    assert channel._queued == []  # gone before the receive below, whose pull could carry it
    assert await _receive(channel) == b"heldheld"
    await channel.send(b"stop")
    with pytest.raises(anyio.EndOfStream):
        await _receive(channel)
    await channel.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_worker_that_raises_breaks_the_channel_after_its_last_frames(
    spawners: dict[str, RaySpawner],
) -> None:
    channel = await spawners["burst_then_crash"].start(3)
    await channel.send(b"300")  # far more than the worker may queue: it waits for the pulls
    received = [await _receive(channel) for _ in range(300)]
    assert received == [str(n).encode() for n in range(300)]  # all of them, in order
    with pytest.raises(anyio.BrokenResourceError) as broken:
        await _receive(channel)
    message = str(broken.value)
    assert "Ray worker 3 (envharness-worker-" in message
    assert "LookupError: the worker's own bug" in message
    await channel.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_worker_killed_with_sigkill_breaks_both_directions(
    spawners: dict[str, RaySpawner],
) -> None:
    channel = await spawners["hold"].start(1)
    assert isinstance(channel, RayChannel)
    pid = int(await _receive(channel))
    assert pid != os.getpid()
    async with anyio.create_task_group() as group:
        receiving = anyio.Event()

        async def receive_then_break() -> None:
            receiving.set()
            with pytest.raises(anyio.BrokenResourceError, match=r"Ray worker 1 .* died"):
                await _receive(channel)

        group.start_soon(receive_then_break)
        await receiving.wait()
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(anyio.BrokenResourceError, match=r"Ray worker 1 .* died"):
        await channel.send(b"to the dead")
    await channel.aclose()


# -- experiments on Ray ------------------------------------------------------------------------


def harness(store: Location, agent: Any = SyntheticAgent) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": agent}, max_concurrency=4
    )


async def _same_evidence_as_in_process(
    tmp_path: Path, executor: RayExecutor, into: Location | None = None
) -> set[int]:
    """Run the sweep in process and on ``executor`` (into the store ``into``, else a store of
    its own), compare, and say which processes ran it."""
    results = {}
    for name, chosen, store in (
        ("here", None, tmp_path / "here"),
        ("ray", executor, into or tmp_path / "ray"),
    ):
        run = harness(store).experiment("sweep", SCENARIOS, turns=5, seed=7, executor=chosen)
        with anyio.fail_after(RAY_WAIT_S):
            result = await run.run()
        assert (result.status, result.completed, result.total) == ("completed", 3, 3)
        results[name] = await evidence(store, result)
        async with reading_store(store) as reading:
            report = await reading.verify()
            assert report.ok
            assert report.sessions >= 4  # three sessions and the experiment's chain
            listed = await reading.sessions(experiment_id=result.id)
        assert len(listed) == 3  # each session once
    assert results["ray"] == results["here"]
    assert sum(len(chain) for chain in results["ray"]) > 3 * 10
    return await _runners(store, [s.result.id for s in result.sessions])


async def _runners(store: Location, session_ids: list[str]) -> set[int]:
    """The pids of the processes whose segments began the sessions."""
    pids = set()
    async with reading_store(store) as reading:
        for session_id in session_ids:
            async for record in reading.records(session_id):
                if isinstance(record.payload, SegmentStarted) and record.payload.segment == 0:
                    assert record.payload.runner is not None
                    pids.add(record.payload.runner.pid)
    return pids


@pytest.mark.parametrize("anyio_backend", ["trio"])  # asyncio: the test below
async def test_ray_records_the_same_evidence_as_in_process(
    ray_cluster: _engines.RayCluster, tmp_path: Path
) -> None:
    assert os.getpid() not in await _same_evidence_as_in_process(tmp_path, RayExecutor(workers=2))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_worker_waiting_for_a_held_acknowledgement_gets_it_without_the_hold_ending(
    ray_cluster: _engines.RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acknowledgements and sessions ride on the driver's next pull; a worker left with nothing
    to do but wait for them says so and is sent them at once. With the hold made endless, one
    session at a time on one actor (each waits for its first and last commits with no other
    session whose frames would bring a pull back) still runs to the end."""
    monkeypatch.setattr(ray_channel, "RIDE_SECONDS", math.inf)
    store = tmp_path / "one-at-a-time"
    run = AsyncEnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"agent": SyntheticAgent},
        max_concurrency=1,
    ).experiment("sweep", SCENARIOS, turns=3, executor=RayExecutor(workers=1))
    turns: list[int] = []
    with anyio.fail_after(RAY_WAIT_S):
        result = await run.run(progress=lambda session_id, turn, planned: turns.append(turn))
    assert (result.status, result.completed) == ("completed", 3)
    assert turns.count(0) == 3  # each session's start was committed before its first turn
    async with reading_store(store) as reading:
        assert (await reading.verify()).ok


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A PostgreSQL database of the module's own, which its Ray experiments share."""
    with _engines.fresh_database(postgres_server, "ray") as url:
        yield url


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_open_executor_keeps_its_actors_and_a_killed_one_loses_nothing(
    ray_cluster: _engines.RayCluster,
    database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One open executor, three experiments, the first two committed into PostgreSQL: the
    first records what the same sweep records in process (into SQLite); the second runs in the
    same actors, one of which is killed mid-experiment: its sessions go on in another, nothing
    acknowledged lost, nothing duplicated; the third's recipe does not import in the actors,
    which refuse it with nothing recorded. (The test above records into SQLite, on trio.)"""
    async with RayExecutor(workers=2) as executor:
        assert executor.kept == 2
        first = await _same_evidence_as_in_process(tmp_path, executor, into=database)
        assert executor.kept == 2
        with anyio.fail_after(RAY_WAIT_S):  # each taking both would wait for CPUs forever
            await two_experiments_at_once(tmp_path / "split", executor.split(2))
        assert executor.kept == 2
        one, other = (await worker_pids(tmp_path / "split")).values()
        assert len(one) == len(other) == 1  # an actor each, at once
        assert one != other
        result, killed = await _kill_a_worker_mid_experiment(database, executor)
        assert set(killed) <= first  # it ran in the actors the first experiment had
        await _a_recipe_the_workers_cannot_import_is_refused(tmp_path / "g", executor, monkeypatch)
    assert executor.kept == 0
    await nothing_lost_nothing_duplicated(database, result, killed, "Ray worker")


async def _kill_a_worker_mid_experiment(
    store: Location, executor: RayExecutor
) -> tuple[ExperimentResult, list[int]]:
    scenarios = [
        Scenario(id=f"start-{total}", input=SyntheticScenarioInput(starting_total=total))
        for total in (-3, 0, 3, 5)
    ]
    run = harness(store, PacedAgent).experiment("sweep", scenarios, turns=80, executor=executor)
    killed: list[int] = []
    reached = anyio.Event()

    def progress(session_id: str, turn: int, planned: int) -> None:
        if turn >= 5:
            reached.set()

    async def kill_a_worker() -> None:
        await reached.wait()
        async with reading_store(store) as reading:
            for info in await reading.sessions():
                if info.status == "running":
                    records = [record async for record in reading.records(info.id)]
                    runner = next(
                        r.payload.runner for r in records if isinstance(r.payload, SegmentStarted)
                    )
                    assert isinstance(runner, RunnerRef)
                    killed.append(runner.pid)
                    os.kill(runner.pid, signal.SIGKILL)  # the actor's process, as recorded
                    return

    with anyio.fail_after(RAY_WAIT_S):
        async with anyio.create_task_group() as group:
            group.start_soon(kill_a_worker)
            result = await run.run(progress=progress)
    assert killed
    assert killed[0] != os.getpid()
    assert (result.status, result.completed) == ("completed", len(scenarios))
    return result, killed


async def _a_recipe_the_workers_cannot_import_is_refused(
    store_path: Path, executor: RayExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    ghost = types.ModuleType("envharness_ghost_module")  # importable here, not on the worker
    ghost_agent = type("GhostAgent", (SyntheticAgent,), {"__module__": ghost.__name__})
    ghost.GhostAgent = ghost_agent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)
    run = harness(store_path, agent=ghost_agent).experiment(
        "x", SCENARIOS, turns=1, executor=executor
    )
    with pytest.raises(WorkerError, match=r"Ray worker \d refused the experiment: the recipe did"):
        await run.run()
    async with reading_store(store_path) as reading:
        assert await reading.sessions() == []  # no session began


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, -1, True, 1.5, "2"])
def test_workers_must_be_a_positive_integer(workers: Any) -> None:
    with pytest.raises(ConfigurationError, match="workers must be a positive integer"):
        RayExecutor(workers=workers)


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("", "non-empty"),
        ("ray://127.0.0.1:10001", "Ray Client"),
        ("head-node", "not HOST:PORT"),
        ("head-node:port", "not HOST:PORT"),
        ("head-node:70000", "not HOST:PORT"),
    ],
)
def test_a_malformed_address_is_refused_with_the_forms_it_may_take(address: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said) as refused:
        RayExecutor(address=address)
    assert "'auto'" in str(refused.value)


def test_without_the_ray_extra_the_executor_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'envharness\[ray\]'"):
        RayExecutor()


async def test_an_address_that_does_not_answer_is_named_with_how_to_start_a_cluster(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{_engines.free_port()}"  # nothing listens there
    run = harness(tmp_path / "s").experiment(
        "x", SCENARIOS, turns=1, executor=RayExecutor(address=address)
    )
    with pytest.raises(ConfigurationError) as refused:
        await run.run()
    message = str(refused.value)
    assert f"no Ray cluster answers at {address}" in message
    assert "ray start --head" in message
    assert "no address" in message
    assert "(Connection refused)" in message


async def test_a_second_cluster_for_one_process_is_refused(
    ray_cluster: _engines.RayCluster, tmp_path: Path
) -> None:
    with anyio.fail_after(RAY_WAIT_S):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        with pytest.raises(ConfigurationError, match="already connected to the Ray cluster at"):
            async with joining.connected(f"127.0.0.1:{port}", 1):
                pass
    async with joining.connected(ray_cluster.address, 1):  # its own: used as it is
        pass
    async with joining.connected("auto", 1):
        pass


async def test_more_workers_than_the_cluster_has_cpus_are_refused(
    ray_cluster: _engines.RayCluster,
) -> None:
    with pytest.raises(ConfigurationError, match=r"3 workers need 3 CPUs, and the Ray cluster"):
        async with joining.connected(None, 3):  # the test cluster has two
            pass


def test_no_address_means_this_process_s_ray_then_ray_address_then_a_local_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert joining.chosen_address(None, connected=True) == "local"
    assert joining.chosen_address(None, connected=False) == "10.0.0.5:6379"
    assert joining.chosen_address("auto", connected=False) == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "head-node")
    with pytest.raises(ConfigurationError, match=r"RAY_ADDRESS: the Ray address 'head-node'"):
        joining.chosen_address(None, connected=False)
    monkeypatch.delenv("RAY_ADDRESS")
    assert joining.chosen_address(None, connected=False) == "local"


async def test_a_second_experiment_is_refused_while_a_local_cluster_of_this_process_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local cluster lives as long as the experiment that started it (checked end to end
    by hand: starting one costs a cluster start); meanwhile another experiment is refused."""
    monkeypatch.setattr(joining._LocalCluster, "running", True)
    with pytest.raises(ConfigurationError, match=r"ray start --head.*'auto'"):
        async with joining.connected("local", 1):
            pass


LOCAL_CLUSTER_SCRIPT = """
import sys
from pathlib import Path

import anyio

from envharness import AsyncEnvironmentHarness, ConfigurationError, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.runtime.executors.ray import RayExecutor

SCENARIOS = [Scenario(id=str(n), input=SyntheticScenarioInput(starting_total=n)) for n in range(4)]


async def one(name: str, executor: RayExecutor | None = None) -> None:
    harness = AsyncEnvironmentHarness(
        Path(sys.argv[1]) / name, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    executor = executor or RayExecutor(address="local", workers=1)
    try:
        result = await harness.experiment("x", SCENARIOS, turns=20, executor=executor).run()
    except ConfigurationError as exc:
        print("refused:", exc, flush=True)
    else:
        print("ran:", result.status, result.completed, flush=True)


async def main() -> None:
    import ray

    async with anyio.create_task_group() as group:
        group.start_soon(one, "first")
        group.start_soon(one, "second")
    print("connected after:", ray.is_initialized(), flush=True)
    async with RayExecutor(address="local", workers=1) as executor:  # one cluster for both
        await one("third", executor)
        await one("fourth", executor)
    print("open, connected after:", ray.is_initialized(), flush=True)


anyio.run(main)
"""


@pytest.fixture(autouse=True)
def _local_cluster_starts_early(request: pytest.FixtureRequest) -> None:
    """Start the script of the local cluster's test with this module's first Ray test (when
    that test is to run): its cluster starts (~5 s) while the other tests run, not after."""
    if "ray_cluster" in request.fixturenames and any(
        item.name == LOCAL_CLUSTER_TEST for item in request.session.items
    ):
        request.getfixturevalue("local_cluster_run")


@pytest.fixture(scope="module")
def local_cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """The script of the local cluster's test, running."""
    directory = tmp_path_factory.mktemp("local_cluster")
    script = directory / "local_cluster.py"
    script.write_text(LOCAL_CLUSTER_SCRIPT)
    ray_files = tempfile.mkdtemp(prefix="envh-ray-")  # Ray's socket paths must stay short
    env = {
        **os.environ,
        "RAY_AUTH_TOKEN": secrets.token_hex(32),  # not ~/.ray/auth_token
        "RAY_TMPDIR": ray_files,
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    running = subprocess.Popen(
        [sys.executable, str(script), str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield running
    finally:
        if running.poll() is None:  # the test did not wait for it (deselected, or failed)
            running.kill()
        running.communicate()
        shutil.rmtree(ray_files, ignore_errors=True)


LOCAL_CLUSTER_TEST = "test_a_local_cluster_lives_as_long_as_its_experiment_and_is_its_own"


@pytest.mark.ray
@pytest.mark.slow
def test_a_local_cluster_lives_as_long_as_its_experiment_and_is_its_own(
    local_cluster_run: subprocess.Popen[str],
) -> None:
    """No address in a process without Ray: the experiment starts a local cluster (held by a
    worker thread: Ray's processes die with the thread that started them) and stops it after;
    a second experiment at the same time is refused. An open executor holds one local cluster
    for the experiments it runs, and stops it when closed. In a process of its own, on
    asyncio."""
    stdout, stderr = local_cluster_run.communicate(timeout=RAY_WAIT_S)
    said = stdout.splitlines()
    assert local_cluster_run.returncode == 0, stderr[-3000:]
    assert sorted(line.split(":")[0] for line in said) == [
        "connected after",
        "open, connected after",
        "ran",
        "ran",
        "ran",
        "refused",
    ]
    assert said.count("ran: completed 4") == 3
    assert any("`ray start --head`" in line for line in said if line.startswith("refused"))
    assert "connected after: False" in said
    assert "open, connected after: False" in said
