"""The run's chain: names taken atomically by runs accepting at once; the packets it showed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from envharness import AsyncEnvironmentHarness
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.errors import EnvharnessError, StoreError
from envharness.optimizer import (
    FailurePacket,
    HarnessOptimizer,
    OptimizationConfig,
    OptimizationResult,
    Proposal,
    ScriptedEngineer,
)
from envharness.optimizer import runlog as runlog_module
from envharness.optimizer.runlog import (
    PACKET_MEDIA_TYPE,
    PACKET_NAME,
    RunLog,
    read_packet,
    read_run,
)
from envharness.records import (
    Artifact,
    EnvironmentRef,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerStatus,
)
from envharness.store import Store, open_store, read_store
from tests.optimizer._loops import DO_NOTHING, LOOK_UP_FIRST

CONFIG = OptimizerConfigRef(
    name="naming",
    environment=EnvironmentRef(
        name="support-desk", version="1", turn_order="sequential", roles=("agent",),
        input_type="envharness.demos.support_desk.TicketInput",
    ),
    engineer="scripted", engineer_version="scripted@1", scenarios=("ticket-1",),
)  # fmt: skip


def accepted(iteration: int) -> Callable[[str], OptimizerAccepted]:
    def make(name: str) -> OptimizerAccepted:
        return OptimizerAccepted(
            version=name, iteration=iteration, candidate=0, digest="d" * 64, patch={"ops": []}
        )

    return make


def both_read_first(monkeypatch: pytest.MonkeyPatch, readers: int = 2) -> None:
    """Hold each run after it reads the next free name until every run has read it: the race
    the store must settle (both ask for harness-v1 before either commits it)."""
    real = runlog_module.next_version_name
    everyone = anyio.Event()
    read = 0

    async def racing(store: Store) -> str:
        nonlocal read
        name = await real(store)
        read += 1
        if read == readers:
            everyone.set()
        if read <= readers:
            await everyone.wait()
        return name

    monkeypatch.setattr(runlog_module, "next_version_name", racing)


async def accept_at_once(logs: list[RunLog]) -> list[OptimizerAccepted]:
    names: list[OptimizerAccepted] = []

    async def one(log: RunLog) -> None:
        names.append(await log.accept(accepted(1)))

    async with anyio.create_task_group() as group:
        for log in logs:
            group.start_soon(one, log)
    return names


@asynccontextmanager
async def writers(store: Path, count: int) -> AsyncIterator[list[Store]]:
    """``count`` writers on one store directory, as ``count`` processes would each have."""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_store(store)) for _ in range(count)]


@pytest.mark.parametrize("stores", [1, 2], ids=["one writer", "two writers"])
async def test_two_runs_accepting_at_once_get_distinct_names(
    anyio_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stores: int
) -> None:
    store = tmp_path / "store"
    both_read_first(monkeypatch)
    async with writers(store, stores) as opened:
        logs = [await RunLog.start(opened[i % stores], f"opt_{i}", CONFIG) for i in range(2)]
        results = await accept_at_once(logs)
        for log in logs:  # each chain goes on after its acceptance, unbroken
            await log.append(OptimizerStatus(status="completed"))

    assert sorted(r.version for r in results) == ["harness-v1", "harness-v2"]
    reader = await read_store(store)
    listed = {v.version: v.run_id for v in await reader.harness_versions()}
    for log in logs:
        payloads = [record.payload async for record in reader.records(log.run_id)]
        [record] = [p for p in payloads if isinstance(p, OptimizerAccepted)]
        assert listed[record.version] == log.run_id
        assert isinstance(payloads[-1], OptimizerStatus)
    assert (await reader.verify()).ok


async def test_a_run_that_keeps_losing_the_race_gives_up_with_its_chain_intact(
    anyio_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def always_v1(store: Store) -> str:
        return "harness-v1"

    store = tmp_path / "store"
    async with open_store(store) as opened:
        first = await RunLog.start(opened, "opt_first", CONFIG)
        await first.accept(accepted(1))
        monkeypatch.setattr(runlog_module, "next_version_name", always_v1)
        second = await RunLog.start(opened, "opt_second", CONFIG)
        with pytest.raises(StoreError, match="3 harness version names in a row were taken"):
            await second.accept(accepted(1), tries=3)
        await second.append(OptimizerStatus(status="failed", reason="no name"))
    reader = await read_store(store)
    assert [v.version for v in await reader.harness_versions()] == ["harness-v1"]
    assert (await reader.verify()).ok


async def test_two_optimizer_runs_on_one_store_accept_distinct_versions(
    anyio_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: two whole runs in one task group, their acceptances forced to race."""
    both_read_first(monkeypatch)
    store = tmp_path / "store"
    config = OptimizationConfig(turns=8, sandbox="local", candidates=1, iterations=1)
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    results: list[OptimizationResult] = []

    async def optimize(name: str) -> None:
        optimizer = HarnessOptimizer(
            harness, ScriptedEngineer([LOOK_UP_FIRST]), config=replace(config, name=name)
        )
        results.append(await optimizer.optimize_async(tickets(8)))

    async with harness, anyio.create_task_group() as group:
        group.start_soon(optimize, "first")
        group.start_soon(optimize, "second")

    assert sorted(str(r.accepted_version) for r in results) == ["harness-v1", "harness-v2"]
    reader = await read_store(store)
    assert {v.run_id for v in await reader.harness_versions()} == {r.run_id for r in results}
    assert (await reader.verify()).ok


# -- the failure packet each engineer was shown ------------------------------------------------


async def test_each_iteration_records_the_packet_its_engineer_was_shown(
    anyio_backend: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    engineer = ScriptedEngineer(rounds=[[DO_NOTHING], [LOOK_UP_FIRST]])
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    config = OptimizationConfig(turns=8, sandbox="local", candidates=1, iterations=2)
    async with harness:
        result = await HarnessOptimizer(harness, engineer, config=config).optimize_async(tickets(8))
    assert result.accepted_version == "harness-v1"
    reader = await read_store(store)
    _, memo = await read_run(reader, result.run_id)
    assert sorted(memo.packets) == [1, 2]
    for iteration, shown in enumerate(engineer.packets, 1):
        artifact = memo.packets[iteration]
        assert (artifact.name, artifact.media_type) == (PACKET_NAME, PACKET_MEDIA_TYPE)
        assert await read_packet(reader, artifact) == shown
    kinds = [(r.kind, r.turn) async for r in reader.records(result.run_id)]
    first_answer = kinds.index(("optimizer.proposal", None))
    assert kinds.index(("artifact", 1)) < first_answer, "recorded before the engineer answered"
    assert (await reader.verify()).ok


async def test_a_packet_in_a_format_this_version_does_not_read_is_refused_by_name(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with open_store(tmp_path / "store") as opened:
        alien = Artifact(
            name=PACKET_NAME, sha256="0" * 64, size=2, media_type="application/x-packet; version=9"
        )
        with pytest.raises(EnvharnessError, match="version=9"):
            await read_packet(opened, alien)


class _Stalling:
    """An engineer that is shown the packet and never answers (the run is stopped meanwhile)."""

    name = "scripted"
    version = "scripted@1"

    def __init__(self) -> None:
        self.asked = anyio.Event()

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        self.asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_resumed_run_shows_its_engineer_the_packet_it_recorded(
    anyio_backend: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    config = OptimizationConfig(turns=8, sandbox="local", candidates=1, iterations=1)
    stalling = _Stalling()
    first = HarnessOptimizer(harness, stalling, config=config)
    engineer = ScriptedEngineer([LOOK_UP_FIRST])
    async with harness:
        async with anyio.create_task_group() as group:
            group.start_soon(first.optimize_async, tickets(8))
            await stalling.asked.wait()
            group.cancel_scope.cancel()
        assert first.run_id is not None
        again = HarnessOptimizer(harness, engineer, config=config)
        result = await again.resume_async(first.run_id, tickets(8))
    assert result.accepted_version == "harness-v1"
    reader = await read_store(store)
    packets = [r async for r in reader.records(first.run_id) if r.kind == "artifact"]
    assert len(packets) == 1, "recorded once, before the stop; the resumed run read it back"
    _, memo = await read_run(reader, first.run_id)
    assert engineer.packets == [await read_packet(reader, memo.packets[1])]
