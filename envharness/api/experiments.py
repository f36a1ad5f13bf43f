"""Experiment handles: :class:`AsyncExperiment` and its blocking twin :class:`Experiment`.

``harness.experiment(...)`` validates everything and returns a handle; nothing runs until
``run()`` (or, from blocking code, ``start()`` then ``wait()``). ``stop()`` cancels the sessions
in flight — each records ``stopped`` with every committed record intact — and the experiment
records ``stopped`` with its counts. ``pause()`` is gentler: each running session finishes its
turn and ends ``paused``, no new session starts, and the experiment records ``paused``. A spent
budget acts like a pause that records ``stopped`` with a ``budget:`` reason. Either way,
``resume()`` finishes it (``resume(budget=...)`` with a larger budget).
"""

from __future__ import annotations

import functools
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, ExitStack, nullcontext
from typing import cast

import anyio
from anyio.from_thread import BlockingPortal

from envharness._portal import Portal
from envharness.api.remote_control import RemoteControl
from envharness.api.sessions import OpenStore
from envharness.api.setup import PlannedExperiment, checked_budget
from envharness.contracts.budget import Budget
from envharness.errors import ConfigurationError, collapsing
from envharness.records import Status
from envharness.runtime.budgets import BudgetWatch
from envharness.runtime.continuation import resume_experiment
from envharness.runtime.experiment import (
    ExperimentProgress,
    ExperimentResult,
    ExperimentRunner,
    ExperimentSession,
    derive_seed,
)
from envharness.runtime.plan import PauseRequest, ProgressCallback
from envharness.runtime.resume import read_experiment
from envharness.runtime.template import SessionTemplate
from envharness.store.locate import AnyStore

__all__ = ["AsyncExperiment", "Experiment", "ended_experiment"]


class AsyncExperiment:
    """One experiment, ready to run once."""

    def __init__(
        self,
        planned: PlannedExperiment,
        template: SessionTemplate,
        open_store: OpenStore,
        remote: RemoteControl | None = None,
    ) -> None:
        self.id = planned.id
        self._remote = remote
        """Where ``envharness stop`` / ``pause`` from another process reach it."""
        self.config = planned.config
        self._planned = planned
        self._template = template
        self._open_store = open_store
        self._runner: ExperimentRunner | None = None
        self._scope: anyio.CancelScope | None = None
        self._stop_requested = False
        self._pause = PauseRequest()
        self.budget = planned.budget
        """What the whole experiment may spend (``None``: no limit); ``resume(budget=...)``
        replaces it."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def total(self) -> int:
        return len(self._planned.scenarios) * self.config.trials

    @property
    def progress(self) -> ExperimentProgress:
        """Completed / failed / stopped / running / total, readable while it runs."""
        if self._runner is None:
            return ExperimentProgress(total=self.total)
        return self._runner.progress

    async def run(self, *, progress: ProgressCallback | None = None) -> ExperimentResult:
        """Run every session; returns when all ended, or when :meth:`stop` was called.

        An error that ends the run (the store's: a full disk) is raised as itself, not as the
        exception group the sessions' task group wraps it in (see ``errors.collapse``).
        """
        if self._runner is not None:
            raise ConfigurationError(f"experiment {self.id} was already run; make a new one")
        with collapsing():
            return await self._run(progress)

    async def _run(self, progress: ProgressCallback | None) -> ExperimentResult:
        async with self._open_store() as store:
            runner = ExperimentRunner(
                store,
                self.id,
                self.config,
                self._planned.scenarios,
                self._planned.planner(self._template),
                progress,
                runner_class=self._template.runner,
                pause=self._pause,
                budget=(
                    BudgetWatch(self.budget, whose="the experiment ")
                    if self.budget is not None
                    else None
                ),
                executor=self._planned.executor,
            )
            self._runner = runner
            async with self._reachable():
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    if self._stop_requested:
                        scope.cancel()
                    return await runner.run()
        if runner.result is None:  # stopped before it recorded anything
            raise ConfigurationError(f"experiment {self.id} was stopped before it started")
        return runner.result

    async def resume(self, *, budget: Budget | None = None) -> ExperimentResult:
        """Finish a stopped, paused (or, after a crash, interrupted) run of this experiment.

        ``budget`` replaces the experiment's (a larger one, after a budget stopped it); what
        it spent before counts against it, read back from the evidence."""
        budget = checked_budget(budget)
        running = self._runner is not None and self._runner.result is None
        if running and self._scope is not None and not self._scope.cancel_called:
            raise ConfigurationError(f"experiment {self.id} is still running")
        if budget is not None:
            self.budget = budget
        self._stop_requested = False
        self._pause = PauseRequest()
        if self._runner is None or not self._runner.recorded:
            self._runner = None  # stopped before anything was recorded: simply run it
            return await self.run()
        with collapsing():
            async with self._open_store() as store, self._reachable():
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    return await resume_experiment(
                        store,
                        self._template,
                        self.id,
                        declare_changes=None,
                        progress=None,
                        hooks=self._planned.hooks,
                        pause=self._pause,
                        budget=self.budget,
                        executor=self._planned.executor,
                    )
                return await ended_experiment(store, self.id)

    def _reachable(self) -> AbstractAsyncContextManager[object]:
        """While it runs, ``envharness pause`` / ``stop`` in another process reach it as
        :meth:`pause` and :meth:`stop` do here."""
        if self._remote is None:
            return nullcontext()
        return self._remote.reachable(self.id, pause=self._pause, stop=self.stop)

    def pause(self) -> None:
        """Pause at the next turn boundary: running sessions finish the turn they are playing
        and end ``paused`` (agents' and hooks' state checkpointed), no other session starts,
        and :meth:`run` returns the ``paused`` result; :meth:`resume` goes on from there.

        Safe to call more than once, and before ``run`` (then nothing starts).
        """
        self._pause.request()

    def stop(self) -> None:
        """Cancel the sessions in flight; :meth:`run` then returns the ``stopped`` result.

        Safe to call more than once, and before ``run``.
        """
        self._stop_requested = True
        if self._scope is not None:
            self._scope.cancel()


async def ended_experiment(store: AnyStore, experiment_id: str) -> ExperimentResult:
    """How an experiment whose run was stopped ended, as its evidence records it."""
    recorded = await read_experiment(store, experiment_id)
    config = recorded.config
    sessions = tuple(
        ExperimentSession(scenario_id, trial, derive_seed(config.seed, scenario_id, trial), result)
        for (scenario_id, trial), result in recorded.sessions.items()
    )
    completed = sum(1 for s in sessions if s.result.status == "completed")
    failed = sum(1 for s in sessions if s.result.status == "failed")
    total = len(config.scenarios) * config.trials
    return ExperimentResult(
        id=experiment_id,
        name=config.name,
        status=cast(Status, recorded.status),
        total=total,
        completed=completed,
        failed=failed,
        stopped=total - completed - failed,
        sessions=sessions,
    )


class Experiment:
    """The blocking face of :class:`AsyncExperiment`.

    ``run()`` runs to the end. ``start()`` runs it on an event loop in a helper thread and
    returns at once; then ``progress``, ``wait()`` and ``stop()``.
    """

    def __init__(self, aio: AsyncExperiment, portal: Portal | None = None) -> None:
        self.aio = aio
        self._harness_portal = portal or Portal()
        """The harness's portal (shared while ``with harness:`` holds it open)."""
        self._exit_stack: ExitStack | None = None
        self._future: Future[ExperimentResult] | None = None
        self._portal: BlockingPortal | None = None
        """The portal the started run is on."""

    @property
    def id(self) -> str:
        return self.aio.id

    @property
    def name(self) -> str:
        return self.aio.name

    @property
    def progress(self) -> ExperimentProgress:
        return self.aio.progress

    def run(self) -> ExperimentResult:
        self.start()
        return self.wait()

    def start(self) -> None:
        if self._future is not None:
            raise ConfigurationError(f"experiment {self.id} was already started")
        self._exit_stack = ExitStack()
        portal = self._portal = self._harness_portal.acquire(self._exit_stack)
        self._future = portal.start_task_soon(self.aio.run)

    def wait(self, timeout: float | None = None) -> ExperimentResult:
        """The result once every session ended (``TimeoutError`` if ``timeout`` passes first).

        However the run ended — a result, its error, Ctrl-C — the event loop's helper thread is
        stopped before this returns or raises, so no process is left waiting on it; only a
        ``timeout`` leaves the run going (wait again, or ``stop()``).
        """
        if self._future is None:
            raise ConfigurationError(f"experiment {self.id} was not started; call start()")
        try:
            return self._future.result(timeout)
        except KeyboardInterrupt:
            self.stop()
            raise
        finally:
            if self._future.done():
                self._close()

    def pause(self) -> ExperimentResult | None:
        """Pause at the next turn boundary (see :meth:`AsyncExperiment.pause`) and wait until
        every running session has; returns the ``paused`` result (``None`` if not started)."""
        self.aio.pause()  # only sets a flag: safe from this thread
        if self._future is None:
            return None
        return self.wait()

    def stop(self) -> ExperimentResult | None:
        """Stop the sessions in flight and wait for them to record ``stopped``."""
        if self._future is None or self._portal is None:
            self.aio.stop()
            return None
        if not self._future.done():
            self._portal.call(self.aio.stop)
        try:
            return self._future.result()
        finally:
            self._close()

    def resume(self, *, budget: Budget | None = None) -> ExperimentResult:
        """Finish a stopped, paused or interrupted run (blocking): see
        :meth:`AsyncExperiment.resume`."""
        if self._future is not None and not self._future.done():
            raise ConfigurationError(f"experiment {self.id} is still running; stop() it first")
        self._close()
        self._future = None
        return self._harness_portal.call(functools.partial(self.aio.resume, budget=budget))

    def _close(self) -> None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            stack.close()
