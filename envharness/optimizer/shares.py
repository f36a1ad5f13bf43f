"""How the reruns that run at once share the run's executor: N workers in all, not N each.

Up to ``capacity`` reruns run at once. Through an executor of N workers (``optimize --workers
N``, ``OptimizationConfig(executor=ProcessPoolExecutor(workers=N))``) each batch of reruns
started together — an iteration's distinct candidates, ``measure_patch``'s two — splits its
workers among as many of them as run at once, ``min(capacity, reruns in the batch)``
(:class:`~envharness.runtime.executors.split.SplitWorkers`): a lone rerun (the baseline, a
gate's suite, the one new candidate of an iteration) takes all N, two candidates at capacity
4 take half each. A user who gives N processes gets N, and one worker per rerun is also the
cheaper split — a rerun spread over several workers costs more CPU (2 to 15% in
docs/optimizer.md). Every split of one executor counts in one table, so two runs, or two
``measure_patch`` calls, through one executor hold no more than its N between them.

A worker serves one rerun at a time, so with fewer workers than ``capacity`` only as many
reruns as workers run at once. That is a clamp, not a refusal: the default capacity (2) with
``--workers 1`` is a fair request, and the measurements do not depend on how the reruns are
spread (the same seeds give the same evidence in any worker). :attr:`RerunSlots.note` says
why; an optimizer run reports it through its progress as it starts, while ``measure_patch``,
which reports no progress, runs its two reruns one after the other without a word. In
process, or through an executor that cannot be split, ``capacity`` reruns run at once as
before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import final

import anyio

from envharness.optimizer.config import OptimizationConfig
from envharness.runtime.executors.split import Splits

__all__ = ["RerunBatch", "RerunSlots"]


@dataclass(frozen=True, slots=True)
class RerunBatch:
    """What the reruns of one batch share: each holds :attr:`limiter` while it runs and runs
    with :attr:`config`, whose executor gives it its share of the workers.

    Through a split, the limiter counts what the split's own slots count: it is kept so that
    a rerun waits for its turn in the batch before its experiment begins, not inside it,
    where the wait would count in the rerun's measured seconds."""

    limiter: anyio.CapacityLimiter
    config: OptimizationConfig


@final
class RerunSlots:
    """A run's reruns and its executor (see the module doc): :meth:`among` sizes each batch."""

    __slots__ = ("_config", "_splits", "at_once", "note")

    def __init__(self, config: OptimizationConfig) -> None:
        executor = config.executor
        self._config = config
        self._splits = executor if isinstance(executor, Splits) else None
        self.at_once = config.capacity
        """The most reruns that run at once."""
        self.note: str | None = None
        """Why fewer reruns than ``capacity`` run at once, or ``None``."""
        if self._splits is not None:
            widest = self._splits.split(config.capacity)
            self.at_once = widest.at_once
            if widest.at_once < config.capacity:
                workers = widest.workers
                self.note = (
                    f"capacity {config.capacity} is more than the executor's {workers} "
                    f"worker{'s' if workers > 1 else ''}, and a worker serves one rerun at "
                    f"a time: {widest.at_once} rerun{'s run' if widest.at_once > 1 else ' runs'} "
                    f"at once (give {config.capacity} workers to run {config.capacity})"
                )

    def among(self, reruns: int) -> RerunBatch:
        """The shares of a batch of ``reruns`` reruns started together, split among as many as
        run at once: no worker is set aside for a rerun the batch does not have."""
        at_once = min(self._config.capacity, max(reruns, 1))
        if self._splits is None:
            return RerunBatch(anyio.CapacityLimiter(at_once), self._config)
        shared = self._splits.split(at_once)
        config = dataclasses.replace(self._config, executor=shared)
        return RerunBatch(anyio.CapacityLimiter(shared.at_once), config)
