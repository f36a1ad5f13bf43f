"""The driver side of a remote executor, written once for every carrier (process pool, Ray).

The driver keeps the store: each worker plays its sessions' turns and seals their records, and
sends each commit window back as one batch; the driver hands the batch to its store's journal
(batches from many sessions and workers that arrive together share one commit) and
acknowledges it once committed. A session counts in its experiment only once its worker
reports it ended, which is after the acknowledgement of its last status.

Pause and the experiment's budget keep their meaning: the driver watches both and tells every
worker, whose sessions stop at their next turn boundary. Stop cancels a session in its worker,
which records ``stopped`` through the driver before the stop returns.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from itertools import count
from typing import Self, final

import anyio

from envharness.errors import ConfigurationError, collapse
from envharness.runtime.executors.channel import Channel, WorkerSpawner
from envharness.runtime.executors.counts import is_count
from envharness.runtime.executors.frames import (
    PROTOCOL,
    Cancel,
    Open,
    Pause,
    Spent,
)
from envharness.runtime.executors.link import Link, Remote
from envharness.runtime.executors.recipe import pickled_recipe
from envharness.runtime.executors.retries import (
    NextAttempt,
    WorkerError,
    after_loss,
    from_the_start,
    resumed,
)
from envharness.runtime.executors.seam import (
    ExperimentWork,
    PlanSession,
    ResumeHere,
    SessionRuns,
    SessionWork,
)
from envharness.runtime.executors.split import SplitWorkers, WorkersInUse
from envharness.runtime.plan import SessionResult
from envharness.runtime.resume import find_resume_point
from envharness.store.journal import Pending

__all__ = ["CLOSE_GRACE", "WATCH_INTERVAL", "KeptWorkers", "RemoteExecutor", "WorkerError"]

WATCH_INTERVAL = 0.02
"""How often the driver looks whether a pause was asked or the budget spent (both are plain
flags), to tell the workers."""
CLOSE_GRACE = 5.0
"""How long workers are given to end after they are told to close, or a stopped session to
record ``stopped``, before the carrier's workers are stopped for good."""


@final
class RemoteExecutor:
    """Runs sessions in ``workers`` workers: started for each experiment and stopped after it,
    or, while :meth:`opened`, started once and kept from one experiment to the next."""

    def __init__(self, new_spawner: Callable[[], WorkerSpawner], workers: int, kind: str) -> None:
        if not is_count(workers):
            raise ConfigurationError(f"workers must be a positive integer, not {workers!r}")
        self._new_spawner = new_spawner
        self.workers = workers
        self.kind = kind
        self._kept: _Kept | None = None

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        """Keep workers for one experiment after another (a worker's start, a fresh Python
        importing envharness, costs about a second: many short experiments in a row, as the
        optimizer's reruns are, would pay it each time). They start here; one that breaks is
        replaced; experiments at the same time each take workers of their own."""
        if self._kept is not None:
            raise ConfigurationError(f"this {self.kind} executor is already open")
        kept = self._kept = _Kept(self._new_spawner())
        try:
            try:
                async with anyio.create_task_group() as starting:
                    for index in range(self.workers):
                        starting.start_soon(kept.start, index)
            except BaseExceptionGroup as failed:
                raise collapse(failed) from None
            yield
        finally:
            self._kept = None
            with anyio.CancelScope(shield=True):
                await kept.aclose()

    @property
    def kept(self) -> int:
        """How many started workers wait for the next experiment (0 unless opened)."""
        return len(self._kept.idle) if self._kept is not None else 0

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        pickled_recipe(plan_session, parts, self.kind)

    def serving(
        self, work: ExperimentWork, workers: int | None = None
    ) -> AbstractAsyncContextManager[_RemoteRuns]:
        """Serve one experiment with ``workers`` of the workers (all when ``None``; fewer is its
        share when experiments run at once, see :mod:`.split`)."""
        if workers is None:
            workers = self.workers
        if not is_count(workers, self.workers):
            raise ConfigurationError(
                f"an experiment's share of this {self.kind} executor's {self.workers} workers must "
                f"be 1 to {self.workers}, not {workers!r}"
            )
        return self._serving(work, workers)

    @asynccontextmanager
    async def _serving(self, work: ExperimentWork, workers: int) -> AsyncIterator[_RemoteRuns]:
        budget = work.budget.budget if work.budget is not None else None
        recipe = pickled_recipe(
            (tuple(work.scenarios), work.plan_session, work.runner_class, budget), (), self.kind
        )
        opening = Open(
            PROTOCOL, recipe.recipe, recipe.reopened, list(sys.path), work.progress is not None
        )
        kept = self._kept
        spawner = kept.spawner if kept is not None else self._new_spawner()
        links: list[Link] = []
        runs: _RemoteRuns | None = None
        try:
            async with anyio.create_task_group() as group:

                async def spawn(index: int) -> Link:
                    if kept is not None:
                        link = Link(index, spawner, work, kept.take(), kept.idle.append)
                    else:
                        link = Link(index, spawner, work)
                    links.append(link)
                    await group.start(link.serve, opening)
                    return link

                try:
                    try:
                        async with anyio.create_task_group() as starting:
                            for index in range(workers):
                                starting.start_soon(spawn, index)
                    except BaseExceptionGroup as failed:
                        raise collapse(failed) from None
                    runs = _RemoteRuns(links, work, spawn, workers)
                    group.start_soon(runs.watch)
                    yield runs
                finally:
                    with anyio.CancelScope(shield=True):
                        if runs is not None:
                            runs.watching.cancel()
                        for link in links:
                            await link.close()
                        with anyio.move_on_after(CLOSE_GRACE):
                            for link in links:
                                await link.gone.wait()
                        for link in links:  # a worker that did not close its end in time
                            link.reading.cancel()
        finally:
            if kept is None:
                with anyio.CancelScope(shield=True):
                    await spawner.aclose()

    def __repr__(self) -> str:
        return f"RemoteExecutor({self.kind!r}, workers={self.workers})"


@final
class _Kept:
    """An open executor's spawner, and its workers waiting for the next experiment."""

    def __init__(self, spawner: WorkerSpawner) -> None:
        self.spawner = spawner
        self.idle: list[Channel] = []

    async def start(self, index: int) -> None:
        # One that does not start is started again by the first experiment, which names why.
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            self.idle.append(await self.spawner.start(index))

    def take(self) -> Channel | None:
        return self.idle.pop(0) if self.idle else None

    async def aclose(self) -> None:
        """Close the waiting workers' channels (each exits), then stop every worker started."""
        idle, self.idle = self.idle, []
        for channel in idle:
            await channel.aclose()
        await self.spawner.aclose()


@final
class _RemoteRuns:
    """The executor opened for one experiment: places each session on the least busy worker,
    and retries a session whose worker is lost on another (see :mod:`.retries`)."""

    def __init__(
        self,
        links: list[Link],
        work: ExperimentWork,
        spawn: Callable[[int], Awaitable[Link]],
        workers: int,
    ) -> None:
        self._links = links
        self._work = work
        self._spawn = spawn
        self._workers = workers
        self._indexes = count(workers)
        self._replacing = anyio.Lock()
        self._keys = count()
        self.watching = anyio.CancelScope()

    async def run(
        self,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        commits_to: Callable[[tuple[Pending, ...]], None] | None = None,
    ) -> SessionResult:
        """A remote session's evidence is committed here as its frames arrive, by this
        driver, which waits for that commit itself (``commits_to`` goes unused)."""
        return await self._attempts(session, from_the_start(session), free, named)

    async def resume(
        self,
        session_id: str,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        here: ResumeHere,
    ) -> SessionResult:
        store = self._work.store
        point = await find_resume_point(store, session_id)
        attempt = await resumed(store, session, session_id, point, self._work.changes)
        return await self._attempts(session, attempt, free, named, session_id)

    async def _attempts(
        self,
        session: SessionWork,
        attempt: NextAttempt,
        free: Callable[[], None],
        named: Callable[[str], None],
        session_id: str | None = None,
    ) -> SessionResult:
        reasons: list[str] = []
        while True:
            link = await self._least_busy()
            remote = Remote(next(self._keys), free, named)
            await self._attempt(link, remote, attempt)
            if remote.lost is None:
                return remote.result(remote.session_id)
            session_id = remote.session_id or session_id
            reasons.append(remote.lost)
            with anyio.CancelScope(shield=True):
                await remote.committed()
                after = await after_loss(
                    self._work.store,
                    session,
                    session_id,
                    reasons,
                    self._work.changes,
                    lost=remote.lost_runner,
                )
            if isinstance(after, SessionResult):
                return after
            attempt = after

    async def _attempt(self, link: Link, remote: Remote, attempt: NextAttempt) -> None:
        link.sessions[remote.key] = remote
        try:
            await link.send_soon(attempt(remote.key))  # a busy worker's next pull takes it
            try:
                await remote.ended.wait()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await link.send(Cancel(remote.key, self._work.pause.stop_reason))
                    with anyio.move_on_after(CLOSE_GRACE):
                        await remote.ended.wait()
                raise
        finally:
            del link.sessions[remote.key]

    async def _least_busy(self) -> Link:
        """A live worker with the fewest sessions; lost workers are replaced first (the lock,
        and its pass of the loop, only then: a worker being started is in the list before it
        can take a session, and only the lock's holder may hand it one)."""
        alive = [link for link in self._links if link.lost is None]
        if len(alive) < self._workers or self._replacing.locked():
            async with self._replacing:
                alive = [link for link in self._links if link.lost is None]
                while len(alive) < self._workers:
                    alive.append(await self._spawn(next(self._indexes)))
        return min(alive, key=lambda found: len(found.sessions))

    async def watch(self) -> None:
        """Tell the workers once a pause is asked or the experiment's budget is spent."""
        work = self._work
        paused = spent = False
        with self.watching:
            while not (paused and spent):
                await anyio.sleep(WATCH_INTERVAL)
                if not paused and work.pause.requested:
                    paused = True
                    for link in self._links:
                        await link.send(Pause(work.pause.reason))
                reason = work.budget.exceeded() if work.budget is not None else None
                if not spent and reason is not None:
                    spent = True
                    for link in self._links:
                        await link.send(Spent(reason))
                spent = spent or work.budget is None


class KeptWorkers:
    """What every remote executor does through its :class:`RemoteExecutor`: check a recipe,
    and, opened with ``async with``, keep its workers for one experiment after another."""

    _remote: RemoteExecutor
    _open: AsyncExitStack | None = None
    _in_use: WorkersInUse | None = None
    workers: int

    def serving(
        self, work: ExperimentWork, workers: int | None = None
    ) -> AbstractAsyncContextManager[SessionRuns]:
        """Open for one experiment, with ``workers`` of the workers (all when ``None``): in
        the workers kept while open, else in workers started for it, inside what
        :meth:`_hold_for_workers` holds for this one experiment."""
        share = self._remote.serving(work, workers)  # refuses a bad share before anything
        return share if self._open is not None else self._held(share)

    @asynccontextmanager
    async def _held(
        self, share: AbstractAsyncContextManager[_RemoteRuns]
    ) -> AsyncIterator[_RemoteRuns]:
        async with AsyncExitStack() as stack:
            await self._hold_for_workers(stack)
            yield await stack.enter_async_context(share)

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        self._remote.check(plan_session, parts)

    async def _hold_for_workers(self, stack: AsyncExitStack) -> None:
        """Enter what must hold before the workers start and until they stop: while open, or
        for one experiment when not (nothing here; Ray's executor joins its cluster)."""

    async def __aenter__(self) -> Self:
        if self._open is not None:
            raise ConfigurationError(f"this {type(self).__name__} is already open")
        async with AsyncExitStack() as stack:
            await self._hold_for_workers(stack)
            await stack.enter_async_context(self._remote.opened())
            self._open = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the workers, then leave what :meth:`_hold_for_workers` entered. Not under a
        shield of its own: a local Ray cluster is held by a task group entered in
        ``__aenter__``, whose scope must be the innermost when it exits; what must not be cut
        short shields itself (the workers' stop, the cluster's thread)."""
        opened, self._open = self._open, None
        if opened is not None:
            await opened.aclose()

    @property
    def kept(self) -> int:
        """How many started workers wait for the next experiment (0 unless opened)."""
        return self._remote.kept

    def split(self, among: int) -> SplitWorkers:
        """This executor's workers shared by ``among`` experiments at once, each with its share
        (:class:`~envharness.runtime.executors.split.SplitWorkers`); all its splits count in
        one :class:`~envharness.runtime.executors.split.WorkersInUse`, so that experiments
        served through them hold no more than :attr:`workers` at once between them."""
        if self._in_use is None:
            self._in_use = WorkersInUse(self.workers)
        return SplitWorkers(self, among, self._in_use)
