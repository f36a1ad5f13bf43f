"""The public entry points: :class:`AsyncEnvironmentHarness` and its blocking twin.

The async harness is the one implementation. :class:`EnvironmentHarness` runs each call on an
event loop in a helper thread through an anyio blocking portal, so scripts and notebooks (whose
own loop may already be running) get the same behaviour without a second code path.
"""

from __future__ import annotations

import concurrent.futures
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, ParamSpec, Self, TypeVar

import msgspec
from anyio.from_thread import BlockingPortal, start_blocking_portal

from envharness.agent import Agent, AgentFactory, implementation_of
from envharness.environment import Environment, EnvironmentSpec
from envharness.errors import ConfigurationError
from envharness.experiments import AsyncExperiment, Experiment
from envharness.records import ErrorInfo, ExperimentConfig, Record, Status, new_id
from envharness.runtime import ProgressCallback, SessionPlan, SessionRunner
from envharness.scenario import Scenario, validate_input
from envharness.store import (
    RecordFilter,
    SessionInfo,
    Store,
    VerifyReport,
    open_store,
    read_store,
)

__all__ = ["AsyncEnvironmentHarness", "EnvironmentHarness", "Session"]

RECORDS_PAGE = 2000
"""Records the blocking ``records()`` fetches per trip to the event loop."""
DEFAULT_MAX_CONCURRENCY = 4
"""Sessions an experiment runs at once unless told otherwise."""
DEFAULT_ACTION_TIMEOUT = 120.0
"""Seconds an agent may take for one action before its session fails (``None``: no limit)."""

_P = ParamSpec("_P")
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
        harness_version: str | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
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
        self._harness_version = harness_version
        _check_count("max_concurrency", max_concurrency)
        self._max_concurrency = max_concurrency
        self._open: Store | None = None
        self._exit_stack: AsyncExitStack | None = None

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
    ) -> Session:
        """Run one standalone session to its end and return how it ended.

        Agent and environment failures end the session ``failed`` (see ``Session.reason``);
        they are not raised. Bad arguments raise :class:`ConfigurationError` before anything
        is recorded.
        """
        plan = self._plan(scenario, turns=turns, seed=seed)
        async with self._writable_store() as store:
            result = await SessionRunner(store, plan, progress).run()
        return Session(
            id=result.id,
            status=result.status,
            turns_completed=result.turns_completed,
            store=self.store,
            reason=result.reason,
            error=result.error,
        )

    async def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        store = await read_store(self.store)
        return await store.sessions(status=status)

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
    ) -> AsyncExperiment:
        """Expand ``scenarios`` x ``trials`` into sessions under one frozen configuration.

        Everything is validated now — scenario inputs, unique ids, counts — so a mistake is a
        :class:`ConfigurationError` before anything is recorded. Nothing runs until
        :meth:`AsyncExperiment.run`.
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
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigurationError(f"seed must be an integer, not {seed!r}")
        experiment_id = new_id("exp")
        inputs = {s.id: self._plan(s, turns=turns, seed=seed).input for s in scenarios}
        sample = self._plan(scenarios[0], turns=turns, seed=seed).config()
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
        )

        def plan_session(scenario: Scenario[Any], trial: int, session_seed: int) -> SessionPlan:
            return self._plan(
                scenario, turns=turns, seed=session_seed, experiment_id=experiment_id, trial=trial
            )

        return AsyncExperiment(
            experiment_id, config, tuple(scenarios), plan_session, self._writable_store
        )

    def _plan(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int,
        experiment_id: str | None = None,
        trial: int | None = None,
    ) -> SessionPlan:
        if not isinstance(scenario, Scenario):
            raise ConfigurationError(
                f"expected a Scenario(id=..., input=...), got {type(scenario).__name__}"
            )
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise ConfigurationError(f"turns must be a positive integer, not {turns!r}")
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
            input=validate_input(scenario, environment.spec.input_type),
            turns=turns,
            seed=seed,
            action_timeout=self._action_timeout,
            harness_version=self._harness_version,
            experiment_id=experiment_id,
            trial=trial,
        )

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
        harness_version: str | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        self.aio = AsyncEnvironmentHarness(
            store,
            environment=environment,
            agents=agents,
            roles=roles,
            action_timeout=action_timeout,
            harness_version=harness_version,
            max_concurrency=max_concurrency,
        )

        self._portal: BlockingPortal | None = None
        self._exit_stack: ExitStack | None = None

    @property
    def store(self) -> Path:
        return self.aio.store

    def __enter__(self) -> Self:
        """Keep one event loop and the open store across calls (see the async harness)."""
        if self._exit_stack is not None:
            raise ConfigurationError("this harness is already open; enter it only once")
        with ExitStack() as stack:
            self._portal = stack.enter_context(start_blocking_portal())
            stack.enter_context(self._portal.wrap_async_context_manager(self.aio))
            self._exit_stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        stack, self._exit_stack, self._portal = self._exit_stack, None, None
        if stack is not None:
            stack.close()

    def _blocking(
        self, function: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        with self._portal_for_call() as portal:

            async def call() -> _T:
                return await function(*args, **kwargs)

            future = portal.start_task_soon(call)
            try:
                return future.result()
            except KeyboardInterrupt:
                # Cancel the call and wait while it records how it ended (``stopped``), also
                # when the portal outlives this call (``with EnvironmentHarness(...)``).
                future.cancel()
                concurrent.futures.wait([future])
                raise

    @contextmanager
    def _portal_for_call(self) -> Iterator[BlockingPortal]:
        if self._portal is not None:
            yield self._portal
            return
        with start_blocking_portal() as portal:
            yield portal

    def run(
        self,
        scenario: Scenario[Any],
        *,
        turns: int,
        seed: int = 0,
        progress: ProgressCallback | None = None,
    ) -> Session:
        return self._blocking(self.aio.run, scenario, turns=turns, seed=seed, progress=progress)

    def experiment(
        self,
        name: str,
        scenarios: Sequence[Scenario[Any]],
        *,
        turns: int,
        trials: int = 1,
        seed: int = 0,
        max_concurrency: int | None = None,
    ) -> Experiment:
        """See :meth:`AsyncEnvironmentHarness.experiment`; ``run()`` it, or ``start()``."""
        aio = self.aio.experiment(
            name,
            scenarios,
            turns=turns,
            trials=trials,
            seed=seed,
            max_concurrency=max_concurrency,
        )
        return Experiment(aio, self._portal)

    def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        return self._blocking(self.aio.sessions, status=status)

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

            records = self._blocking(page)
            yield from records
            if len(records) < size:
                return
            after = records[-1].seq
            if remaining is not None:
                remaining -= len(records)

    def verify(self) -> VerifyReport:
        return self._blocking(self.aio.verify)


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


def _check_count(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, not {value!r}")


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
