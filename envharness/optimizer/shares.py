"""How the reruns that run at once share the run's executor: N workers in all, not N each.

``capacity`` reruns run at once. Through an executor of N workers (``optimize --workers N``,
``OptimizationConfig(executor=ProcessPoolExecutor(workers=N))``) they split its workers, each
taking its share (:class:`~envharness.runtime.executors.split.SplitWorkers`): a user who gives
N processes gets N, and one worker per rerun is also the cheaper split — a rerun spread over
several workers costs more CPU (2 to 15% in docs/optimizer.md). A worker serves one rerun at a
time, so with fewer workers than ``capacity`` only as many reruns as workers run at once, and
the run says so rather than refusing: the default capacity (2) with ``--workers 1`` is a fair
request, and the measurements do not depend on how the reruns are spread (the same seeds give
the same evidence in any worker). A rerun that runs alone (the baseline, a gate's suite) takes every
worker. In process, or through an executor that cannot be split, ``capacity`` reruns run at
once as before.
"""

from __future__ import annotations

import dataclasses
from typing import final

import anyio

from envharness.optimizer.config import OptimizationConfig
from envharness.runtime.executors.split import Splits

__all__ = ["RerunSlots"]


@final
class RerunSlots:
    """The slots of the reruns that run at once: hold :attr:`limiter` and run with
    :attr:`config`, whose executor is this rerun's share of the workers. Made in, and used
    from, one event loop."""

    __slots__ = ("at_once", "config", "limiter", "note")

    def __init__(self, config: OptimizationConfig) -> None:
        executor = config.executor
        self.config = config
        self.at_once = config.capacity
        """How many reruns run at once."""
        self.note: str | None = None
        """Why fewer reruns than ``capacity`` run at once, or ``None``."""
        if isinstance(executor, Splits):
            shared = executor.split(config.capacity)
            self.config = dataclasses.replace(config, executor=shared)
            self.at_once = shared.at_once
            if shared.at_once < config.capacity:
                self.note = (
                    f"capacity {config.capacity} is more than the executor's {shared.workers} "
                    f"worker{'s' if shared.workers > 1 else ''}, and a worker serves one rerun at "
                    f"a time: {shared.at_once} rerun{'s run' if shared.at_once > 1 else ' runs'} "
                    f"at once (give {config.capacity} workers to run {config.capacity})"
                )
        self.limiter = anyio.CapacityLimiter(self.at_once)
