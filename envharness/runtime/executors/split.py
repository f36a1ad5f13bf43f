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
choice, and changes no evidence). Every split of one executor also counts its workers in one
:class:`WorkersInUse`: splits made side by side (two optimizer runs, or two ``measure_patch``
calls, through one executor) hold no more than its N between them, an experiment waiting for
its share until another gives its own back. An experiment served by the executor itself, not
through a split, takes N of its own, as it always did.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, final, runtime_checkable

import anyio
import anyio.lowlevel

from envharness.errors import ConfigurationError
from envharness.runtime.executors.counts import is_count
from envharness.runtime.executors.seam import ExperimentWork, PlanSession, SessionRuns

__all__ = ["Divisible", "SplitWorkers", "Splits", "WorkersInUse", "shares"]


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
    if not is_count(among):
        raise ConfigurationError(
            f"the experiments to split workers among must be a positive integer, not {among!r}"
        )
    slots = min(among, workers)
    each, extra = divmod(workers, slots)
    return tuple(each + (slot < extra) for slot in range(slots))


@final
class WorkersInUse:
    """How many of one executor's ``workers`` its splits' experiments hold now, shared by all
    its splits so that together they never hold more (see the module doc).

    Waiters are served first come, first served: a large share waiting is not passed over
    for ever by small ones. It holds no event loop's objects while idle, so an executor can
    be used from one loop after another.
    """

    __slots__ = ("_free", "_waiting", "workers")

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._free = workers
        self._waiting: deque[tuple[int, anyio.Event]] = deque()

    @property
    def held(self) -> int:
        """The workers held now."""
        return self.workers - self._free

    @asynccontextmanager
    async def holding(self, count: int) -> AsyncIterator[None]:
        """Hold ``count`` workers (waiting until they are free) until the block ends."""
        if not is_count(count, self.workers):
            raise ConfigurationError(
                f"a share of an executor's {self.workers} workers must be 1 to {self.workers}, "
                f"not {count!r}"
            )
        await self._take(count)
        try:
            yield
        finally:
            self._give(count)

    async def _take(self, count: int) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        if not self._waiting and count <= self._free:
            self._free -= count
            return
        waiter = (count, anyio.Event())
        self._waiting.append(waiter)
        try:
            await waiter[1].wait()
        except BaseException:
            if waiter[1].is_set():  # granted as it was cancelled: give them back
                self._give(count)
            else:
                self._waiting.remove(waiter)
                self._grant()  # it may have kept smaller shares behind it waiting
            raise

    def _give(self, count: int) -> None:
        self._free += count
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self._free:
            count, granted = self._waiting.popleft()
            self._free -= count
            granted.set()


@final
class SplitWorkers:
    """``executor``'s workers shared by up to ``among`` experiments at once (see the module doc);
    ``in_use`` counts the workers every split of ``executor`` holds.

    It is an executor itself: give it where an executor is wanted. Open the executor it splits
    (``async with``) to keep the workers from one experiment to the next; it is used from one
    event loop (its slots are an anyio semaphore).
    """

    __slots__ = ("_executor", "_free", "_in_use", "_slots", "sizes")

    def __init__(self, executor: Divisible, among: int, in_use: WorkersInUse) -> None:
        self._executor = executor
        self._in_use = in_use
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
                size = self.sizes[slot]
                async with (
                    self._in_use.holding(size),
                    self._executor.serving(work, size) as runs,
                ):
                    yield runs
            finally:
                self._free.add(slot)

    def __repr__(self) -> str:
        return f"SplitWorkers({self._executor!r}, sizes={self.sizes})"
