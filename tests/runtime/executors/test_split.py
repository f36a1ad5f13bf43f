"""An executor's workers split among experiments at once: never more workers than it was given."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from envharness.errors import ConfigurationError
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.executors.ray import RayExecutor
from envharness.runtime.executors.seam import ExperimentWork, PlanSession, SessionRuns
from envharness.runtime.executors.split import SplitWorkers, WorkersInUse, shares
from tests.runtime.executors._runners import two_experiments_at_once, worker_pids

pytestmark = pytest.mark.anyio

NO_WORK = cast(ExperimentWork, object())
"""Refused before the work is looked at."""


@pytest.mark.parametrize(
    ("workers", "among", "sizes"),
    [(4, 2, (2, 2)), (5, 2, (3, 2)), (2, 2, (1, 1)), (3, 1, (3,)), (1, 2, (1,)), (2, 5, (1, 1))],
)
def test_the_shares_add_up_to_the_workers(workers: int, among: int, sizes: tuple[int, ...]) -> None:
    """Larger first, one apart at most; with fewer workers than experiments, one slot each."""
    assert shares(workers, among) == sizes
    split = ProcessPoolExecutor(workers=workers).split(among)
    assert (split.sizes, split.at_once, split.workers) == (sizes, len(sizes), workers)


@pytest.mark.parametrize("among", [0, -1, True, 1.5])
def test_a_bad_count_of_experiments_is_refused(among: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"split workers among must be a positive integer"):
        ProcessPoolExecutor(workers=2).split(among)


@pytest.mark.parametrize("share", [0, 3, True])
def test_a_share_beyond_the_pools_workers_is_refused(share: int) -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"share of this process pool executor's 2 workers must be 1 to 2, not",
    ):
        ProcessPoolExecutor(workers=2).serving(NO_WORK, share)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the refusal, not Ray's loop, is tested
async def test_a_share_beyond_rays_workers_is_refused_before_joining_a_cluster() -> None:
    with pytest.raises(ConfigurationError, match=r"Ray executor's 2 workers must be 1 to 2"):
        async with RayExecutor(address="local", workers=2).serving(NO_WORK, 3):
            pass


class _Counting:
    """A divisible executor that starts nothing: it counts the workers its experiments hold."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.held = 0
        self.most = 0

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        pass

    @asynccontextmanager
    async def serving(
        self, work: ExperimentWork, workers: int | None = None
    ) -> AsyncIterator[SessionRuns]:
        share = workers or self.workers
        self.held += share
        self.most = max(self.most, self.held)
        try:
            yield cast(SessionRuns, None)
        finally:
            self.held -= share


async def test_splits_sharing_one_count_hold_no_more_than_the_workers_between_them() -> None:
    counting = _Counting(3)
    in_use = WorkersInUse(3)
    splits = [SplitWorkers(counting, among, in_use) for among in (1, 2, 3)]

    async def experiment(split: SplitWorkers) -> None:
        async with split.serving(NO_WORK):
            for _ in range(3):
                await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        for split in splits * 3:
            group.start_soon(experiment, split)
    assert counting.most == 3  # never more, and all of them used
    assert (counting.held, in_use.held) == (0, 0)


async def test_shares_are_granted_first_come_first_served() -> None:
    """A share waiting for two workers is not passed over by a later one that one free worker
    would fit; once the first waiter is cancelled, the later one goes at once."""
    in_use = WorkersInUse(3)
    got: list[str] = []

    async def want(count: int, name: str, scope: anyio.CancelScope) -> None:
        with scope:
            async with in_use.holding(count):
                got.append(name)
                await anyio.sleep_forever()

    first, second = anyio.CancelScope(), anyio.CancelScope()
    async with in_use.holding(2), anyio.create_task_group() as group:
        group.start_soon(want, 2, "two", first)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(want, 1, "one", second)
        await anyio.wait_all_tasks_blocked()
        assert got == []  # one worker is free, yet "one" waits behind "two"
        first.cancel()
        await anyio.wait_all_tasks_blocked()
        assert got == ["one"]
        assert in_use.held == 3
        second.cancel()
    assert in_use.held == 0


@pytest.mark.parametrize("count", [0, 4, True])
async def test_a_share_beyond_the_count_is_refused(count: int) -> None:
    with pytest.raises(
        ConfigurationError, match=r"share of an executor's 3 workers must be 1 to 3"
    ):
        async with WorkersInUse(3).holding(count):
            pass


# Each case starts real worker processes: one backend each, both backends between them.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_experiments_at_once_share_three_workers(tmp_path: Path) -> None:
    """Slots of two and one: three processes in all where each taking the pool's three would
    start six. Each experiment's four sessions start together and go to the least busy worker,
    so both workers of the two-worker slot run some."""
    async with ProcessPoolExecutor(workers=3) as pool:
        await two_experiments_at_once(tmp_path / "s", pool.split(2))
        assert pool.kept == 3  # every worker started is back, and no more were started
    first, second = (await worker_pids(tmp_path / "s")).values()
    assert first.isdisjoint(second)  # at once, each in workers of its own
    assert sorted((len(first), len(second))) == [1, 2]
    assert len(first | second) == 3


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_two_splits_of_one_pool_hold_no_more_than_its_workers(tmp_path: Path) -> None:
    """Two splits made side by side (two optimizer runs on one executor) each give a lone
    experiment both workers: the experiments take turns rather than start two more."""
    async with ProcessPoolExecutor(workers=2) as pool:
        await two_experiments_at_once(tmp_path / "s", pool.split(1), pool.split(1))
        assert pool.kept == 2
    first, second = (await worker_pids(tmp_path / "s")).values()
    assert len(first) == 2
    assert first == second  # one after the other, in the same two workers


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_with_fewer_workers_than_experiments_they_take_turns(tmp_path: Path) -> None:
    async with ProcessPoolExecutor(workers=1) as pool:
        split = pool.split(2)
        assert split.at_once == 1
        await two_experiments_at_once(tmp_path / "s", split)
        assert pool.kept == 1
    first, second = (await worker_pids(tmp_path / "s")).values()
    assert len(first) == 1
    assert first == second  # one after the other, in the one worker
