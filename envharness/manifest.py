"""Experiments described in a TOML file, so a team whose agents are not Python writes no Python.

``load_manifest(path)`` reads and validates the whole file — every key, every scenario, every
agent command — and returns a :class:`Manifest`; nothing is imported or run yet. Its
``experiment(store)`` (or ``async_experiment``) then imports the environment and the Python
agents and returns an ordinary experiment handle. The format is ``docs/manifests.md``::

    [experiment]
    name = "synthetic sweep"
    turns = 5
    trials = 2
    seed = 42

    [environment]
    factory = "envharness.fixtures:SyntheticEnvironment"

    [agents.alice]
    factory = "envharness.fixtures:SyntheticAgent"

    [agents.bob]
    command = ["{python}", "agents/python/echo_agent.py"]
    implementation = "echo-agent-python@1"

    [scenarios]
    file = "scenarios.jsonl"

``[experiment]`` may name hooks around every participant: ``hooks = "module:attribute"`` (a
:class:`~envharness.hooks.HarnessHooks`, or a zero-argument factory of one), or ``harness =
"harness-v2"``, a version the optimizer accepted into the store the experiment records into.

Every mistake is a :class:`ManifestError` naming the file, the line and the key. Paths (``cwd``,
``scenarios.file``) are relative to the manifest's folder, which is also where an agent program
runs unless ``cwd`` says otherwise and where ``module:attribute`` references are imported from
first.
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Annotated, Any, TypeAlias, TypeVar

import msgspec

from envharness.blocking import EnvironmentHarness
from envharness.command_agent import DEFAULT_INHERITED_ENV, CommandAgent
from envharness.environment import EnvironmentSpec
from envharness.errors import ConfigurationError, EnvharnessError
from envharness.experiments import AsyncExperiment, Experiment
from envharness.harness import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    AsyncEnvironmentHarness,
)
from envharness.hooks import HarnessHooks
from envharness.manifest_keys import (
    KeyLines,
    KeyPath,
    did_you_mean,
    dotted,
    parse_validation,
    toml_type,
    unknown_key,
)
from envharness.optimizer.executable import ExecutableHarness
from envharness.optimizer.sandbox import LocalSandbox
from envharness.optimizer.versions import harness_version
from envharness.runtime.hooking import check_hooks
from envharness.scenario import Scenario, validate_input
from envharness.sources import call_blocking
from envharness.store import read_store

__all__ = ["PYTHON", "Manifest", "ManifestAgent", "ManifestError", "load_manifest"]

PYTHON = "{python}"
"""In an agent's ``command``, a word that stands for the Python running envharness
(``sys.executable``): a program in the same virtual environment, with no PATH lookup."""

_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)
_H = TypeVar("_H", AsyncEnvironmentHarness, EnvironmentHarness)

_HOOKS: KeyPath = ("experiment", "hooks")
_HARNESS: KeyPath = ("experiment", "harness")


class ManifestError(ConfigurationError):
    """A manifest that cannot be used; ``file``, ``line`` and ``key`` say where (each may be
    ``None`` when unknown), and the message says what to change."""

    def __init__(
        self, problem: str, *, file: Path, line: int | None = None, key: str | None = None
    ) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.problem = problem
        where = f"{file}:{line}" if line is not None else str(file)
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")


# -- the schema --------------------------------------------------------------------------------

_Positive = Annotated[int, msgspec.Meta(ge=1)]


class _ExperimentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    turns: _Positive
    seed: int = 0
    trials: _Positive = 1
    max_concurrency: _Positive = DEFAULT_MAX_CONCURRENCY
    action_timeout: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_ACTION_TIMEOUT
    hooks: str | None = None
    harness: str | None = None


class _EnvironmentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    factory: str | None = None
    command: list[str] | str | None = None


class _AgentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    factory: str | None = None
    command: list[str] | str | None = None
    implementation: str | None = None
    env: dict[str, str] = {}
    inherit_env: list[str] = []
    cwd: str | None = None
    role: str | None = None


class _ScenarioEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str
    input: Any
    reference: Any = None
    metadata: dict[str, Any] = {}


class _ScenariosTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    items: list[_ScenarioEntry] | None = None
    file: str | None = None


class _Document(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    experiment: _ExperimentTable
    environment: _EnvironmentTable
    agents: dict[str, _AgentTable]
    scenarios: _ScenariosTable


_COMMAND_ONLY = ("implementation", "env", "inherit_env", "cwd")


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a value is: a file (the manifest, or a JSONL file), a line, a key."""

    file: Path
    line: int | None
    key: str | None

    def error(self, problem: str) -> ManifestError:
        return ManifestError(problem, file=self.file, line=self.line, key=self.key)


_Places: TypeAlias = dict[str, _Place]
"""Scenario id -> where its input is written, for input errors found when importing."""


@dataclass(frozen=True, slots=True)
class ManifestAgent:
    """One participant: a Python agent (``factory``) or a program (``command``)."""

    name: str
    factory: str | None = None
    """``module:attribute`` of the agent class or zero-argument factory."""
    command: CommandAgent | None = None
    role: str | None = None


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
    """``module:attribute`` of the environment class or factory."""
    agents: tuple[ManifestAgent, ...]
    scenarios: tuple[Scenario[Any], ...]
    _inputs: _Places = field(repr=False)
    _lines: KeyLines = field(repr=False)
    hooks: str | None = None
    """``module:attribute`` of the hooks: a ``HarnessHooks``, or a zero-argument factory of one."""
    harness_version: str | None = None
    """An accepted harness version (``harness-v2``), read from the store the experiment
    records into and run in a :class:`~envharness.optimizer.LocalSandbox`."""

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
                _HARNESS,
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
        self, store: str | PathLike[str], *, hooks: HarnessHooks | None = None
    ) -> AsyncExperiment:
        """The experiment, ready to ``await run()``; nothing is recorded before that."""
        harness = self.async_harness(store, hooks=hooks)
        return self._configured(
            lambda: harness.experiment(
                self.name, self.scenarios, turns=self.turns, trials=self.trials, seed=self.seed
            )
        )

    def experiment(
        self, store: str | PathLike[str], *, hooks: HarnessHooks | None = None
    ) -> Experiment:
        """The experiment for blocking code: ``run()``, or ``start()`` then ``wait()``."""
        harness = self.harness(store, hooks=hooks)
        return self._configured(
            lambda: harness.experiment(
                self.name, self.scenarios, turns=self.turns, trials=self.trials, seed=self.seed
            )
        )

    async def async_load_hooks(self, store: str | PathLike[str]) -> HarnessHooks | None:
        """The hooks the manifest names (``None`` when it names none): imported, or the stored
        ``harness`` version read from ``store``."""
        if self.harness_version is None:
            return self._imported_hooks()
        try:
            version = await harness_version(await read_store(store), self.harness_version)
            patch = version.harness_patch()
            hooks = ExecutableHarness.from_patch(
                patch, sandbox=LocalSandbox(), version=version.version
            )
        except EnvharnessError as exc:
            raise self._error(
                _HARNESS, f"{exc}; `envharness --store STORE harness list` shows the versions"
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
            )
        )

    def _imported_hooks(self) -> HarnessHooks | None:
        if self.hooks is None:
            return None
        value = self._load(self.hooks, _HOOKS)
        if isinstance(value, type) or (callable(value) and not isinstance(value, HarnessHooks)):
            try:
                value = value()
            except Exception as exc:  # the user's factory raised: name it, no traceback
                raise self._error(
                    _HOOKS,
                    f"calling {self.hooks!r} to make the hooks raised {type(exc).__name__}: {exc}",
                ) from exc
        try:
            return check_hooks(value)
        except ConfigurationError as exc:
            raise self._error(
                _HOOKS,
                f"{self.hooks!r} gave {type(value).__name__}, not hooks: {exc}; point it at a "
                "HarnessHooks object or at a zero-argument function that returns one",
            ) from None

    def _check_environment(self, learned_on: str | None) -> None:
        """A stored version runs only on the environment it was learned on (by name): version
        names count across the store, so a wrong number can name another environment's."""
        spec = getattr(self._load(self.environment, ("environment", "factory")), "spec", None)
        if learned_on is None or not isinstance(spec, EnvironmentSpec):
            return
        if learned_on.rpartition("@")[0] != spec.name:
            raise self._error(
                _HARNESS,
                f"{self.harness_version} was learned on environment {learned_on}, but this "
                f"experiment's environment is {spec.name}@{spec.version}; name a version of "
                f"{spec.name!r} (`envharness --store STORE harness list` shows each one's)",
            )

    def _parts(self) -> tuple[Any, dict[str, Any], dict[str, str]]:
        environment = self._load(self.environment, ("environment", "factory"))
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
            else:
                assert agent.factory is not None
                agents[agent.name] = self._load(agent.factory, ("agents", agent.name, "factory"))
        roles = {agent.name: agent.role for agent in self.agents if agent.role is not None}
        return environment, agents, roles

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


# -- loading -----------------------------------------------------------------------------------


def load_manifest(path: str | PathLike[str]) -> Manifest:
    """Read and validate a manifest; raise :class:`ManifestError` naming the line and key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError("no such manifest file", file=file) from None
    except IsADirectoryError:
        raise ManifestError("is a directory, not a manifest file", file=file) from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"is not UTF-8 text ({exc.reason})", file=file) from None
    except OSError as exc:
        raise ManifestError(f"cannot be read: {exc.strerror or exc}", file=file) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column (\d+)\)$", str(exc))
        if found is None:
            raise ManifestError(f"invalid TOML: {exc}", file=file) from None
        problem = str(exc)[: found.start()].rstrip()
        raise ManifestError(
            f"invalid TOML at column {found[2]}: {problem}", file=file, line=int(found[1])
        ) from None
    return _Loader(file, text).load(document)


class _Loader:
    def __init__(self, file: Path, text: str) -> None:
        self.file = file
        self.folder = file.resolve().parent
        self.lines = KeyLines(text)

    def error(self, path: KeyPath, problem: str) -> ManifestError:
        return ManifestError(
            problem, file=self.file, line=self.lines.line_of(path), key=dotted(path) or None
        )

    def load(self, document: dict[str, Any]) -> Manifest:
        unknown = unknown_key(document, _Document, ())
        if unknown is not None:
            path, known = unknown
            name = str(path[-1])
            where = f"[{dotted(path[:-1])}]" if path[:-1] else "the document"
            raise self.error(
                path,
                f"unknown key {name!r} in {where}"
                + (did_you_mean(name, known) or f"; the keys there are {', '.join(known)}"),
            )
        for table in _Document.__struct_fields__:
            if table not in document:
                raise ManifestError(
                    f"the [{table}] table is missing (see docs/manifests.md)",
                    file=self.file,
                    key=table,
                )
        experiment = self.convert(document["experiment"], _ExperimentTable, ("experiment",))
        if not experiment.name.strip():
            raise self.error(("experiment", "name"), "give the experiment a name")
        self.hooks(experiment)
        environment = self.environment(document["environment"])
        agents = self.agents(document["agents"])
        scenarios = self.convert(document["scenarios"], _ScenariosTable, ("scenarios",))
        found, inputs = self.scenarios(scenarios)
        return Manifest(
            path=self.file,
            name=experiment.name,
            turns=experiment.turns,
            trials=experiment.trials,
            seed=experiment.seed,
            max_concurrency=experiment.max_concurrency,
            action_timeout=experiment.action_timeout or None,
            environment=environment,
            agents=agents,
            scenarios=found,
            _inputs=inputs,
            _lines=self.lines,
            hooks=experiment.hooks,
            harness_version=experiment.harness,
        )

    def convert(
        self,
        value: Any,
        schema: type[_S],
        path: KeyPath,
        *,
        file: Path | None = None,
        line: int | None = None,
    ) -> _S:
        """Validate one table with msgspec; an error names the exact key and its line.

        ``file`` and ``line`` place a JSONL scenario instead of the manifest's own keys.
        """
        try:
            return msgspec.convert(value, schema)
        except msgspec.ValidationError as exc:
            problem, relative, missing = parse_validation(str(exc))
            full = path + relative
            if missing is not None:
                full = (*full, missing)
                problem = "required key is missing" + (
                    f" from [{dotted(full[:-1])}]" if full[:-1] and file is None else ""
                )
            if file is not None:
                raise ManifestError(problem, file=file, line=line, key=dotted(full)) from None
            raise self.error(full, problem) from None

    def hooks(self, table: _ExperimentTable) -> None:
        if table.hooks is not None and table.harness is not None:
            raise self.error(
                _HARNESS,
                f"give hooks = ... (line {self.lines.line_of(_HOOKS)}) or harness = ..., not "
                "both: a session runs under one harness",
            )
        if table.hooks is not None:
            self.check_reference(table.hooks, _HOOKS, example="my_package.hooks:HOOKS")
        if table.harness is not None and not table.harness.strip():
            raise self.error(
                _HARNESS,
                'name an accepted harness version, e.g. harness = "harness-v2" (`envharness '
                "harness list` shows them)",
            )

    def environment(self, value: Any) -> str:
        table = self.convert(value, _EnvironmentTable, ("environment",))
        if table.command is not None:
            raise self.error(
                ("environment", "command"),
                "a command-driven environment is not supported yet; give "
                'factory = "module:attribute" (a Python environment class or factory)',
            )
        if table.factory is None:
            raise self.error(
                ("environment",),
                'give factory = "module:attribute", e.g. '
                '"envharness.fixtures:SyntheticEnvironment"',
            )
        self.check_reference(table.factory, ("environment", "factory"))
        return table.factory

    def agents(self, value: Any) -> tuple[ManifestAgent, ...]:
        if not isinstance(value, dict):
            raise self.error(("agents",), f"expected a table, got {toml_type(value)}")
        if not value:
            raise self.error(
                ("agents",), "no agents: add a table per participant, e.g. [agents.alice]"
            )
        return tuple(self.agent(name, table) for name, table in value.items())

    def agent(self, name: str, value: Any) -> ManifestAgent:
        path: KeyPath = ("agents", name)
        table = self.convert(value, _AgentTable, path)
        if (table.factory is None) == (table.command is None):
            raise self.error(
                path,
                'give either factory = "module:attribute" (a Python agent) or command = '
                '["program", "arg", ...] (a program speaking the agent protocol)'
                + (", not both" if table.factory is not None else ""),
            )
        if table.factory is not None:
            for key in _COMMAND_ONLY:
                if key in value:
                    raise self.error(
                        (*path, key),
                        f"{key} applies to command agents only"
                        + (
                            "; a Python agent declares its own `implementation` attribute"
                            if key == "implementation"
                            else ""
                        ),
                    )
            self.check_reference(table.factory, (*path, "factory"))
            return ManifestAgent(name=name, factory=table.factory, role=table.role)
        assert table.command is not None
        return ManifestAgent(name=name, command=self.command(path, table), role=table.role)

    def command(self, path: KeyPath, table: _AgentTable) -> CommandAgent:
        key: KeyPath = (*path, "command")
        if isinstance(table.command, str):
            try:
                argv = shlex.split(table.command)
            except ValueError as exc:
                raise self.error(key, f"cannot split {table.command!r} into words: {exc}") from None
        else:
            argv = list(table.command or ())
        if not argv:
            raise self.error(
                key, 'is empty; give the program and its arguments, e.g. ["node", "agent.mjs"]'
            )
        if not table.implementation:
            raise self.error(
                (*path, "implementation"),
                'a command agent needs implementation = "name@version", recorded with the '
                'evidence (e.g. implementation = "echo-agent@1")',
            )
        argv = [sys.executable if word == PYTHON else word for word in argv]
        cwd = self.folder / table.cwd if table.cwd is not None else self.folder
        if not cwd.is_dir():
            raise self.error(
                (*path, "cwd"),
                f"the working directory {str(cwd)!r} does not exist (cwd is relative to the "
                "manifest's folder)",
            )
        try:
            return CommandAgent(
                argv,
                implementation=table.implementation,
                env=table.env,
                cwd=cwd,
                inherit_env=(*DEFAULT_INHERITED_ENV, *table.inherit_env),
            )
        except ConfigurationError as exc:
            raise self.error(key, str(exc)) from None

    def check_reference(
        self, reference: str, path: KeyPath, *, example: str = "my_package.agents:MyAgent"
    ) -> None:
        module_name, separator, attribute = reference.partition(":")
        if not separator or not module_name or not attribute or ":" in attribute:
            raise self.error(path, f"{reference!r} is not module:attribute, e.g. {example}")

    def scenarios(self, table: _ScenariosTable) -> tuple[tuple[Scenario[Any], ...], _Places]:
        if table.items is not None and table.file is not None:
            raise self.error(
                ("scenarios", "file"),
                "give the scenarios either inline ([[scenarios.items]]) or in a file "
                "(file = ...), not both",
            )
        if table.file is not None:
            entries = list(self.jsonl(table.file))
        elif table.items is not None:
            entries = [
                (entry, self.place(index, "id"), self.place(index, "input"))
                for index, entry in enumerate(table.items)
            ]
        else:
            raise self.error(
                ("scenarios",),
                'give [[scenarios.items]] tables, or file = "scenarios.jsonl" (one JSON object '
                "per line)",
            )
        if not entries:
            raise self.error(("scenarios",), "no scenarios: the experiment needs at least one")
        found: list[Scenario[Any]] = []
        ids: dict[str, _Place] = {}
        inputs: _Places = {}
        for entry, id_place, input_place in entries:
            first = ids.get(entry.id)
            if first is not None:
                raise id_place.error(
                    f"scenario id {entry.id!r} appears twice, at lines {first.line} and "
                    f"{id_place.line}; scenario ids must be unique (use trials to repeat one)"
                )
            try:
                scenario = Scenario(
                    id=entry.id,
                    input=entry.input,
                    reference=entry.reference,
                    metadata=entry.metadata,
                )
            except ConfigurationError as exc:
                raise id_place.error(str(exc)) from None
            ids[entry.id] = id_place
            inputs[entry.id] = input_place
            found.append(scenario)
        return tuple(found), inputs

    def place(self, index: int, key: str) -> _Place:
        path: KeyPath = ("scenarios", "items", index, key)
        return _Place(self.file, self.lines.line_of(path), dotted(path))

    def jsonl(self, name: str) -> Iterator[tuple[_ScenarioEntry, _Place, _Place]]:
        source = self.folder / name
        shown = self.file.parent / name  # as the user would write it from where they are
        try:
            lines = source.read_bytes().splitlines()
        except OSError as exc:
            raise self.error(
                ("scenarios", "file"),
                f"cannot read {str(source)!r}: {exc.strerror or exc} (the path is relative to "
                "the manifest's folder)",
            ) from None
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                value = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise ManifestError(f"not valid JSON: {exc}", file=shown, line=number) from None
            if not isinstance(value, dict):
                raise ManifestError(
                    f"expected a JSON object with id and input, got {toml_type(value)}",
                    file=shown,
                    line=number,
                )
            unknown = unknown_key(value, _ScenarioEntry, ())
            if unknown is not None:
                path, known = unknown
                raise ManifestError(
                    f"unknown key {path[-1]!r}"
                    + (did_you_mean(str(path[-1]), known) or f"; the keys are {', '.join(known)}"),
                    file=shown,
                    line=number,
                    key=dotted(path),
                )
            entry = self.convert(value, _ScenarioEntry, (), file=shown, line=number)
            yield entry, _Place(shown, number, "id"), _Place(shown, number, "input")
