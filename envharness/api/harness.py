"""The public entry point: :class:`AsyncEnvironmentHarness`, delegation only.

Its options are checked by :mod:`envharness.api.setup` into a session template; runs, resumes
and experiments are planned from it and carried out by :mod:`envharness.runtime`; reads go to
:mod:`envharness.store`, :mod:`envharness.trajectories` and :mod:`envharness.scoring`. Its
blocking twin, :class:`~envharness.api.blocking.EnvironmentHarness`, is a portal over it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import anyio

from envharness.api.experiments import AsyncExperiment, ended_experiment
from envharness.api.remote_control import RemoteControl
from envharness.api.sessions import PreparedSession, Session, ended_session
from envharness.api.sessions import snapshot as freeze_sessions
from envharness.api.sessions import trajectory as read_trajectory
from envharness.api.setup import (
    MAX_COUNT,
    EnvironmentFactory,
    check_count,
    check_executor,
    checked_budget,
    checked_template,
    plan_experiment,
    plan_run,
)
from envharness.api.sources import AsyncSources
from envharness.contracts.agent import AgentFactory
from envharness.contracts.budget import Budget
from envharness.contracts.environment import Environment
from envharness.contracts.operations import EnvironmentOperation
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError, collapsing
from envharness.hooks import HarnessHooks
from envharness.records import Record
from envharness.runtime import ProgressCallback, SessionRunner
from envharness.runtime.branching import (
    CheckpointRef,
    branch,
    list_checkpoints,
    take_checkpoint,
)
from envharness.runtime.compare import Comparison, compare_sessions
from envharness.runtime.continuation import resume_experiment, resume_session
from envharness.runtime.executors.seam import Executor
from envharness.runtime.experiment import ExperimentResult
from envharness.runtime.hooking import (
    DEFAULT_HOOK_BUDGET,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_ON_BLOCK_LIMIT,
    OnBlockLimit,
)
from envharness.runtime.plan import PauseRequest
from envharness.runtime.template import SessionPauses
from envharness.scoring import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    ExperimentReport,
    experiment_report,
)
from envharness.store import (
    Lineage,
    RecordFilter,
    SessionInfo,
    VerifyReport,
)
from envharness.store.locate import AnyStore, describe, opening_store, postgres_url, reading_store
from envharness.trajectories import (
    Dataset,
    DatasetRow,
    Entitlement,
    Snapshot,
    SnapshotMetadata,
    Trainer,
    Trajectory,
    create_dataset,
    dataset_rows,
    list_datasets,
    list_snapshots,
    load_dataset,
)

__all__ = [
    "DEFAULT_ACTION_TIMEOUT",
    "DEFAULT_MAX_CONCURRENCY",
    "MAX_COUNT",
    "AsyncEnvironmentHarness",
    "EnvironmentFactory",
    "Session",
]

DEFAULT_MAX_CONCURRENCY = 4
"""Sessions an experiment runs at once unless told otherwise."""
DEFAULT_ACTION_TIMEOUT = 120.0
"""Seconds an agent may take for one action before its session fails (``None``: no limit)."""


class AsyncEnvironmentHarness:
    """Runs sessions of one environment with one roster, recording into one store.

    ``environment`` and each value of ``agents`` are factories (usually the classes): a fresh
    environment and fresh agents are made for every session. ``roles`` maps participants to
    the environment's roles; it may be left out when the environment has a single role.
    ``budget`` is what each session may spend — its agents' reported costs and its wall time
    (docs/python-api.md, 'Budgets'); a call's own ``budget=`` replaces it for that call.
    """

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
        url = postgres_url(store)
        self._location: Path | str = Path(store).expanduser() if url is None else url
        """Where the store is: a SQLite store's directory, or the PostgreSQL URL as given
        (it may hold a password, so only this private attribute keeps it)."""
        self.store: Path | str = self._location if url is None else describe(url)
        """The store as results and messages name it: the directory, or the URL without its
        password."""
        self._template = checked_template(
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
        self._max_concurrency = max_concurrency
        self._open: AnyStore | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._pauses = SessionPauses()
        self._remote = RemoteControl(self._location)
        """The runs ``envharness stop`` / ``pause`` in another process can reach."""

    async def __aenter__(self) -> Self:
        """Keep the store (and its one writer) open across runs: concurrent sessions then
        share commits. Without ``async with``, each ``run`` opens and closes the store."""
        if self._exit_stack is not None:
            raise ConfigurationError("this harness is already open; enter it only once")
        async with AsyncExitStack() as stack:
            self._open = await stack.enter_async_context(opening_store(self._location))
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._exit_stack, self._open = self._exit_stack, None, None
        if stack is not None:
            await stack.aclose()

    @property
    def is_open(self) -> bool:
        """Whether ``async with`` holds the store open (runs then share its one writer)."""
        return self._open is not None

    @property
    def hooks(self) -> HarnessHooks | None:
        """The hooks every run uses unless it is given others (``None``: no hooks)."""
        return self._template.hooks

    @property
    def budget(self) -> Budget | None:
        """What each session may spend unless a call gives another budget (``None``: no
        limit)."""
        return self._template.budget

    def __repr__(self) -> str:
        return f"{type(self).__name__}(store={str(self.store)!r})"

    def writable_store(self) -> AbstractAsyncContextManager[AnyStore]:
        """The store this harness writes to: the open one (``async with harness``), or opened
        for the block, SQLite or PostgreSQL. Whatever records beside the harness's runs (the
        optimizer's own chain) shares its one writer this way."""
        return self._writable_store()

    def new_environment(self) -> Environment[Any, Any]:
        """A fresh environment, made and checked as each session's is (the optimizer reads an
        environment's ``spec``, ``score``, ``hook_view`` and ``hook_forbidden_terms``)."""
        return self._template.new_environment()

    @asynccontextmanager
    async def _writable_store(self) -> AsyncIterator[AnyStore]:
        if self._open is not None:
            yield self._open
            return
        async with opening_store(self._location) as store:
            yield store

    def _reading(self) -> AbstractAsyncContextManager[AnyStore]:
        """The store to read from, for the block (never creates one)."""
        return reading_store(self._location)

    # -- running ---------------------------------------------------------------------------------

    async def run(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """Run one standalone session to its end and return how it ended.

        Agent and environment failures end the session ``failed`` (see ``Session.reason``);
        they are not raised. Bad arguments raise :class:`ConfigurationError` before anything
        is recorded. ``hooks`` (default: the harness's) wrap the participants' policies
        (docs/hooks.md); ``budget`` (default: the harness's) limits what the session spends,
        which ends it ``stopped`` with a ``budget:`` reason, resumable.
        """
        return await self.prepare(
            scenario, turns=turns, seed=seed, progress=progress, hooks=hooks, budget=budget
        ).run()

    def prepare(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> PreparedSession:
        """Check a standalone run's arguments and fix its session id now; ``await
        prepared.run()`` runs it (what the blocking ``start`` does in the background), and
        ``prepared.pause()`` pauses it, even before it starts."""
        plan = plan_run(
            self._template, scenario, turns=turns, seed=seed, hooks=hooks, budget=budget
        )
        return PreparedSession(
            dataclasses.replace(plan, pause=PauseRequest()),  # pausable before it starts
            self._template,
            self._writable_store,
            self.store,
            self._pauses,
            progress,
            self._remote,
        )

    def pause(self, session_id: str) -> None:
        """Ask a session this harness is running (``run``, ``resume``, ``continue_``) to pause
        at its next turn boundary: it finishes the turn it is playing, checkpoints what its
        agents and hooks know, and ends ``paused``; ``resume`` goes on from there.

        Callable from any thread (it only sets a flag); the call that runs the session returns
        the paused :class:`Session`. To pause an experiment, ``experiment.pause()``.
        """
        self._pauses.request(session_id)

    async def resume(
        self,
        session_id: str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """Continue an interrupted, stopped or paused session after its last complete turn.

        The new segment is linked to the one that ended. If this harness's code differs from
        what the evidence recorded (environment version, agent implementations, harness
        version), the resume is refused with the differences named — unless
        ``declare_changes`` says why, which is then recorded with the segment. ``budget``
        (default: the harness's) counts what the session spent before: after a budget
        stopped it, give a larger one.
        """
        return await self._resume_session(
            session_id,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            budget=checked_budget(budget),
        )

    async def _resume_session(
        self, session_id: str, *, budget: Budget | None, **resuming: Any
    ) -> Session:
        """Resume or continue a session where ``pause`` (here) and ``envharness stop`` /
        ``pause`` (from another process) reach it; a stop returns how the evidence ended it."""
        async with self._writable_store() as store:
            session_id = (await store.session(session_id)).id
            stop = anyio.CancelScope()
            async with (
                self._pauses.holding(session_id) as pause,
                self._remote.reachable(session_id, pause=pause, stop=stop.cancel),
            ):
                with stop:
                    result = await resume_session(
                        store, self._template, session_id, pause=pause, budget=budget, **resuming
                    )
                    return Session.of(result, self.store)
                return await ended_session(store, session_id, self.store)

    async def resume_experiment(
        self,
        experiment_id: str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
        executor: Executor | None = None,
    ) -> ExperimentResult:
        """Finish an interrupted, stopped or paused experiment: completed and failed sessions
        are kept, interrupted, stopped and paused ones resume, and those that never started
        start — each with the seed derived for it, so the evidence ends as if nothing had
        happened. An error that ends it (the store's) is raised as itself, not in a group.
        ``budget`` is the whole experiment's (none unless given), counting what it spent
        before; each session keeps the harness's own session budget. ``executor`` is where the
        sessions run, as for :meth:`experiment`."""
        budget = checked_budget(budget)
        check_executor(executor)
        pause = PauseRequest()
        stop = anyio.CancelScope()
        with collapsing():
            async with self._writable_store() as store:
                experiment_id = (await store.experiment(experiment_id)).id
                async with self._remote.reachable(experiment_id, pause=pause, stop=stop.cancel):
                    with stop:
                        return await resume_experiment(
                            store,
                            self._template,
                            experiment_id,
                            declare_changes=declare_changes,
                            progress=progress,
                            hooks=hooks,
                            pause=pause,
                            budget=budget,
                            executor=executor,
                        )
                    return await ended_experiment(store, experiment_id)

    async def continue_(
        self,
        session_id: str,
        *,
        turns: int,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """Run ``turns`` more turns of a completed, paused (e.g. branched), stopped or
        interrupted session, in a new segment; ``budget`` as for :meth:`resume`."""
        check_count("turns", turns)
        return await self._resume_session(
            session_id,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            more_turns=turns,
            budget=checked_budget(budget),
        )

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
    ) -> AsyncExperiment:
        """Expand ``scenarios`` x ``trials`` into sessions under one frozen configuration.

        Everything is validated now — scenario inputs, unique ids, counts — so a mistake is a
        :class:`ConfigurationError` before anything is recorded. Nothing runs until
        :meth:`AsyncExperiment.run`. ``hooks`` (default: the harness's) wrap every session's
        participants; their version is the experiment's harness version. ``budget`` is what
        the whole experiment may spend (all its sessions' costs, and its wall time); each
        session also keeps the harness's own session budget. ``executor`` is where the
        sessions run: in this process (``None``, the default), or in worker processes
        (``ProcessPoolExecutor(workers=N)``, see docs/scale-out.md), whose factories must be
        importable — one that is not is refused here, by name.
        """
        planned = plan_experiment(
            self._template,
            name,
            scenarios,
            turns=turns,
            trials=trials,
            seed=seed,
            max_concurrency=self._max_concurrency if max_concurrency is None else max_concurrency,
            hooks=hooks,
            budget=budget,
            executor=executor,
        )
        return AsyncExperiment(planned, self._template, self._writable_store, self._remote)

    # -- checkpoints, branches, comparisons ------------------------------------------------------

    async def checkpoint(self, session_id: str, label: str | None = None) -> CheckpointRef:
        """Record a checkpoint at the session's last complete turn (it must not be running)."""
        async with self._writable_store() as store:
            return await take_checkpoint(store, session_id, label)

    async def checkpoints(self, session_id: str) -> list[CheckpointRef]:
        """The session's checkpoints (by hand, or every ``checkpoint_every`` turns)."""
        async with self._reading() as store:
            return await list_checkpoints(store, session_id)

    async def branch(
        self, checkpoint: CheckpointRef, *, intervention: Any, reason: str = ""
    ) -> Session:
        """A new session from ``checkpoint`` with ``intervention`` applied, ``paused`` until
        continued. Its lineage is evidence; the parent's history is referenced, not copied."""
        async with self._writable_store() as store:
            child = await branch(store, checkpoint, self.new_environment(), intervention, reason)
            info = await store.session(child)
        return Session(info.id, "paused", info.turns_completed, self.store, info.reason)

    async def lineage(self, session_id: str) -> Lineage:
        """Where a session came from (parent and checkpoint) and the branches made from it."""
        async with self._reading() as store:
            info = await store.session(session_id)
            return await store.lineage(info.id)

    async def compare(self, left: str, right: str) -> Comparison:
        """Aligned per-turn differences of two sessions, and of their scores."""
        async with self._reading() as store:
            return await compare_sessions(store, left, right)

    async def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        async with self._reading() as store:
            return await store.sessions(status=status)

    # -- trajectories, snapshots, datasets (docs/trajectories.md) --------------------------------

    async def trajectory(self, session_id: str) -> Trajectory:
        """The session's trajectory (``session_id`` may be a unique prefix, or an imported
        ``SOURCE:EPISODE``), up to its head now."""
        return await read_trajectory(self._location, session_id)

    async def snapshot(
        self,
        session_ids: Sequence[str],
        *,
        label: str = "",
        entitlement: Entitlement | str | None = None,
    ) -> Snapshot:
        """Freeze these sessions' trajectories as one content-addressed snapshot (the same
        selection again gets the same id). ``entitlement`` (or its basis as text) declares the
        snapshot's trajectories may train models; datasets require it."""
        return await freeze_sessions(
            self._location, session_ids, label=label, entitlement=entitlement
        )

    async def snapshots(self) -> list[SnapshotMetadata]:
        async with self._reading() as store:
            return await list_snapshots(store)

    async def create_dataset(
        self,
        name: str,
        snapshot_ids: Sequence[str],
        *,
        reward: str | None = None,
        participants: Sequence[str] | None = None,
        shared_reward: bool = False,
    ) -> Dataset:
        """An immutable dataset of these snapshots; refused, naming every trajectory and the
        condition it misses, unless all are complete, terminal, entitled and rewarded.
        ``participants`` keeps only their rows; ``shared_reward`` declares one shared reward
        everybody's (a cooperative game; see docs/trajectories.md, 'The reward')."""
        async with self._reading() as store:
            return await create_dataset(
                store,
                name,
                snapshot_ids,
                reward=reward,
                participants=participants,
                shared_reward=shared_reward,
            )

    async def dataset(self, name: str) -> Dataset:
        async with self._reading() as store:
            return await load_dataset(store, name)

    async def datasets(self) -> list[Dataset]:
        async with self._reading() as store:
            return await list_datasets(store)

    async def dataset_rows(self, name: str) -> AsyncIterator[DatasetRow]:
        """The dataset's rows (TRL's conversational format), checked against their digests."""
        async with self._reading() as store, aclosing(dataset_rows(store, name)) as rows:
            async for row in rows:
                yield row

    async def train(self, name: str, trainer: Trainer) -> Any:
        """Call ``trainer.train(rows, dataset)`` in a worker thread, here, in this process;
        the service never runs a trainer."""
        if not isinstance(trainer, Trainer):
            raise ConfigurationError(
                f"trainer {type(trainer).__name__} has no train(rows, dataset) method"
            )
        dataset = await self.dataset(name)
        rows = [row async for row in self.dataset_rows(dataset.name)]
        return await anyio.to_thread.run_sync(trainer.train, rows, dataset)

    def sources(self) -> AsyncSources:
        """Evidence in and out of this store: ``export_snapshot`` (and imports, which a
        PostgreSQL store does not take yet: they are refused by name)."""
        return AsyncSources(self._location)

    async def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncIterator[Record]:
        """The session's records in order (``session_id`` may be a unique prefix), paged."""
        async with self._reading() as store:
            info = await store.session(session_id)
            async with aclosing(store.records(info.id, selection)) as records:
                async for record in records:
                    yield record

    async def verify(self, *, full: bool = False) -> VerifyReport:
        """Re-check the store: its database file (SQLite's ``quick_check``, or with ``full``
        its ``integrity_check``: every index against its table) and every hash chain.

        A store whose write-ahead log lost acknowledged commits is checked as SQLite recovers
        it, the loss reported among the breaks; one too damaged to open at all raises
        :class:`~envharness.errors.DamagedStoreError`."""
        async with reading_store(self._location, damaged=True) as store:
            return await store.verify(full=full)

    async def report(
        self,
        experiment_id: str,
        *,
        confidence: float = DEFAULT_CONFIDENCE,
        resamples: int = DEFAULT_RESAMPLES,
    ) -> ExperimentReport:
        """An experiment's scores per scenario and overall, per score version, with bootstrap
        intervals seeded from its seed (``experiment_id`` may be a unique prefix): e.g.
        ``harness.report(result.id)``. See docs/scoring.md."""
        async with self._reading() as store:
            return await experiment_report(
                store, experiment_id, confidence=confidence, resamples=resamples
            )


if TYPE_CHECKING:  # mypy checks that the optimizer's typed seam accepts this harness
    from envharness.optimizer.host import HarnessHost

    def _optimizer_host(harness: AsyncEnvironmentHarness) -> HarnessHost:
        return harness
