"""How each batch of reruns shares the run's executor: among as many as run at once, and all of
it for one alone."""

from __future__ import annotations

import pytest

from envharness.optimizer import OptimizationConfig
from envharness.optimizer.shares import RerunSlots
from envharness.runtime.executors import ProcessPoolExecutor
from envharness.runtime.executors.split import SplitWorkers


def _sizes(slots: RerunSlots, reruns: int) -> tuple[tuple[int, ...], int]:
    batch = slots.among(reruns)
    executor = batch.config.executor
    assert isinstance(executor, SplitWorkers)
    assert batch.limiter.total_tokens == executor.at_once
    return executor.sizes, executor.at_once


@pytest.mark.parametrize(
    ("workers", "capacity", "reruns", "sizes"),
    [
        (2, 2, 1, (2,)),  # a lone candidate takes both
        (4, 4, 2, (2, 2)),  # two candidates at capacity 4: two workers each, none idle
        (4, 4, 4, (1, 1, 1, 1)),
        (4, 2, 5, (2, 2)),  # more candidates than capacity: capacity at once
        (5, 3, 2, (3, 2)),
        (1, 2, 2, (1,)),  # fewer workers than capacity: one at a time
        (3, 2, 0, (3,)),  # nothing to rerun (all recorded): as if alone
    ],
)
def test_a_batch_splits_the_workers_among_the_reruns_that_run_at_once(
    workers: int, capacity: int, reruns: int, sizes: tuple[int, ...]
) -> None:
    config = OptimizationConfig(capacity=capacity, executor=ProcessPoolExecutor(workers=workers))
    assert _sizes(RerunSlots(config), reruns) == (sizes, len(sizes))


def test_in_process_a_batch_runs_up_to_capacity_at_once() -> None:
    slots = RerunSlots(OptimizationConfig(capacity=3))
    for reruns, at_once in ((1, 1), (2, 2), (5, 3)):
        batch = slots.among(reruns)
        assert batch.config.executor is None
        assert batch.limiter.total_tokens == at_once
    assert (slots.at_once, slots.note) == (3, None)


def test_fewer_workers_than_capacity_is_noted_not_refused() -> None:
    pool = ProcessPoolExecutor(workers=1)
    slots = RerunSlots(OptimizationConfig(capacity=2, executor=pool))
    assert slots.at_once == 1
    assert slots.note == (
        "capacity 2 is more than the executor's 1 worker, and a worker serves one rerun at a "
        "time: 1 rerun runs at once (give 2 workers to run 2)"
    )
