"""An executor's workers split among experiments that run at the same time.

A remote executor of ``workers=N`` gives every experiment all N of its workers: one experiment at
a time, that is what N means. Several at once (the optimizer's reruns at ``capacity`` C) would
each take N, N x C processes in all, where a user who said N expects N. :class:`SplitWorkers`
serves each experiment with its share instead: C slots whose sizes add up to N (``N // C``
each, the first ``N % C`` one more), an experiment holding the lowest free slot while it runs.
With fewer workers than experiments, every slot is one worker and only N experiments run at once;
the others wait for a slot, since a worker serves one experiment at a time.

The slots are fixed when the split is made, not worked out from what happens to be running, so
the workers in use never pass N whatever the timing; an experiment takes the lowest slot free
when it starts (with an uneven split, which experiment gets a larger one is the scheduler's
choice, and changes no evidence).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, final, runtime_checkable

import anyio

from envharness.errors import ConfigurationError
from envharness.runtime.executors.seam import ExperimentWork, PlanSession, SessionRuns

__all__ = ["Divisible", "Splits", "SplitWorkers", "shares"]


class Divisible(Protocol):
    """An executor that can serve an experiment with only some of its workers."""

    @property
    def workers(self) -> int: ...

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None: ...

    def serving(
        self, work: ExperimentWork, workers: int | None = None
    ) -> AbstractAsyncContextManager[SessionRuns]: ...


@runtime_checkable
class Splits(Protocol):
    """An executor whose workers can be split among experiments at once (every remote one)."""

    def split(self, among: int) -> SplitWorkers: ...


def shares(workers: int, among: int) -> tuple[int, ...]:
    """The sizes of the slots ``workers`` workers make for ``among`` experiments at once: they
    add up to ``workers``, differ by one at most, larger first; never more slots than workers."""
    if isinstance(among, bool) or not isinstance(among, int) or among < 1:
        raise ConfigurationError(
            f"the experiments to split workers among must be a positive integer, not {among!r}"
        )
    slots = min(among, workers)
    each, extra = divmod(workers, slots)
    return tuple(each + (slot < extra) for slot in range(slots))


@final
class SplitWorkers:
    """``executor``'s workers shared by up to ``among`` experiments at once (see the module doc).

    It is an executor itself: give it where an executor is wanted. Open the executor it splits
    (``async with``) to keep the workers from one experiment to the next; it is used from one
    event loop (its slots are an anyio semaphore).
    """

    __slots__ = ("_executor", "_free", "_slots", "sizes")

    def __init__(self, executor: Divisible, among: int) -> None:
        self._executor = executor
        self.sizes = shares(executor.workers, among)
        """Each slot's workers, the first slot's first."""
        self._free = set(range(len(self.sizes)))
        self._slots = anyio.Semaphore(len(self.sizes))

    @property
    def at_once(self) -> int:
        """How many experiments run at once: ``among``, or the workers if they are fewer."""
        return len(self.sizes)

    @property
    def workers(self) -> int:
        """The workers in all, as the split executor was made with."""
        return self._executor.workers

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        self._executor.check(plan_session, parts)

    def serving(self, work: ExperimentWork) -> AbstractAsyncContextManager[SessionRuns]:
        return self._serving(work)

    @asynccontextmanager
    async def _serving(self, work: ExperimentWork) -> AsyncIterator[SessionRuns]:
        async with self._slots:
            slot = min(self._free)
            self._free.remove(slot)
            try:
                async with self._executor.serving(work, self.sizes[slot]) as runs:
                    yield runs
            finally:
                self._free.add(slot)

    def __repr__(self) -> str:
        return f"SplitWorkers({self._executor!r}, sizes={self.sizes})"
