"""The manifest's TOML schema (validated by msgspec, unknown keys refused), its error, and where
each value was written, so every mistake names the file, the line and the key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeAlias

import msgspec

from envharness.api.harness import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    MAX_COUNT,
)
from envharness.errors import ConfigurationError


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


_Positive = Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]


class BudgetTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    usd: Annotated[float, msgspec.Meta(gt=0)] | None = None
    tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None


class PriceTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    input_per_million: Annotated[float, msgspec.Meta(ge=0)]
    output_per_million: Annotated[float, msgspec.Meta(ge=0)]


class ExperimentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    turns: _Positive
    seed: int = 0
    trials: _Positive = 1
    max_concurrency: _Positive = DEFAULT_MAX_CONCURRENCY
    action_timeout: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_ACTION_TIMEOUT
    hooks: str | None = None
    harness: str | None = None
    budget: BudgetTable | None = None
    session_budget: BudgetTable | None = None


class EnvironmentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    factory: str | None = None
    command: list[str] | str | None = None
    options: dict[str, Any] = {}
    env: dict[str, str] = {}
    inherit_env: list[str] = []
    cwd: str | None = None


class AgentTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    factory: str | None = None
    command: list[str] | str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    template: str | None = None
    system: str | None = None
    action_format: str | None = None
    price: PriceTable | None = None
    budget: BudgetTable | None = None
    implementation: str | None = None
    env: dict[str, str] = {}
    inherit_env: list[str] = []
    cwd: str | None = None
    role: str | None = None


class ScenarioEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str
    input: Any
    reference: Any = None
    metadata: dict[str, Any] = {}


class ScenariosTable(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    items: list[ScenarioEntry] | None = None
    file: str | None = None


class Document(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    experiment: ExperimentTable
    environment: EnvironmentTable | str
    """A table, or one reference: ``environment = "gymnasium:Taxi-v4"``."""
    agents: dict[str, AgentTable]
    scenarios: ScenariosTable


COMMAND_ONLY = ("implementation", "env", "inherit_env", "cwd")
MODEL_ONLY = (
    "base_url",
    "api_key_env",
    "temperature",
    "max_tokens",
    "template",
    "system",
    "action_format",
    "price",
    "budget",
)
ENVIRONMENT_COMMAND_ONLY = ("env", "inherit_env", "cwd")


@dataclass(frozen=True, slots=True)
class Place:
    """Where a value is: a file (the manifest, or a JSONL file), a line, a key."""

    file: Path
    line: int | None
    key: str | None

    def error(self, problem: str) -> ManifestError:
        return ManifestError(problem, file=self.file, line=self.line, key=self.key)


Places: TypeAlias = dict[str, Place]
"""Scenario id -> where its input is written, for input errors found when importing."""
