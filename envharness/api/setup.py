"""Validated options: what a user hands the harness, checked once, turned into plans.

Every refusal here is a :class:`ConfigurationError` that names the option and the fix, raised
before anything is recorded. :func:`checked_template` turns the harness's constructor
arguments into a :class:`~envharness.runtime.template.SessionTemplate`;
:func:`plan_run` and :func:`plan_experiment` check one call's arguments and plan from it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from envharness.contracts.agent import (
    Agent,
    AgentFactory,
    AgentStart,
    implementation_of,
    takes_start,
)
from envharness.contracts.budget import Budget
from envharness.contracts.environment import Environment, EnvironmentSpec
from envharness.contracts.operations import EnvironmentOperation, operation_ref
from envharness.contracts.scenario import Scenario, validate_input
from envharness.errors import ConfigurationError
from envharness.hooks import HarnessHooks
from envharness.records import ExperimentConfig, new_id
from envharness.runtime import SessionPlan, SessionRunner
from envharness.runtime.executors.seam import Executor
from envharness.runtime.hooking import (
    DEFAULT_ON_BLOCK_LIMIT,
    OnBlockLimit,
    check_hooks,
    check_on_block_limit,
)
from envharness.runtime.template import SessionTemplate, check_budget

__all__ = [
    "MAX_COUNT",
    "EnvironmentFactory",
    "ExperimentPlanner",
    "PlannedExperiment",
    "checked_budget",
    "check_executor",
    "checked_template",
    "plan_experiment",
    "plan_run",
    "recipe_parts",
]

MAX_COUNT = 2**63 - 1
"""The most turns, trials, sessions of an experiment or sessions at once: the store counts
them in 64-bit integers (SQLite's), so anything larger could not be recorded."""

EnvironmentFactory = Callable[[], Environment[Any, Any]]

_T = TypeVar("_T")


def checked_template(
    *,
    environment: EnvironmentFactory,
    agents: Mapping[str, AgentFactory],
    roles: Mapping[str, str] | None,
    action_timeout: float | None,
    max_concurrency: int,
    operations: Sequence[EnvironmentOperation],
    runner: type[SessionRunner],
    checkpoint_every: int | None,
    hooks: HarnessHooks | None,
    hook_budget: float | None,
    max_blocks: int,
    budget: Budget | None = None,
    on_block_limit: OnBlockLimit = DEFAULT_ON_BLOCK_LIMIT,
) -> SessionTemplate:
    """The harness's constructor arguments, checked; one environment is made to read its spec."""
    agent_factories = _check_agent_factories(agents)
    factories = _Factories(
        _check_factory(environment, "environment"),
        agent_factories,
        frozenset(name for name, factory in agent_factories.items() if takes_start(factory)),
    )
    spec = factories.new_environment().spec
    roster = _roster(spec, list(factories.agents), roles or {})
    if action_timeout is not None and action_timeout <= 0:
        raise ConfigurationError(
            f"action_timeout must be positive seconds or None, not {action_timeout}"
        )
    # The hooks' version is the sessions' harness version: evidence names the patch that ran.
    checked_hooks = check_hooks(hooks) if hooks is not None else None
    if hook_budget is not None and hook_budget <= 0:
        raise ConfigurationError(f"hook_budget must be positive seconds or None, not {hook_budget}")
    check_count("max_blocks", max_blocks)
    on_block_limit = check_on_block_limit(on_block_limit)
    check_count("max_concurrency", max_concurrency)
    named = _operations(operations)
    if not (isinstance(runner, type) and issubclass(runner, SessionRunner)):
        raise ConfigurationError(f"runner must be a SessionRunner subclass, not {runner!r}")
    if checkpoint_every is not None:
        check_count("checkpoint_every", checkpoint_every)
    return SessionTemplate(
        new_environment=factories.new_environment,
        new_agents=factories.new_agents,
        roster=roster,
        action_timeout=action_timeout,
        operations=named,
        checkpoint_every=checkpoint_every,
        hooks=checked_hooks,
        hook_budget=hook_budget,
        max_blocks=max_blocks,
        on_block_limit=on_block_limit,
        runner=runner,
        budget=checked_budget(budget),
        starting=factories.starting,
    )


def plan_run(
    template: SessionTemplate,
    scenario: Scenario[Any],
    *,
    turns: int,
    seed: int,
    experiment_id: str | None = None,
    trial: int | None = None,
    hooks: HarnessHooks | None = None,
    validated: Any = None,
    budget: Budget | None = None,
    session_id: str | None = None,
) -> SessionPlan:
    """One session's plan; ``validated`` is the scenario's input when the caller has already
    checked it (an experiment checks all of them before it starts). ``budget`` replaces the
    template's session budget for this session."""
    if not isinstance(scenario, Scenario):
        raise ConfigurationError(
            f"expected a Scenario(id=..., input=...), got {type(scenario).__name__}"
        )
    check_count("turns", turns)
    check_seed(seed)
    environment = template.new_environment()
    return template.plan(
        scenario,
        validate_input(scenario, environment.spec.input_type) if validated is None else validated,
        turns=turns,
        seed=seed,
        environment=environment,
        session_id=session_id,
        experiment_id=experiment_id,
        trial=trial,
        hooks=hooks,
        budget=checked_budget(budget),
    )


@dataclass(frozen=True, slots=True)
class PlannedExperiment:
    """An experiment's frozen configuration and its scenarios' validated inputs."""

    id: str
    config: ExperimentConfig
    scenarios: tuple[Scenario[Any], ...]
    inputs: Mapping[str, Any]
    hooks: HarnessHooks | None
    budget: Budget | None = None
    """What the whole experiment may spend (all its sessions, and its wall time)."""
    executor: Executor | None = None
    """Where its sessions run (``None``: in this process)."""

    def plan_session(
        self,
        template: SessionTemplate,
        scenario: Scenario[Any],
        trial: int,
        seed: int,
        /,
        session_id: str | None = None,
    ) -> SessionPlan:
        return self.planner(template)(scenario, trial, seed, session_id=session_id)

    def planner(self, template: SessionTemplate) -> ExperimentPlanner:
        """What plans its sessions from ``template``: only what a session needs, so that it
        is all a remote executor sends its workers."""
        return ExperimentPlanner(template, self.id, self.config.turns, self.inputs, self.hooks)


@dataclass(frozen=True, slots=True)
class ExperimentPlanner:
    """Plans one experiment's sessions (see :class:`PlannedExperiment`)."""

    template: SessionTemplate
    experiment_id: str
    turns: int
    inputs: Mapping[str, Any]
    """Each scenario's input, validated once for the whole experiment."""
    hooks: HarnessHooks | None

    def __call__(
        self, scenario: Scenario[Any], trial: int, seed: int, /, session_id: str | None = None
    ) -> SessionPlan:
        # Straight to the template: the experiment checked its scenarios, turns and seed
        # when it was planned, and every session would pay for checking them again.
        return self.template.plan(
            scenario,
            self.inputs[scenario.id],
            turns=self.turns,
            seed=seed,
            session_id=session_id,
            experiment_id=self.experiment_id,
            trial=trial,
            hooks=self.hooks,
        )


def plan_experiment(
    template: SessionTemplate,
    name: str,
    scenarios: Sequence[Scenario[Any]],
    *,
    turns: int,
    trials: int,
    seed: int,
    max_concurrency: int,
    hooks: HarnessHooks | None,
    budget: Budget | None = None,
    executor: Executor | None = None,
) -> PlannedExperiment:
    """Check an experiment's arguments and freeze its configuration (nothing runs yet); an
    executor that cannot run it (a factory a worker process cannot import) is refused here."""
    budget = checked_budget(budget)
    check_executor(executor)
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
    check_count("trials", trials)
    check_count("turns", turns)
    check_count("max_concurrency", max_concurrency)
    if len(scenarios) * trials > MAX_COUNT:
        raise ConfigurationError(
            f"experiment {name!r}: {len(scenarios)} scenarios x {trials} trials is more "
            f"sessions than the store can count (at most {MAX_COUNT}); use fewer trials"
        )
    check_seed(seed)
    planned = plan_run(template, scenarios[0], turns=turns, seed=seed, hooks=hooks)
    sample = planned.config()
    # One environment's spec validates every input: planning each scenario here would build
    # an environment and agents per session only to throw them away.
    input_type = planned.environment.spec.input_type
    inputs = {s.id: validate_input(s, input_type) for s in scenarios}
    config = ExperimentConfig(
        name=name,
        scenarios=tuple(s.reference_record(inputs[s.id]) for s in scenarios),
        trials=trials,
        seed=seed,
        turns=turns,
        max_concurrency=max_concurrency,
        environment=sample.environment,
        participants=sample.participants,
        envharness_version=sample.envharness_version,
        harness_version=sample.harness_version,
        scoring_version=sample.scoring_version,
        action_timeout=sample.action_timeout,
        operations=sample.operations,
    )
    experiment = PlannedExperiment(
        new_id("exp"), config, tuple(scenarios), inputs, hooks, budget, executor
    )
    if executor is not None:
        executor.check(experiment.planner(template), recipe_parts(template, hooks))
    return experiment


def check_executor(executor: object) -> None:
    """``None`` (in process) or an executor; anything else is refused, naming the choices."""
    if executor is None or (
        callable(getattr(executor, "serving", None)) and callable(getattr(executor, "check", None))
    ):
        return
    raise ConfigurationError(
        f"executor must be an executor from envharness.runtime.executors — "
        f"ProcessPoolExecutor(workers=N), RayExecutor(...) — or None to run in this process; "
        f"got {type(executor).__name__} {executor!r:.80}"
    )


def recipe_parts(template: SessionTemplate, hooks: HarnessHooks | None) -> list[tuple[str, object]]:
    """What a remote executor must send of ``template``, each named as the user knows it, so
    that the part that cannot travel is the one an error names."""
    parts: list[tuple[str, object]] = []
    factories = getattr(template.new_environment, "__self__", None)
    if isinstance(factories, _Factories):
        parts.append(("the environment factory", factories.environment))
        agents = factories.agents.items()
        parts.extend((f"the factory of agent {name!r}", factory) for name, factory in agents)
    operations = template.operations.items()
    parts.extend((f"operation {name!r}", operation) for name, operation in operations)
    used = template.hooks_for(hooks)
    if used is not None:
        parts.append(("the harness hooks", used))
    parts.append(("the session runner class", template.runner))
    return parts


def checked_budget(budget: Any, what: str = "budget") -> Budget | None:
    """``None`` (no limit) or a :class:`Budget`; anything else is refused, naming it."""
    return None if budget is None else check_budget(budget, what)


def check_count(what: str, value: Any) -> None:
    """A positive integer the store can count."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer, not {value!r}")
    if value > MAX_COUNT:
        raise ConfigurationError(f"{what} must be at most {MAX_COUNT} (2**63 - 1), not {value}")


def check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigurationError(f"seed must be an integer, not {seed!r}")


@dataclass(frozen=True, slots=True)
class _Factories:
    """The user's factories; each call makes a fresh, checked object."""

    environment: EnvironmentFactory
    agents: Mapping[str, AgentFactory]
    starting: frozenset[str]
    """The participants whose factories take ``context`` (found once, by signature)."""

    def new_environment(self) -> Environment[Any, Any]:
        environment: Environment[Any, Any] = _create(self.environment, "environment")
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
        if spec.turn_order == "environment" and not callable(getattr(environment, "acting", None)):
            raise ConfigurationError(
                f"environment {type(environment).__name__} declares turn_order='environment' "
                "but has no acting(state) method; define acting(state) -> list of the "
                "participants who act next"
            )
        return environment

    def new_agents(self, starts: Mapping[str, AgentStart]) -> dict[str, Agent]:
        """Fresh agents; a factory that takes ``context`` is given its participant's start
        (``starts`` holds those participants' only: the template's ``starting``)."""
        agents: dict[str, Agent] = {}
        for participant, factory in self.agents.items():
            made: Callable[[], Agent] = factory
            if participant in self.starting:
                made = functools.partial(factory, context=starts[participant])
            agent: Agent = _create(made, f"agent {participant!r}", factory)
            implementation_of(agent, participant)
            agents[participant] = agent
        return agents


def _check_agent_factories(agents: Mapping[str, AgentFactory]) -> dict[str, AgentFactory]:
    if not agents:
        raise ConfigurationError(
            "agents is empty; give at least one participant, e.g. agents={'alice': MyAgent}"
        )
    return {
        _check_participant(name): _check_factory(factory, f"agent {name!r}")
        for name, factory in agents.items()
    }


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


def _create(factory: Callable[[], _T], what: str, named: object = None) -> _T:
    """Call a user's factory; its failure is a setup error, reported before any session.
    ``named`` is the user's factory when ``factory`` wraps it."""
    try:
        return factory()
    except Exception as exc:
        shown = factory if named is None else named
        name = getattr(shown, "__qualname__", repr(shown))
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
