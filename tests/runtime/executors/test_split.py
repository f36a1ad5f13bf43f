"""An executor's workers split among experiments at once: never more workers than it was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from envharness.errors import ConfigurationError
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.executors.ray import RayExecutor
from envharness.runtime.executors.seam import ExperimentWork
from envharness.runtime.executors.split import shares
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


# Each case starts real worker processes: one backend each, both backends between them.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_experiments_at_once_share_three_workers(tmp_path: Path) -> None:
    """Slots of two and one: three processes in all where each taking the pool's three would
    start six."""
    async with ProcessPoolExecutor(workers=3) as pool:
        await two_experiments_at_once(tmp_path / "s", pool.split(2))
        assert pool.kept == 3  # every worker started is back, and no more were started
    first, second = (await worker_pids(tmp_path / "s")).values()
    assert first.isdisjoint(second)  # at once, each in workers of its own
    assert sorted((len(first), len(second)))[0] == 1  # the second slot is one worker
    assert len(first | second) <= 3


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
