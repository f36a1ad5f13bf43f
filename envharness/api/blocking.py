"""The blocking face of the harness, for scripts and notebooks.

:class:`EnvironmentHarness` runs each call of
:class:`~envharness.api.harness.AsyncEnvironmentHarness` on an event loop in a helper thread
through an anyio blocking portal, so code whose own loop may already be running (a notebook)
gets the same behaviour without a second code path.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import ExitStack
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar, cast

import anyio
import msgspec
from anyio.from_thread import BlockingPortal

from envharness._portal import Portal
from envharness.api.experiments import Experiment
from envharness.api.harness import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    AsyncEnvironmentHarness,
    EnvironmentFactory,
    Session,
)
from envharness.api.sessions import PreparedSession
from envharness.api.sources import Sources
from envharness.contracts.agent import AgentFactory
from envharness.contracts.budget import Budget
from envharness.contracts.operations import EnvironmentOperation
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.records import Record, Status
from envharness.runtime import ProgressCallback, SessionRunner
from envharness.runtime.branching import (
    CheckpointRef,
)
from envharness.runtime.compare import Comparison
from envharness.runtime.executors.seam import Executor
from envharness.runtime.experiment import (
    ExperimentResult,
)
from envharness.runtime.hooking import (
    DEFAULT_HOOK_BUDGET,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_ON_BLOCK_LIMIT,
    OnBlockLimit,
)
from envharness.scoring import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    ExperimentReport,
)
from envharness.store import (
    Lineage,
    RecordFilter,
    SessionInfo,
    VerifyReport,
)
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    Entitlement,
    Snapshot,
    SnapshotMetadata,
    Trainer,
    Trajectory,
)

__all__ = ["RECORDS_PAGE", "EnvironmentHarness", "RunningSession"]

RECORDS_PAGE = 2000
"""Records the blocking ``records()`` fetches per trip to the event loop."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


class EnvironmentHarness:
    """The blocking face of :class:`AsyncEnvironmentHarness`, for scripts and notebooks."""

    def __init__(
        self,
        store: str | PathLike[str],
        *,
        environment: EnvironmentFactory,
        agents: Mapping[str, AgentFactory],
        roles: Mapping[str, str] | None = None,
        action_timeout: float | None = DEFAULT_ACTION_TIMEOUT,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        operations: Sequence[EnvironmentOperation] = (),
        runner: type[SessionRunner] = SessionRunner,
        checkpoint_every: int | None = None,
        hooks: HarnessHooks | None = None,
        hook_budget: float | None = DEFAULT_HOOK_BUDGET,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        budget: Budget | None = None,
        on_block_limit: OnBlockLimit = DEFAULT_ON_BLOCK_LIMIT,
    ) -> None:
        self.aio = AsyncEnvironmentHarness(
            store,
            environment=environment,
            agents=agents,
            roles=roles,
            action_timeout=action_timeout,
            max_concurrency=max_concurrency,
            operations=operations,
            runner=runner,
            checkpoint_every=checkpoint_every,
            hooks=hooks,
            hook_budget=hook_budget,
            max_blocks=max_blocks,
            budget=budget,
            on_block_limit=on_block_limit,
        )

        self._portal = Portal()

    @property
    def store(self) -> Path | str:
        """The store: its directory, or a PostgreSQL URL without its password."""
        return self.aio.store

    def __enter__(self) -> Self:
        """Keep one event loop and the open store across calls (see the async harness)."""
        if self._portal.shared is not None:
            raise ConfigurationError("this harness is already open; enter it only once")
        self._portal.open(self.aio)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._portal.close()

    def call(
        self, function: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run an async function (of this harness's world: ``self.aio``'s methods, the
        optimizer's loop) to its end on this harness's event loop — the one kept open by
        ``with harness:``, or one for the call. Ctrl-C cancels it and waits while it records
        how it ended."""
        return self._portal.call(function, *args, **kwargs)

    def run(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """See :meth:`AsyncEnvironmentHarness.run`."""
        return self.call(
            self.aio.run,
            scenario,
            turns=turns,
            seed=seed,
            progress=progress,
            hooks=hooks,
            budget=budget,
        )

    def start(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> RunningSession:
        """Start a standalone session in the background and return at once; then ``id``,
        ``wait()``, ``pause()`` and ``stop()`` on the handle. Arguments are checked now."""
        prepared = self.aio.prepare(
            scenario, turns=turns, seed=seed, progress=progress, hooks=hooks, budget=budget
        )
        stack = ExitStack()
        portal = self._portal.acquire(stack)
        stopper = _Stopper()

        async def run() -> Session | None:
            with anyio.CancelScope() as scope:
                stopper.scope = scope
                if stopper.requested:
                    scope.cancel()
                return await prepared.run()
            return None  # stopped: the session recorded it

        future = portal.start_task_soon(run)
        return RunningSession(self, prepared, portal, future, stopper, stack)

    def pause(self, session: Session | str) -> None:
        """See :meth:`AsyncEnvironmentHarness.pause` (returns at once; callable from any
        thread). ``harness.start(...).pause()`` pauses and waits."""
        self.aio.pause(_session_id(session))

    def experiment(
        self,
        name: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        turns: int,
        trials: int = 1,
        seed: int = 0,
        max_concurrency: int | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
        executor: Executor | None = None,
    ) -> Experiment:
        """See :meth:`AsyncEnvironmentHarness.experiment`; ``run()`` it, or ``start()``."""
        aio = self.aio.experiment(
            name,
            scenarios,
            turns=turns,
            trials=trials,
            seed=seed,
            max_concurrency=max_concurrency,
            hooks=hooks,
            budget=budget,
            executor=executor,
        )
        return Experiment(aio, self._portal)

    def resume(
        self,
        session: Session | str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """See :meth:`AsyncEnvironmentHarness.resume`."""
        return self.call(
            self.aio.resume,
            _session_id(session),
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            budget=budget,
        )

    def checkpoint(self, session: Session | str, label: str | None = None) -> CheckpointRef:
        """See :meth:`AsyncEnvironmentHarness.checkpoint`."""
        return self.call(self.aio.checkpoint, _session_id(session), label)

    def checkpoints(self, session: Session | str) -> list[CheckpointRef]:
        return self.call(self.aio.checkpoints, _session_id(session))

    def branch(self, checkpoint: CheckpointRef, *, intervention: Any, reason: str = "") -> Session:
        """See :meth:`AsyncEnvironmentHarness.branch`."""
        return self.call(self.aio.branch, checkpoint, intervention=intervention, reason=reason)

    def continue_(
        self,
        session: Session | str,
        *,
        turns: int,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """See :meth:`AsyncEnvironmentHarness.continue_`."""
        return self.call(
            self.aio.continue_,
            _session_id(session),
            turns=turns,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            budget=budget,
        )

    def lineage(self, session: Session | str) -> Lineage:
        return self.call(self.aio.lineage, _session_id(session))

    def compare(self, left: Session | str, right: Session | str) -> Comparison:
        return self.call(self.aio.compare, _session_id(left), _session_id(right))

    def resume_experiment(
        self,
        experiment_id: str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
        executor: Executor | None = None,
    ) -> ExperimentResult:
        """See :meth:`AsyncEnvironmentHarness.resume_experiment`."""
        return self.call(
            self.aio.resume_experiment,
            experiment_id,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            budget=budget,
            executor=executor,
        )

    def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        return self.call(self.aio.sessions, status=status)

    def records(self, session_id: str, selection: RecordFilter | None = None) -> Iterator[Record]:
        """The session's records in order, fetched a page at a time: constant memory."""
        selection = selection or RecordFilter()
        remaining = selection.limit
        after = selection.after
        while remaining is None or remaining > 0:
            size = RECORDS_PAGE if remaining is None else min(RECORDS_PAGE, remaining)
            page_filter = msgspec.structs.replace(selection, after=after, limit=size)

            async def page(current: RecordFilter = page_filter) -> list[Record]:
                return [record async for record in self.aio.records(session_id, current)]

            records = self.call(page)
            yield from records
            if len(records) < size:
                return
            after = records[-1].seq
            if remaining is not None:
                remaining -= len(records)

    def verify(self, *, full: bool = False) -> VerifyReport:
        """See :meth:`AsyncEnvironmentHarness.verify`."""
        return self.call(self.aio.verify, full=full)

    # -- trajectories, snapshots, datasets (docs/trajectories.md) --------------------------------

    def trajectory(self, session: Session | str) -> Trajectory:
        """See :meth:`AsyncEnvironmentHarness.trajectory`."""
        return self.call(self.aio.trajectory, _session_id(session))

    def snapshot(
        self,
        sessions: Sequence[Session | str],
        *,
        label: str = "",
        entitlement: Entitlement | str | None = None,
    ) -> Snapshot:
        """See :meth:`AsyncEnvironmentHarness.snapshot`."""
        if isinstance(sessions, str | Session):
            sessions = [sessions]
        ids = [_session_id(session) for session in sessions]
        return self.call(self.aio.snapshot, ids, label=label, entitlement=entitlement)

    def snapshots(self) -> list[SnapshotMetadata]:
        return self.call(self.aio.snapshots)

    def create_dataset(
        self,
        name: str,
        snapshot_ids: Sequence[str],
        *,
        reward: str | None = None,
        participants: Sequence[str] | None = None,
        shared_reward: bool = False,
    ) -> Dataset:
        """See :meth:`AsyncEnvironmentHarness.create_dataset`."""
        return self.call(
            self.aio.create_dataset,
            name,
            snapshot_ids,
            reward=reward,
            participants=participants,
            shared_reward=shared_reward,
        )

    def dataset(self, name: str) -> Dataset:
        return self.call(self.aio.dataset, name)

    def datasets(self) -> list[Dataset]:
        return self.call(self.aio.datasets)

    def dataset_rows(self, name: str) -> Generator[DatasetRow, None, None]:
        """See :meth:`AsyncEnvironmentHarness.dataset_rows`; rows arrive in batches."""
        yield from self._portal.iterate(lambda: self.aio.dataset_rows(name))

    def train(self, name: str, trainer: Trainer) -> Any:
        """See :meth:`AsyncEnvironmentHarness.train`: runs here, never in the service."""
        return self.call(self.aio.train, name, trainer)

    def sources(self) -> Sources:
        """Evidence in and out of this store: ``export_snapshot`` (and imports)."""
        return Sources(self.aio.sources(), self._portal)

    def report(
        self,
        experiment_id: str,
        *,
        confidence: float = DEFAULT_CONFIDENCE,
        resamples: int = DEFAULT_RESAMPLES,
    ) -> ExperimentReport:
        """See :meth:`AsyncEnvironmentHarness.report`: ``harness.report(result.id)``."""
        return self.call(self.aio.report, experiment_id, confidence=confidence, resamples=resamples)


class _Stopper:
    """Cancels a background session's task, whether or not it has begun."""

    def __init__(self) -> None:
        self.requested = False
        self.scope: anyio.CancelScope | None = None

    def stop(self) -> None:
        self.requested = True
        if self.scope is not None:
            self.scope.cancel()


class RunningSession:
    """A standalone session running in the background, from :meth:`EnvironmentHarness.start`."""

    def __init__(
        self,
        harness: EnvironmentHarness,
        prepared: PreparedSession,
        portal: BlockingPortal,
        future: concurrent.futures.Future[Session | None],
        stopper: _Stopper,
        stack: ExitStack,
    ) -> None:
        self.id = prepared.id
        self._prepared = prepared
        self._harness = harness
        self._portal = portal
        self._future = future
        self._stopper = stopper
        self._stack = stack

    def wait(self, timeout: float | None = None) -> Session:
        """How the session ended (``TimeoutError`` if ``timeout`` passes first)."""
        try:
            result = self._future.result(timeout)
        except KeyboardInterrupt:
            self.stop()
            raise
        except TimeoutError:
            raise
        except BaseException:
            self._stack.close()
            raise
        self._stack.close()
        if result is not None:
            return result
        # Stopped: the evidence says how it ended (if it had begun at all).
        store = self._harness.store
        for info in self._harness.sessions():
            if info.id == self.id:
                status = cast(Status, info.status)
                return Session(info.id, status, info.turns_completed, store, info.reason)
        return Session(self.id, "stopped", 0, store, "stopped before it started; nothing recorded")

    def pause(self) -> Session:
        """Pause at the next turn boundary and wait until it has: the ``paused`` session."""
        self._prepared.pause()  # only sets a flag: safe from this thread
        return self.wait()

    def stop(self) -> Session:
        """Cancel the session now; it records ``stopped`` with everything committed."""
        if not self._future.done():
            self._portal.call(self._stopper.stop)
        return self.wait()


def _session_id(session: Session | str) -> str:
    return session.id if isinstance(session, Session) else session


if TYPE_CHECKING:  # mypy checks that the optimizer's typed seam accepts this harness
    from envharness.optimizer.host import BlockingHarnessHost

    def _optimizer_host(harness: EnvironmentHarness) -> BlockingHarnessHost:
        return harness
