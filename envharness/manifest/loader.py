"""Reading a manifest: the TOML, the schema, every agent command and scenario, checked before
anything is imported or run."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar, cast

import msgspec

from envharness.adapters.registry import has_scheme, parse_environment
from envharness.agents import ActionFormat
from envharness.api.blocking import EnvironmentHarness
from envharness.api.harness import (
    AsyncEnvironmentHarness,
)
from envharness.contracts.budget import Budget
from envharness.contracts.command_agent import DEFAULT_INHERITED_ENV, CommandAgent
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError
from envharness.llm import Price
from envharness.manifest.document import (
    COMMAND_ONLY,
    ENVIRONMENT_COMMAND_ONLY,
    MODEL_ONLY,
    AgentTable,
    BudgetTable,
    Document,
    EnvironmentTable,
    ExperimentTable,
    ManifestError,
    Place,
    Places,
    ScenarioEntry,
    ScenariosTable,
)
from envharness.manifest.keys import (
    KeyLines,
    KeyPath,
    did_you_mean,
    dotted,
    parse_validation,
    toml_type,
    unknown_key,
)
from envharness.manifest.model import (
    HARNESS_KEY,
    HOOKS_KEY,
    PYTHON,
    Manifest,
    ManifestAgent,
    ManifestProgram,
)
from envharness.manifest.model_agents import (
    ACTION_FORMATS,
    DEFAULT_KEY_ENV,
    ModelAgentSpec,
    template_reference,
)
from envharness.protocol.process import agent_command

_R = TypeVar("_R")
_S = TypeVar("_S", bound=msgspec.Struct)
_H = TypeVar("_H", AsyncEnvironmentHarness, EnvironmentHarness)


def load_manifest(path: str | PathLike[str]) -> Manifest:
    """Read and validate a manifest; raise :class:`ManifestError` naming the line and key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError("no such manifest file", file=file) from None
    except IsADirectoryError:
        raise ManifestError(
            "is a directory, not a manifest file: give the .toml file in it (or, without a "
            "manifest, an environment as module:attribute)",
            file=file,
        ) from None
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
        unknown = unknown_key(document, Document, ())
        if unknown is not None:
            path, known = unknown
            name = str(path[-1])
            where = f"[{dotted(path[:-1])}]" if path[:-1] else "the document"
            raise self.error(
                path,
                f"unknown key {name!r} in {where}"
                + (did_you_mean(name, known) or f"; the keys there are {', '.join(known)}"),
            )
        for table in Document.__struct_fields__:
            if table not in document:
                alone = (
                    ', or environment = "gymnasium:FrozenLake-v1" before the first table'
                    if table == "environment"
                    else ""
                )
                raise ManifestError(
                    f"the [{table}] table is missing{alone} (see docs/manifests.md)",
                    file=self.file,
                    key=table,
                )
        experiment = self.convert(document["experiment"], ExperimentTable, ("experiment",))
        if not experiment.name.strip():
            raise self.error(("experiment", "name"), "give the experiment a name")
        self.hooks(experiment)
        environment = self.environment(document["environment"])
        agents = self.agents(document["agents"])
        scenarios = self.convert(document["scenarios"], ScenariosTable, ("scenarios",))
        found, inputs = self.scenarios(scenarios)
        return Manifest(
            path=self.file,
            name=experiment.name,
            turns=experiment.turns,
            trials=experiment.trials,
            seed=experiment.seed,
            max_concurrency=experiment.max_concurrency,
            action_timeout=experiment.action_timeout or None,
            agents=agents,
            scenarios=found,
            _inputs=inputs,
            _lines=self.lines,
            hooks=experiment.hooks,
            harness_version=experiment.harness,
            budget=self.budget(("experiment", "budget"), experiment.budget),
            session_budget=self.budget(("experiment", "session_budget"), experiment.session_budget),
            **environment,
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

    def hooks(self, table: ExperimentTable) -> None:
        if table.hooks is not None and table.harness is not None:
            raise self.error(
                HARNESS_KEY,
                f"give hooks = ... (line {self.lines.line_of(HOOKS_KEY)}) or harness = ..., not "
                "both: a session runs under one harness",
            )
        if table.hooks is not None:
            self.check_reference(table.hooks, HOOKS_KEY, example="my_package.hooks:HOOKS")
        if table.harness is not None and not table.harness.strip():
            raise self.error(
                HARNESS_KEY,
                'name an accepted harness version, e.g. harness = "harness-v2" (`envharness '
                "harness list` shows them)",
            )

    def environment(self, value: Any) -> dict[str, Any]:
        """The environment's fields of :class:`Manifest`: a reference (written alone,
        ``environment = "gymnasium:Taxi-v4"``, or as ``factory``) with its ``options``, or a
        program (``command``) with its ``cwd``, ``env`` and ``inherit_env``."""
        if isinstance(value, str):
            self.check_environment_reference(value, ("environment",))
            return {"environment": value.strip(), "environment_key": ("environment",)}
        table = self.convert(value, EnvironmentTable, ("environment",))
        if table.factory is not None and table.command is not None:
            raise self.error(
                ("environment", "command"),
                'give either factory = "..." or command = [...], not both',
            )
        if table.command is not None:
            if table.options:
                raise self.error(
                    ("environment", "options"),
                    "options apply to a factory or an adapter; a program takes its settings "
                    "from its command line (or env)",
                )
            program = self.environment_program(table)
            return {
                "environment": shlex.join(program.command),
                "environment_program": program,
                "environment_key": ("environment", "command"),
            }
        if table.factory is None:
            raise self.error(
                ("environment",),
                'give factory = "module:attribute", e.g. '
                '"envharness.fixtures:SyntheticEnvironment", an adapter such as factory = '
                '"gymnasium:FrozenLake-v1", or command = ["node", "my_env.js"] for a program',
            )
        for key in ENVIRONMENT_COMMAND_ONLY:
            if key in value:
                raise self.error(
                    ("environment", key), f"{key} applies to an environment program only"
                )
        self.check_environment_reference(table.factory, ("environment", "factory"))
        return {
            "environment": table.factory.strip(),
            "environment_options": table.options,
            "environment_key": ("environment", "factory"),
        }

    def check_environment_reference(self, reference: str, path: KeyPath) -> None:
        if has_scheme(reference):
            try:
                parse_environment(reference, what="")
            except ConfigurationError as exc:
                raise self.error(path, str(exc)) from None
            return
        self.check_reference(reference, path, example="my_package.envs:MyEnvironment")

    def environment_program(self, table: EnvironmentTable) -> ManifestProgram:
        key: KeyPath = ("environment", "command")
        argv = self.words(key, table.command)
        argv = [sys.executable if word == PYTHON else word for word in argv]
        cwd = self.folder / table.cwd if table.cwd is not None else self.folder
        if not cwd.is_dir():
            raise self.error(
                ("environment", "cwd"),
                f"the working directory {str(cwd)!r} does not exist (cwd is relative to the "
                "manifest's folder)",
            )
        inherit = (*DEFAULT_INHERITED_ENV, *table.inherit_env)
        try:
            agent_command(argv, cwd=cwd, env=table.env, inherit_env=inherit, owner="environment")
        except ConfigurationError as exc:
            raise self.error(key, str(exc)) from None
        return ManifestProgram(tuple(argv), cwd, dict(table.env), inherit)

    def words(self, key: KeyPath, command: list[str] | str | None) -> list[str]:
        """A command's words: an array as written, a string split as a shell would."""
        if isinstance(command, str):
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise self.error(key, f"cannot split {command!r} into words: {exc}") from None
        else:
            argv = list(command or ())
        if not argv:
            raise self.error(
                key, 'is empty; give the program and its arguments, e.g. ["node", "agent.mjs"]'
            )
        return argv

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
        table = self.convert(value, AgentTable, path)
        given = [key for key in ("factory", "command", "model") if getattr(table, key) is not None]
        if len(given) != 1:
            raise self.error(
                path,
                'give either factory = "module:attribute" (a Python agent), command = '
                '["program", "arg", ...] (a program speaking the agent protocol) or model = '
                '"gpt-4o-mini" (a model agent)'
                + {0: "", 2: ", not both", 3: ", not all three"}[len(given)],
            )
        kind = given[0]
        allowed = {"command": COMMAND_ONLY, "model": MODEL_ONLY}.get(kind, ())
        for key in (*COMMAND_ONLY, *MODEL_ONLY):
            if key in value and key not in allowed:
                raise self.error((*path, key), self.misplaced(key, kind))
        if table.model is not None:
            return ManifestAgent(name=name, model=self.model(path, table), role=table.role)
        if table.factory is not None:
            self.check_reference(table.factory, (*path, "factory"))
            return ManifestAgent(name=name, factory=table.factory, role=table.role)
        assert table.command is not None
        return ManifestAgent(name=name, command=self.command(path, table), role=table.role)

    @staticmethod
    def misplaced(key: str, kind: str) -> str:
        """Why ``key`` does not belong in an agent table of ``kind``."""
        if key in MODEL_ONLY:
            return f"{key} applies to model agents (model = ...) only"
        if key != "implementation":
            return f"{key} applies to command agents only"
        if kind == "model":
            return (
                "implementation applies to command agents only; a model agent's is made from "
                "its model, endpoint and template, and recorded for it"
            )
        return (
            "implementation applies to command agents only; a Python agent declares its own "
            "`implementation` attribute"
        )

    def budget(self, path: KeyPath, table: BudgetTable | None) -> Budget | None:
        if table is None:
            return None
        if table.usd is None and table.tokens is None and table.seconds is None:
            raise self.error(
                path,
                "name at least one limit, e.g. "
                f"{path[-1]} = {{ usd = 0.5, tokens = 200000, seconds = 600 }}",
            )
        try:
            return Budget(usd=table.usd, tokens=table.tokens, seconds=table.seconds)
        except ConfigurationError as exc:
            raise self.error(path, str(exc)) from None

    def model(self, path: KeyPath, table: AgentTable) -> ModelAgentSpec:
        """A model agent's settings, checked; its endpoint and key are checked when the
        experiment is built, since they come from the environment it runs in."""
        assert table.model is not None
        if not table.model.strip():
            raise self.error(
                (*path, "model"),
                'name the model, e.g. model = "gpt-4o-mini" (or the name a local server serves)',
            )
        if table.base_url is not None and not table.base_url.strip():
            raise self.error(
                (*path, "base_url"),
                'give the API root, e.g. base_url = "http://127.0.0.1:8000/v1", or leave it '
                "out to use $OPENAI_BASE_URL",
            )
        action_format = table.action_format or "auto"
        if action_format not in ACTION_FORMATS:
            raise self.error(
                (*path, "action_format"),
                f"action_format {action_format!r} is not one of {', '.join(ACTION_FORMATS)}",
            )
        budget = self.budget((*path, "budget"), table.budget)
        template = table.template
        if template is not None:
            if not template.strip():
                raise self.error((*path, "template"), "name a template, or a template file's path")
            template = template_reference(template.strip(), self.folder)
        return ModelAgentSpec(
            model=table.model.strip(),
            base_url=table.base_url,
            api_key_env=DEFAULT_KEY_ENV if table.api_key_env is None else table.api_key_env,
            temperature=0.0 if table.temperature is None else table.temperature,
            max_tokens=table.max_tokens,
            template=template,
            system=table.system,
            action_format=cast(ActionFormat, action_format),
            price=None
            if table.price is None
            else Price(
                input_per_million=table.price.input_per_million,
                output_per_million=table.price.output_per_million,
            ),
            budget=budget,
        )

    def command(self, path: KeyPath, table: AgentTable) -> CommandAgent:
        key: KeyPath = (*path, "command")
        argv = self.words(key, table.command)
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

    def scenarios(self, table: ScenariosTable) -> tuple[tuple[Scenario[Any], ...], Places]:
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
        ids: dict[str, Place] = {}
        inputs: Places = {}
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

    def place(self, index: int, key: str) -> Place:
        path: KeyPath = ("scenarios", "items", index, key)
        return Place(self.file, self.lines.line_of(path), dotted(path))

    def jsonl(self, name: str) -> Iterator[tuple[ScenarioEntry, Place, Place]]:
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
            unknown = unknown_key(value, ScenarioEntry, ())
            if unknown is not None:
                path, known = unknown
                raise ManifestError(
                    f"unknown key {path[-1]!r}"
                    + (did_you_mean(str(path[-1]), known) or f"; the keys are {', '.join(known)}"),
                    file=shown,
                    line=number,
                    key=dotted(path),
                )
            entry = self.convert(value, ScenarioEntry, (), file=shown, line=number)
            yield entry, Place(shown, number, "id"), Place(shown, number, "input")
