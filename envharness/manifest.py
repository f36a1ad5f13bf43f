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
from envharness.errors import ConfigurationError
from envharness.experiments import AsyncExperiment, Experiment
from envharness.harness import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    AsyncEnvironmentHarness,
)
from envharness.manifest_keys import (
    KeyLines,
    KeyPath,
    did_you_mean,
    dotted,
    parse_validation,
    toml_type,
    unknown_key,
)
from envharness.scenario import Scenario, validate_input

__all__ = ["PYTHON", "Manifest", "ManifestAgent", "ManifestError", "load_manifest"]

PYTHON = "{python}"
"""In an agent's ``command``, a word that stands for the Python running envharness
(``sys.executable``): a program in the same virtual environment, with no PATH lookup."""

_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)

"""Where a value sits in the document: ``("agents", "alice", "command")``,
``("scenarios", "items", 1, "id")``."""


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

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent

    def async_harness(self, store: str | PathLike[str]) -> AsyncEnvironmentHarness:
        """Import the environment and Python agents, and make the harness for ``store``."""
        environment, agents, roles = self._parts()
        return self._configured(
            lambda: AsyncEnvironmentHarness(
                store,
                environment=environment,
                agents=agents,
                roles=roles,
                action_timeout=self.action_timeout,
                max_concurrency=self.max_concurrency,
            )
        )

    def harness(self, store: str | PathLike[str]) -> EnvironmentHarness:
        """The blocking twin of :meth:`async_harness`."""
        environment, agents, roles = self._parts()
        return self._configured(
            lambda: EnvironmentHarness(
                store,
                environment=environment,
                agents=agents,
                roles=roles,
                action_timeout=self.action_timeout,
                max_concurrency=self.max_concurrency,
            )
        )

    def async_experiment(self, store: str | PathLike[str]) -> AsyncExperiment:
        """The experiment, ready to ``await run()``; nothing is recorded before that."""
        harness = self.async_harness(store)
        return self._configured(
            lambda: harness.experiment(
                self.name, self.scenarios, turns=self.turns, trials=self.trials, seed=self.seed
            )
        )

    def experiment(self, store: str | PathLike[str]) -> Experiment:
        """The experiment for blocking code: ``run()``, or ``start()`` then ``wait()``."""
        harness = self.harness(store)
        return self._configured(
            lambda: harness.experiment(
                self.name, self.scenarios, turns=self.turns, trials=self.trials, seed=self.seed
            )
        )

    # -- internals -----------------------------------------------------------------------------

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

    def check_reference(self, reference: str, path: KeyPath) -> None:
        module_name, separator, attribute = reference.partition(":")
        if not separator or not module_name or not attribute or ":" in attribute:
            raise self.error(
                path, f"{reference!r} is not module:attribute, e.g. my_package.agents:MyAgent"
            )

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
