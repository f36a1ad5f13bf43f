"""The public entry point: :class:`AsyncEnvironmentHarness`, the one implementation.

Its blocking twin, :class:`~envharness.api.blocking.EnvironmentHarness`, is a portal over it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    aclosing,
    asynccontextmanager,
)
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Self, TypeVar

import anyio
import msgspec

from envharness.api.experiments import AsyncExperiment
from envharness.api.sources import AsyncSources, call_blocking
from envharness.contracts.agent import Agent, AgentFactory, implementation_of
from envharness.contracts.environment import Environment, EnvironmentSpec
from envharness.contracts.operations import EnvironmentOperation, operation_ref
from envharness.contracts.scenario import Scenario, validate_input
from envharness.errors import ChainConflictError, ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.records import ErrorInfo, ExperimentConfig, Record, Status, new_id
from envharness.runtime import ProgressCallback, SessionPlan, SessionResult, SessionRunner
from envharness.runtime.branching import (
    CheckpointRef,
    branch,
    list_checkpoints,
    take_checkpoint,
)
from envharness.runtime.compare import Comparison, compare_sessions
from envharness.runtime.experiment import (
    ExperimentResult,
    ExperimentResumption,
    ExperimentRunner,
)
from envharness.runtime.hooking import DEFAULT_HOOK_BUDGET, DEFAULT_MAX_BLOCKS, check_hooks
from envharness.runtime.plan import PauseRequest
from envharness.runtime.resume import (
    CONTINUABLE,
    RESUMABLE,
    differences,
    find_resume_point,
    read_experiment,
    restore_state,
    scenario_input,
)
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
    Store,
    VerifyReport,
    open_store,
    read_store,
)
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
    freeze,
    list_datasets,
    list_snapshots,
    load_dataset,
    project,
)

__all__ = [
    "DEFAULT_ACTION_TIMEOUT",
    "DEFAULT_MAX_CONCURRENCY",
    "AsyncEnvironmentHarness",
    "Session",
]

DEFAULT_MAX_CONCURRENCY = 4
"""Sessions an experiment runs at once unless told otherwise."""
DEFAULT_ACTION_TIMEOUT = 120.0
"""Seconds an agent may take for one action before its session fails (``None``: no limit)."""
MAX_COUNT = 2**63 - 1
"""The most turns, trials, sessions of an experiment or sessions at once: the store counts
them in 64-bit integers (SQLite's), so anything larger could not be recorded."""

_T = TypeVar("_T")

EnvironmentFactory = Callable[[], Environment[Any, Any]]


@dataclass(frozen=True, slots=True)
class Session:
    """A finished (or ended) session run: its id, how it ended, and why."""

    id: str
    status: Status
    turns_completed: int
    store: Path
    reason: str | None = None
    error: ErrorInfo | None = field(default=None, repr=False)

    @classmethod
    def of(cls, result: SessionResult, store: Path) -> Session:
        return cls(
            result.id, result.status, result.turns_completed, store, result.reason, result.error
        )

    def trajectory(self) -> Trajectory:
        """The session's trajectory now: a digest-bound projection of its journal (blocking;
        in async code, ``await harness.trajectory(session.id)``)."""
        return call_blocking(lambda: _trajectory(self.store, self.id))

    def snapshot(
        self, *, label: str = "", entitlement: Entitlement | str | None = None
    ) -> Snapshot:
        """Freeze this session's trajectory as a content-addressed snapshot (blocking; in
        async code, ``await harness.snapshot([session.id])``)."""
        return call_blocking(
            lambda: _snapshot(self.store, [self.id], label=label, entitlement=entitlement)
        )


class AsyncEnvironmentHarness:
    """Runs sessions of one environment with one roster, recording into one store.

    ``environment`` and each value of ``agents`` are factories (usually the classes): a fresh
    environment and fresh agents are made for every session. ``roles`` maps participants to
    the environment's roles; it may be left out when the environment has a single role.
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
    ) -> None:
        self.store = Path(store).expanduser()
        self._environment_factory = _check_factory(environment, "environment")
        if not agents:
            raise ConfigurationError(
                "agents is empty; give at least one participant, e.g. agents={'alice': MyAgent}"
            )
        self._agent_factories = {
            _check_participant(name): _check_factory(factory, f"agent {name!r}")
            for name, factory in agents.items()
        }
        spec = self._make_environment().spec
        self._roster = _roster(spec, list(self._agent_factories), roles or {})
        if action_timeout is not None and action_timeout <= 0:
            raise ConfigurationError(
                f"action_timeout must be positive seconds or None, not {action_timeout}"
            )
        self._action_timeout = action_timeout
        # The hooks' version is the sessions' harness version: evidence names the patch that ran.
        self._hooks = check_hooks(hooks) if hooks is not None else None
        if hook_budget is not None and hook_budget <= 0:
            raise ConfigurationError(
                f"hook_budget must be positive seconds or None, not {hook_budget}"
            )
        self._hook_budget = hook_budget
        _check_count("max_blocks", max_blocks)
        self._max_blocks = max_blocks
        _check_count("max_concurrency", max_concurrency)
        self._max_concurrency = max_concurrency
        self._operations = _operations(operations)
        if not (isinstance(runner, type) and issubclass(runner, SessionRunner)):
            raise ConfigurationError(f"runner must be a SessionRunner subclass, not {runner!r}")
        self._runner_class = runner
        if checkpoint_every is not None:
            _check_count("checkpoint_every", checkpoint_every)
        self._checkpoint_every = checkpoint_every
        self._open: Store | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._pauses: dict[str, PauseRequest] = {}
        """Sessions this harness is running, by id: what ``pause`` can reach."""

    async def __aenter__(self) -> Self:
        """Keep the store (and its one writer) open across runs: concurrent sessions then
        share commits. Without ``async with``, each ``run`` opens and closes the store."""
        if self._exit_stack is not None:
            raise ConfigurationError("this harness is already open; enter it only once")
        async with AsyncExitStack() as stack:
            self._open = await stack.enter_async_context(open_store(self.store))
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
        return self._hooks

    def writable_store(self) -> AbstractAsyncContextManager[Store]:
        """The store this harness writes to: the open one (``async with harness``), or opened
        for the block. Whatever records beside the harness's runs (the optimizer's own chain)
        shares its one writer this way."""
        return self._writable_store()

    def new_environment(self) -> Environment[Any, Any]:
        """A fresh environment, made and checked as each session's is (the optimizer reads an
        environment's ``spec``, ``score``, ``hook_view`` and ``hook_forbidden_terms``)."""
        return self._make_environment()

    @asynccontextmanager
    async def _writable_store(self) -> AsyncIterator[Store]:
        if self._open is not None:
            yield self._open
            return
        async with open_store(self.store) as store:
            yield store

    async def run(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
    ) -> Session:
        """Run one standalone session to its end and return how it ended.

        Agent and environment failures end the session ``failed`` (see ``Session.reason``);
        they are not raised. Bad arguments raise :class:`ConfigurationError` before anything
        is recorded. ``hooks`` (default: the harness's) wrap the participants' policies
        (docs/hooks.md).
        """
        plan = self._plan(scenario, turns=turns, seed=seed, hooks=hooks)
        return await self._run_plan(plan, progress)

    async def _run_plan(self, plan: SessionPlan, progress: ProgressCallback | None) -> Session:
        pausable = self._pausable(plan.session_id, plan.pause)
        async with self._writable_store() as store, pausable as pause:
            plan = dataclasses.replace(plan, pause=pause)
            result = await self._runner_class(store, plan, progress).run()
        return Session.of(result, self.store)

    def pause(self, session_id: str) -> None:
        """Ask a session this harness is running (``run``, ``resume``, ``continue_``) to pause
        at its next turn boundary: it finishes the turn it is playing, checkpoints what its
        agents and hooks know, and ends ``paused``; ``resume`` goes on from there.

        Callable from any thread (it only sets a flag); the call that runs the session returns
        the paused :class:`Session`. To pause an experiment, ``experiment.pause()``.
        """
        found = [request for sid, request in self._pauses.items() if sid.startswith(session_id)]
        if not session_id or len(found) != 1:
            running = ", ".join(sorted(self._pauses)) or "none"
            raise ConfigurationError(
                f"session {session_id!r} is not running in this harness, so it cannot be "
                f"paused here (running: {running})"
            )
        found[0].request()

    @asynccontextmanager
    async def _pausable(
        self, session_id: str, request: PauseRequest | None = None
    ) -> AsyncIterator[PauseRequest]:
        request = self._pauses[session_id] = request or PauseRequest()
        try:
            yield request
        finally:
            if self._pauses.get(session_id) is request:
                del self._pauses[session_id]

    async def resume(
        self,
        session_id: str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
    ) -> Session:
        """Continue an interrupted, stopped or paused session after its last complete turn.

        The new segment is linked to the one that ended. If this harness's code differs from
        what the evidence recorded (environment version, agent implementations, harness
        version), the resume is refused with the differences named — unless
        ``declare_changes`` says why, which is then recorded with the segment.
        """
        async with self._writable_store() as store:
            result = await self._resume_in(store, session_id, declare_changes, progress, hooks)
        return Session.of(result, self.store)

    async def resume_experiment(
        self,
        experiment_id: str,
        *,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
    ) -> ExperimentResult:
        """Finish an interrupted, stopped or paused experiment: completed and failed sessions
        are kept, interrupted, stopped and paused ones resume, and those that never started
        start — each with the seed derived for it, so the evidence ends as if nothing had
        happened."""
        return await self._resume_experiment(
            experiment_id,
            declare_changes=declare_changes,
            progress=progress,
            hooks=hooks,
            pause=PauseRequest(),
        )

    async def _resume_experiment(
        self,
        experiment_id: str,
        *,
        declare_changes: str | None,
        progress: ProgressCallback | None,
        hooks: HarnessHooks | None,
        pause: PauseRequest,
    ) -> ExperimentResult:
        async with self._writable_store() as store:
            # A unique prefix names it as in `envharness experiments show`; the chain it
            # continues is the full id's.
            experiment_id = (await store.experiment(experiment_id)).id
            recorded = await read_experiment(store, experiment_id)
            if recorded.status not in RESUMABLE:
                raise ConfigurationError(
                    f"experiment {experiment_id} cannot be resumed: it is {recorded.status}"
                )
            config = recorded.config
            current = self._plan(
                Scenario(id="check", input=config.scenarios[0].input),
                turns=1,
                seed=0,
                hooks=hooks,
            ).config()
            changes = differences(config, current)
            if changes and not declare_changes:
                raise ConfigurationError(
                    f"experiment {experiment_id} was recorded with different code: "
                    f"{'; '.join(changes)}. Resume with the recorded code, or pass "
                    "declare_changes='why' to go on anyway (each resumed session records it)"
                )
            input_type = self._make_environment().spec.input_type
            scenarios = [
                Scenario(
                    id=ref.id,
                    input=msgspec.convert(ref.input, input_type),
                    reference=ref.reference,
                    metadata=ref.metadata,
                )
                for ref in config.scenarios
            ]

            def plan_session(scenario: Scenario[Any], trial: int, seed: int) -> SessionPlan:
                return self._plan(
                    scenario,
                    turns=config.turns,
                    seed=seed,
                    experiment_id=experiment_id,
                    trial=trial,
                    hooks=hooks,
                )

            async def resume_session(
                session_id: str, settling: Callable[[], None]
            ) -> SessionResult:
                return await self._resume_in(
                    store,
                    session_id,
                    declare_changes,
                    progress,
                    hooks,
                    pause=pause,
                    settling=settling,
                )

            resumption = ExperimentResumption(
                head_seq=recorded.head_seq,
                head_digest=recorded.head_digest,
                sessions=recorded.sessions,
                resume_session=resume_session,
            )
            runner = ExperimentRunner(
                store,
                experiment_id,
                config,
                scenarios,
                plan_session,
                progress,
                resumption,
                self._runner_class,
                pause,
            )
            return await runner.run()

    async def checkpoint(self, session_id: str, label: str | None = None) -> CheckpointRef:
        """Record a checkpoint at the session's last complete turn (it must not be running)."""
        async with self._writable_store() as store:
            return await take_checkpoint(store, session_id, label)

    async def checkpoints(self, session_id: str) -> list[CheckpointRef]:
        """The session's checkpoints (by hand, or every ``checkpoint_every`` turns)."""
        store = await read_store(self.store)
        return await list_checkpoints(store, session_id)

    async def branch(
        self, checkpoint: CheckpointRef, *, intervention: Any, reason: str = ""
    ) -> Session:
        """A new session from ``checkpoint`` with ``intervention`` applied, ``paused`` until
        continued. Its lineage is evidence; the parent's history is referenced, not copied."""
        async with self._writable_store() as store:
            child = await branch(store, checkpoint, self._make_environment(), intervention, reason)
            info = await store.session(child)
        return Session(info.id, "paused", info.turns_completed, self.store, info.reason)

    async def continue_(
        self,
        session_id: str,
        *,
        turns: int,
        declare_changes: str | None = None,
        progress: ProgressCallback | None = None,
        hooks: HarnessHooks | None = None,
    ) -> Session:
        """Run ``turns`` more turns of a completed, paused (e.g. branched), stopped or
        interrupted session, in a new segment."""
        _check_count("turns", turns)
        async with self._writable_store() as store:
            result = await self._resume_in(
                store, session_id, declare_changes, progress, hooks, more_turns=turns
            )
        return Session.of(result, self.store)

    async def lineage(self, session_id: str) -> Lineage:
        """Where a session came from (parent and checkpoint) and the branches made from it."""
        store = await read_store(self.store)
        info = await store.session(session_id)
        return await store.lineage(info.id)

    async def compare(self, left: str, right: str) -> Comparison:
        """Aligned per-turn differences of two sessions, and of their scores."""
        store = await read_store(self.store)
        return await compare_sessions(store, left, right)

    async def _resume_in(
        self,
        store: Store,
        session_id: str,
        declare_changes: str | None,
        progress: ProgressCallback | None,
        hooks: HarnessHooks | None = None,
        *,
        more_turns: int | None = None,
        pause: PauseRequest | None = None,
        settling: Callable[[], None] | None = None,
    ) -> SessionResult:
        allowed = RESUMABLE if more_turns is None else CONTINUABLE
        point = await find_resume_point(store, session_id, allowed)
        config = point.config
        environment = self._make_environment()
        scenario: Scenario[Any] = Scenario(
            id=config.scenario.id,
            input=scenario_input(config, environment.spec.input_type),
            reference=config.scenario.reference,
            metadata=config.scenario.metadata,
        )
        plan = SessionPlan(
            session_id=(await store.session(session_id)).id,
            environment=environment,
            agents={n: self._make_agent(n, f) for n, f in self._agent_factories.items()},
            roster=self._roster,
            scenario=scenario,
            input=scenario.input,
            turns=(point.until or config.turns) if more_turns is None else point.turn + more_turns,
            seed=config.seed,
            action_timeout=self._action_timeout,
            experiment_id=config.experiment_id,
            trial=config.trial,
            operations=self._operations,
            checkpoint_every=self._checkpoint_every,
            hooks=self._hooks_for(hooks),
            hook_budget=self._hook_budget,
            max_blocks=self._max_blocks,
        )
        changes = differences(config, plan.config())
        if changes and not declare_changes:
            raise ConfigurationError(
                f"session {plan.session_id} was recorded with different code: "
                f"{'; '.join(changes)}. Resume with the recorded code, or pass "
                "declare_changes='why' to go on anyway (the change is recorded)"
            )
        declared = (*changes, f"declared: {declare_changes}") if declare_changes else ()
        state = restore_state(await store.blob(point.state_digest), environment.spec.state_type)
        until = plan.turns if (more_turns is not None or point.until) else None
        resumption = point.resumption(state, declared, until)
        try:
            if pause is not None:
                plan = dataclasses.replace(plan, pause=pause, settling=settling)
                return await self._runner_class(store, plan, progress, resumption).run()
            async with self._pausable(plan.session_id) as own:
                plan = dataclasses.replace(plan, pause=own)
                return await self._runner_class(store, plan, progress, resumption).run()
        except ChainConflictError as exc:
            raise ConfigurationError(
                f"session {plan.session_id} is being resumed by another process; "
                "only one runner may drive a session"
            ) from exc

    async def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        store = await read_store(self.store)
        return await store.sessions(status=status)

    # -- trajectories, snapshots, datasets (docs/trajectories.md) --------------------------------

    async def trajectory(self, session_id: str) -> Trajectory:
        """The session's trajectory (``session_id`` may be a unique prefix, or an imported
        ``SOURCE:EPISODE``), up to its head now."""
        return await _trajectory(self.store, session_id)

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
        return await _snapshot(self.store, session_ids, label=label, entitlement=entitlement)

    async def snapshots(self) -> list[SnapshotMetadata]:
        return await list_snapshots(await read_store(self.store))

    async def create_dataset(
        self, name: str, snapshot_ids: Sequence[str], *, reward: str | None = None
    ) -> Dataset:
        """An immutable dataset of these snapshots; refused, naming every trajectory and the
        condition it misses, unless all are complete, terminal, entitled and rewarded."""
        return await create_dataset(await read_store(self.store), name, snapshot_ids, reward=reward)

    async def dataset(self, name: str) -> Dataset:
        return await load_dataset(await read_store(self.store), name)

    async def datasets(self) -> list[Dataset]:
        return await list_datasets(await read_store(self.store))

    async def dataset_rows(self, name: str) -> AsyncIterator[DatasetRow]:
        """The dataset's rows (TRL's conversational format), checked against their digests."""
        store = await read_store(self.store)
        async with aclosing(dataset_rows(store, name)) as rows:
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
        """Evidence in and out of this store: ``export_snapshot`` (and imports)."""
        return AsyncSources(self.store)

    async def records(
        self, session_id: str, selection: RecordFilter | None = None
    ) -> AsyncIterator[Record]:
        """The session's records in order (``session_id`` may be a unique prefix), paged."""
        store = await read_store(self.store)
        info = await store.session(session_id)
        async for record in store.records(info.id, selection):
            yield record

    async def verify(self) -> VerifyReport:
        store = await read_store(self.store)
        return await store.verify()

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
        store = await read_store(self.store)
        return await experiment_report(
            store, experiment_id, confidence=confidence, resamples=resamples
        )

    # -- planning ------------------------------------------------------------------------------

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
    ) -> AsyncExperiment:
        """Expand ``scenarios`` x ``trials`` into sessions under one frozen configuration.

        Everything is validated now — scenario inputs, unique ids, counts — so a mistake is a
        :class:`ConfigurationError` before anything is recorded. Nothing runs until
        :meth:`AsyncExperiment.run`. ``hooks`` (default: the harness's) wrap every session's
        participants; their version is the experiment's harness version.
        """
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("an experiment needs a name, e.g. 'baseline sweep'")
        scenarios = list(scenarios)
        if not scenarios:
            raise ConfigurationError(f"experiment {name!r} has no scenarios")
        seen: set[str] = set()
        for scenario in scenarios:
            if not isinstance(scenario, Scenario):
                raise ConfigurationError(
                    f"experiment {name!r}: expected Scenario(id=..., input=...), got "
                    f"{type(scenario).__name__}"
                )
            if scenario.id in seen:
                raise ConfigurationError(
                    f"experiment {name!r}: scenario id {scenario.id!r} appears twice; "
                    "scenario ids must be unique (use trials= to repeat a scenario)"
                )
            seen.add(scenario.id)
        _check_count("trials", trials)
        _check_count("turns", turns)
        concurrency = self._max_concurrency if max_concurrency is None else max_concurrency
        _check_count("max_concurrency", concurrency)
        if len(scenarios) * trials > MAX_COUNT:
            raise ConfigurationError(
                f"experiment {name!r}: {len(scenarios)} scenarios x {trials} trials is more "
                f"sessions than the store can count (at most {MAX_COUNT}); use fewer trials"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, not {seed!r}")
        experiment_id = new_id("exp")
        planned = self._plan(scenarios[0], turns=turns, seed=seed, hooks=hooks)
        sample = planned.config()
        # One environment's spec validates every input: planning each scenario here would
        # build an environment and agents per session only to throw them away.
        input_type = planned.environment.spec.input_type
        inputs = {s.id: validate_input(s, input_type) for s in scenarios}
        config = ExperimentConfig(
            name=name,
            scenarios=tuple(s.reference_record(inputs[s.id]) for s in scenarios),
            trials=trials,
            seed=seed,
            turns=turns,
            max_concurrency=concurrency,
            environment=sample.environment,
            participants=sample.participants,
            envharness_version=sample.envharness_version,
            harness_version=sample.harness_version,
            scoring_version=sample.scoring_version,
            action_timeout=sample.action_timeout,
            operations=sample.operations,
        )

        def plan_session(scenario: Scenario[Any], trial: int, session_seed: int) -> SessionPlan:
            return self._plan(
                scenario,
                turns=turns,
                seed=session_seed,
                experiment_id=experiment_id,
                trial=trial,
                hooks=hooks,
                validated=inputs[scenario.id],
            )

        async def resume(pause: PauseRequest) -> ExperimentResult:
            return await self._resume_experiment(
                experiment_id, declare_changes=None, progress=None, hooks=hooks, pause=pause
            )

        return AsyncExperiment(
            experiment_id,
            config,
            tuple(scenarios),
            plan_session,
            self._writable_store,
            resume,
            self._runner_class,
        )

    def _plan(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int,
        experiment_id: str | None = None,
        trial: int | None = None,
        hooks: HarnessHooks | None = None,
        validated: Any = None,
    ) -> SessionPlan:
        """One session's plan; ``validated`` is the scenario's input when the caller has
        already checked it (an experiment checks all of them before it starts)."""
        if not isinstance(scenario, Scenario):
            raise ConfigurationError(
                f"expected a Scenario(id=..., input=...), got {type(scenario).__name__}"
            )
        _check_count("turns", turns)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, not {seed!r}")
        environment = self._make_environment()
        agents = {
            name: self._make_agent(name, factory) for name, factory in self._agent_factories.items()
        }
        return SessionPlan(
            session_id=new_id("ses"),
            environment=environment,
            agents=agents,
            roster=self._roster,
            scenario=scenario,
            input=(
                validate_input(scenario, environment.spec.input_type)
                if validated is None
                else validated
            ),
            turns=turns,
            seed=seed,
            action_timeout=self._action_timeout,
            experiment_id=experiment_id,
            trial=trial,
            operations=self._operations,
            checkpoint_every=self._checkpoint_every,
            hooks=self._hooks_for(hooks),
            hook_budget=self._hook_budget,
            max_blocks=self._max_blocks,
        )

    def _hooks_for(self, hooks: HarnessHooks | None) -> HarnessHooks | None:
        """The hooks a call asked for, else the harness's own (``None``: no hooks)."""
        return check_hooks(hooks) if hooks is not None else self._hooks

    def _make_environment(self) -> Environment[Any, Any]:
        environment: Environment[Any, Any] = _create(self._environment_factory, "environment")
        spec = getattr(environment, "spec", None)
        if not isinstance(spec, EnvironmentSpec):
            raise ConfigurationError(
                f"environment {type(environment).__name__} has no `spec` EnvironmentSpec; "
                "declare spec = EnvironmentSpec(name=..., version=..., input_type=...)"
            )
        missing = [
            m
            for m in ("initialize", "observe", "resolve", "intervene")
            if not callable(getattr(environment, m, None))
        ]
        if missing:
            raise ConfigurationError(
                f"environment {type(environment).__name__} lacks {', '.join(missing)}(); "
                "an environment defines initialize, observe, resolve and intervene"
            )
        return environment

    def _make_agent(self, participant: str, factory: AgentFactory) -> Agent:
        agent: Agent = _create(factory, f"agent {participant!r}")
        implementation_of(agent, participant)
        return agent


async def _trajectory(path: Path, trajectory_id: str) -> Trajectory:
    return await project(await read_store(path), trajectory_id)


async def _snapshot(
    path: Path,
    session_ids: Sequence[str],
    *,
    label: str,
    entitlement: Entitlement | str | None,
) -> Snapshot:
    if isinstance(session_ids, str):
        raise ConfigurationError(
            f"session_ids must be a list of session ids, e.g. [{session_ids!r}]"
        )
    if isinstance(entitlement, str):
        entitlement = Entitlement(basis=entitlement)
    store = await read_store(path)
    return await freeze(store, session_ids, label=label, entitlement=entitlement)


def _check_factory(factory: Any, what: str) -> Any:
    if not callable(factory):
        hint = (
            " — pass the class (or a zero-argument factory), not an instance: a fresh one is "
            "made for every session"
            if hasattr(factory, "act") or hasattr(factory, "resolve")
            else ""
        )
        raise ConfigurationError(
            f"{what} must be a class or factory, got {type(factory).__name__}{hint}"
        )
    if inspect.isclass(factory) and inspect.isabstract(factory):
        raise ConfigurationError(f"{what} {factory.__name__} is abstract and cannot be created")
    return factory


def _create(factory: Callable[[], _T], what: str) -> _T:
    """Call a user's factory; its failure is a setup error, reported before any session."""
    try:
        return factory()
    except Exception as exc:
        name = getattr(factory, "__qualname__", repr(factory))
        raise ConfigurationError(
            f"{what}: creating it with {name}() raised {type(exc).__name__}: {exc}"
        ) from exc


def _operations(operations: Sequence[EnvironmentOperation]) -> dict[str, EnvironmentOperation]:
    found: dict[str, EnvironmentOperation] = {}
    for operation in operations:
        name = operation_ref(operation).name
        if name in found:
            raise ConfigurationError(f"two operations are named {name!r}; names must differ")
        found[name] = operation
    return found


def _check_count(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, not {value!r}")
    if value > MAX_COUNT:
        raise ConfigurationError(f"{what} must be at most {MAX_COUNT} (2**63 - 1), not {value}")


def _check_participant(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
        raise ConfigurationError(
            f"participant name {name!r} must be a non-empty printable string of at most "
            "64 characters"
        )
    return name


def _roster(
    spec: EnvironmentSpec, participants: list[str], roles: Mapping[str, str]
) -> dict[str, str]:
    unknown = sorted(set(roles) - set(participants))
    if unknown:
        raise ConfigurationError(f"roles names {unknown} that are not in agents {participants}")
    roster: dict[str, str] = {}
    for name in participants:
        role = roles.get(name) or (spec.roles[0] if len(spec.roles) == 1 else None)
        if role is None:
            raise ConfigurationError(
                f"participant {name!r} needs a role: environment {spec.name!r} has roles "
                f"{list(spec.roles)}; pass roles={{{name!r}: ...}}"
            )
        if role not in spec.roles:
            raise ConfigurationError(
                f"participant {name!r} has role {role!r}, but environment {spec.name!r} "
                f"has roles {list(spec.roles)}"
            )
        roster[name] = role
    return roster
