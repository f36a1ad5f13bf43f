"""A validated manifest, and how it becomes a harness and an experiment: importing the
environment, the Python agents and the hooks, each failure reported against the file."""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from envharness._portal import call_blocking
from envharness.adapters.registry import command_environment, has_scheme, load_environment
from envharness.api.blocking import EnvironmentHarness
from envharness.api.experiments import AsyncExperiment, Experiment
from envharness.api.harness import (
    AsyncEnvironmentHarness,
)
from envharness.contracts.budget import Budget
from envharness.contracts.command_agent import DEFAULT_INHERITED_ENV, CommandAgent
from envharness.contracts.environment import EnvironmentSpec
from envharness.contracts.scenario import Scenario, validate_input
from envharness.errors import ConfigurationError, EnvharnessError
from envharness.hooks import HarnessHooks
from envharness.manifest.document import ManifestError, Places
from envharness.manifest.keys import (
    KeyLines,
    KeyPath,
    did_you_mean,
    dotted,
)
from envharness.manifest.model_agents import ModelAgentSpec, model_agent, model_provider
from envharness.optimizer.patches.executable import ExecutableHarness
from envharness.optimizer.patches.sandbox import LocalSandbox
from envharness.optimizer.versions import harness_version
from envharness.runtime.executors import Executor
from envharness.runtime.hooking import check_hooks
from envharness.store.locate import reading_store

PYTHON = "{python}"
"""In an agent's ``command``, a word that stands for the Python running envharness
(``sys.executable``): a program in the same virtual environment, with no PATH lookup."""

HOOKS_KEY: KeyPath = ("experiment", "hooks")
HARNESS_KEY: KeyPath = ("experiment", "harness")

_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)
_H = TypeVar("_H", AsyncEnvironmentHarness, EnvironmentHarness)


@dataclass(frozen=True, slots=True)
class ManifestAgent:
    """One participant: a Python agent (``factory``), a program (``command``) or a model
    (``model``)."""

    name: str
    factory: str | None = None
    """``module:attribute`` of the agent class or zero-argument factory."""
    command: CommandAgent | None = None
    role: str | None = None
    model: ModelAgentSpec | None = None
    """A model agent's settings; the agent itself is built with the harness."""


@dataclass(frozen=True, slots=True)
class ManifestProgram:
    """An environment that is a program speaking the environment protocol: its checked
    command line (``{python}`` replaced), working directory and variables."""

    command: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    inherit_env: tuple[str, ...] = DEFAULT_INHERITED_ENV


@dataclass(frozen=True, slots=True)
class Manifest:
    """A validated experiment manifest. Build the experiment with :meth:`experiment`."""

    path: Path
    name: str
    turns: int
    trials: int
    seed: int
    max_concurrency: int
    action_timeout: float | None
    """Seconds per action, or ``None`` for no limit (``action_timeout = 0`` in the file)."""
    environment: str
    """The environment: ``module:attribute`` of its class or factory, an adapter reference
    (``gymnasium:Taxi-v4``, ``pettingzoo:classic.leduc_holdem_v4``, ``textworld:game.z8``),
    or for a program (:attr:`environment_program`) its command line."""
    agents: tuple[ManifestAgent, ...]
    scenarios: tuple[Scenario[Any], ...]
    _inputs: Places = field(repr=False)
    _lines: KeyLines = field(repr=False)
    hooks: str | None = None
    """``module:attribute`` of the hooks: a ``HarnessHooks``, or a zero-argument factory of one."""
    harness_version: str | None = None
    """An accepted harness version (``harness-v2``), read from the store the experiment
    records into and run in a :class:`~envharness.optimizer.LocalSandbox`."""
    environment_program: ManifestProgram | None = None
    """The environment's program, when it is one (``[environment] command = ...``)."""
    environment_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for the environment's adapter or factory (``[environment]
    options``), e.g. ``max_episode_steps`` for Gymnasium."""
    environment_key: KeyPath = ("environment", "factory")
    """Where the environment is written, for errors about it."""
    budget: Budget | None = None
    """What the whole experiment may spend (``[experiment] budget``)."""
    session_budget: Budget | None = None
    """What each session may spend (``[experiment] session_budget``)."""

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent

    def async_harness(
        self, store: str | PathLike[str], *, hooks: HarnessHooks | None = None
    ) -> AsyncEnvironmentHarness:
        """Import the environment, the Python agents and the hooks, and make the harness for
        ``store``. A stored ``harness`` version is read from the store, which is async work:
        pass ``hooks=await manifest.async_load_hooks(store)`` (or use :meth:`harness`)."""
        if hooks is None and self.harness_version is not None:
            raise self._error(
                HARNESS_KEY,
                f"harness = {self.harness_version!r} is read from the store: in async code pass "
                "hooks=await manifest.async_load_hooks(store) to async_harness/async_experiment",
            )
        if hooks is None:
            hooks = self._imported_hooks()
        return self._built(AsyncEnvironmentHarness, store, hooks)

    def harness(
        self, store: str | PathLike[str], *, hooks: HarnessHooks | None = None
    ) -> EnvironmentHarness:
        """The blocking twin of :meth:`async_harness`; it reads a stored ``harness`` itself."""
        if hooks is None:
            hooks = self.load_hooks(store)
        return self._built(EnvironmentHarness, store, hooks)

    def async_experiment(
        self,
        store: str | PathLike[str],
        *,
        hooks: HarnessHooks | None = None,
        executor: Executor | None = None,
    ) -> AsyncExperiment:
        """The experiment, ready to ``await run()``; nothing is recorded before that.
        ``executor`` is where its sessions run (``None``: in this process)."""
        harness = self.async_harness(store, hooks=hooks)
        return self._configured(
            lambda: harness.experiment(
                self.name,
                self.scenarios,
                turns=self.turns,
                trials=self.trials,
                seed=self.seed,
                budget=self.budget,
                executor=executor,
            )
        )

    def experiment(
        self,
        store: str | PathLike[str],
        *,
        hooks: HarnessHooks | None = None,
        executor: Executor | None = None,
    ) -> Experiment:
        """The experiment for blocking code: ``run()``, or ``start()`` then ``wait()``."""
        harness = self.harness(store, hooks=hooks)
        return self._configured(
            lambda: harness.experiment(
                self.name,
                self.scenarios,
                turns=self.turns,
                trials=self.trials,
                seed=self.seed,
                budget=self.budget,
                executor=executor,
            )
        )

    async def async_load_hooks(self, store: str | PathLike[str]) -> HarnessHooks | None:
        """The hooks the manifest names (``None`` when it names none): imported, or the stored
        ``harness`` version read from ``store``."""
        if self.harness_version is None:
            return self._imported_hooks()
        try:
            async with reading_store(store) as reader:
                version = await harness_version(reader, self.harness_version)
            patch = version.harness_patch()
            hooks = ExecutableHarness.from_patch(
                patch, sandbox=LocalSandbox(), version=version.version
            )
        except EnvharnessError as exc:
            raise self._error(
                HARNESS_KEY, f"{exc}; `envharness --store STORE harness list` shows the versions"
            ) from exc
        self._check_environment(version.environment)
        return hooks

    def load_hooks(self, store: str | PathLike[str]) -> HarnessHooks | None:
        """The blocking twin of :meth:`async_load_hooks`."""
        if self.harness_version is None:
            return self._imported_hooks()
        return call_blocking(lambda: self.async_load_hooks(store))

    # -- internals -----------------------------------------------------------------------------

    def _built(
        self, kind: Callable[..., _H], store: str | PathLike[str], hooks: HarnessHooks | None
    ) -> _H:
        environment, agents, roles = self._parts()
        return self._configured(
            lambda: kind(
                store,
                environment=environment,
                agents=agents,
                roles=roles,
                action_timeout=self.action_timeout,
                max_concurrency=self.max_concurrency,
                hooks=hooks,
                budget=self.session_budget,
            )
        )

    def _imported_hooks(self) -> HarnessHooks | None:
        if self.hooks is None:
            return None
        value = self._load(self.hooks, HOOKS_KEY)
        if isinstance(value, type) or (callable(value) and not isinstance(value, HarnessHooks)):
            try:
                value = value()
            except Exception as exc:  # the user's factory raised: name it, no traceback
                raise self._error(
                    HOOKS_KEY,
                    f"calling {self.hooks!r} to make the hooks raised {type(exc).__name__}: {exc}",
                ) from exc
        try:
            return check_hooks(value)
        except ConfigurationError as exc:
            raise self._error(
                HOOKS_KEY,
                f"{self.hooks!r} gave {type(value).__name__}, not hooks: {exc}; point it at a "
                "HarnessHooks object or at a zero-argument function that returns one",
            ) from None

    def _check_environment(self, learned_on: str | None) -> None:
        """A stored version runs only on the environment it was learned on (by name): version
        names count across the store, so a wrong number can name another environment's."""
        spec = getattr(self._environment_factory(), "spec", None)
        if learned_on is None or not isinstance(spec, EnvironmentSpec):
            return
        if learned_on.rpartition("@")[0] != spec.name:
            raise self._error(
                HARNESS_KEY,
                f"{self.harness_version} was learned on environment {learned_on}, but this "
                f"experiment's environment is {spec.name}@{spec.version}; name a version of "
                f"{spec.name!r} (`envharness --store STORE harness list` shows each one's)",
            )

    def _environment_factory(self) -> Any:
        """The environment factory: imported, an adapter, or a program's (started once to
        read its spec); each failure reported against the line that names it."""
        key = self.environment_key
        program = self.environment_program
        try:
            if program is not None:
                return command_environment(
                    program.command,
                    cwd=program.cwd,
                    options={"env": dict(program.env), "inherit_env": program.inherit_env},
                    what="the environment program",
                )
            if has_scheme(self.environment):
                return load_environment(
                    self.environment,
                    options=self.environment_options,
                    base=self.folder,
                    what="",
                )
        except ManifestError:
            raise
        except ConfigurationError as exc:
            raise self._error(key, str(exc)) from exc
        factory = self._load(self.environment, key)
        if self.environment_options:
            return functools.partial(factory, **self.environment_options)
        return factory

    def _parts(self) -> tuple[Any, dict[str, Any], dict[str, str]]:
        environment = self._environment_factory()
        spec = getattr(environment, "spec", None)
        if isinstance(spec, EnvironmentSpec):  # a class attribute: check inputs without one
            for scenario in self.scenarios:
                try:
                    validate_input(scenario, spec.input_type)
                except ConfigurationError as exc:
                    raise self._inputs[scenario.id].error(str(exc)) from None
            self._check_roles(spec)
        agents: dict[str, Any] = {}
        for agent in self.agents:
            if agent.command is not None:
                agents[agent.name] = agent.command
            elif agent.model is not None:
                agents[agent.name] = self._model_agent(agent.name, agent.model)
            else:
                assert agent.factory is not None
                agents[agent.name] = self._load(agent.factory, ("agents", agent.name, "factory"))
        roles = {agent.name: agent.role for agent in self.agents if agent.role is not None}
        return environment, agents, roles

    def _model_agent(self, name: str, spec: ModelAgentSpec) -> Any:
        """The model agent, its endpoint, key and template checked; a failure names the key
        to change (the endpoint's, or the model's when the endpoint comes from
        ``$OPENAI_BASE_URL``)."""
        path: KeyPath = ("agents", name)
        try:
            provider = model_provider(spec)
        except ConfigurationError as exc:
            key = "base_url" if spec.base_url is not None else "model"
            raise self._error((*path, key), str(exc)) from None
        try:
            return model_agent(spec, provider)
        except ConfigurationError as exc:
            key = "template" if spec.template is not None else "model"
            raise self._error((*path, key), str(exc)) from None

    def _check_roles(self, spec: EnvironmentSpec) -> None:
        roles = list(spec.roles)
        for agent in self.agents:
            path: KeyPath = ("agents", agent.name)
            if agent.role is not None and agent.role not in roles:
                raise self._error(
                    (*path, "role"),
                    f"role {agent.role!r} is not a role of environment {spec.name!r}, "
                    f"which has {roles}",
                )
            if agent.role is None and len(roles) > 1:
                raise self._error(
                    path, f"needs role = ...: environment {spec.name!r} has roles {roles}"
                )

    def _error(self, path: KeyPath, problem: str) -> ManifestError:
        return ManifestError(
            problem, file=self.path, line=self._lines.line_of(path), key=dotted(path)
        )

    def _load(self, reference: str, path: KeyPath) -> Any:
        module_name, _, attribute = reference.partition(":")
        folder = str(self.folder)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        try:
            value: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
                raise self._error(
                    path,
                    f"no module named {exc.name!r} (looked beside the manifest in {folder!r} "
                    "and on the Python path)",
                ) from exc
            raise self._error(
                path, f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        except Exception as exc:  # the user's module raised while importing
            raise self._error(
                path, f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        for part in attribute.split("."):
            if not hasattr(value, part):
                public = [name for name in dir(value) if not name.startswith("_")]
                raise self._error(
                    path,
                    f"{reference!r}: {getattr(value, '__name__', module_name)} has no attribute "
                    f"{part!r}{did_you_mean(part, public)}",
                )
            value = getattr(value, part)
        return value

    def _configured(self, make: Callable[[], _R]) -> _R:
        """Run ``make``; a setup mistake the harness finds is reported against this file."""
        try:
            return make()
        except ManifestError:
            raise
        except ConfigurationError as exc:
            raise ManifestError(str(exc), file=self.path) from exc
