"""Turn command-line text into Python objects: ``module:attribute`` references, model agents
(``model:MODEL``, :mod:`envharness.cli.model_agents`), environments
(also ``gymnasium:ID``, ``pettingzoo:MODULE``, ``textworld:GAME_FILE`` or a program's command
line, through :mod:`envharness.adapters.registry`), ``NAME=VALUE`` pairs, JSON scenario inputs
and the harness they describe together — each failure named after the option that carried it.
"""

from __future__ import annotations

import difflib
import importlib
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from envharness.adapters.registry import command_environment, has_scheme, load_environment
from envharness.api.harness import DEFAULT_ACTION_TIMEOUT, AsyncEnvironmentHarness
from envharness.cli.edge import CliError
from envharness.cli.model_agents import ModelOptions, model_agent_from
from envharness.contracts.budget import Budget
from envharness.contracts.command_agent import CommandAgent
from envharness.errors import ConfigurationError, EnvharnessError
from envharness.manifest.model_agents import model_name
from envharness.runtime.hooking import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_ON_BLOCK_LIMIT,
    check_on_block_limit,
)

__all__ = [
    "code_words",
    "command_line_harness",
    "environment_factory",
    "guard_factory",
    "load_agent",
    "load_reference",
    "make_cwd_importable",
    "parse_input",
    "parse_pair",
]


def make_cwd_importable() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` does.

    A console script's ``sys.path[0]`` is the script's own directory, so without this a user's
    ``my_env.py`` beside them would not import.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def load_reference(reference: str, *, what: str) -> Any:
    """Import ``module:attribute`` (the attribute may be dotted, ``module:Class.factory``)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise CliError(
            f"{what} {reference!r} is not module:attribute, e.g. my_package.agents:GreedyAgent"
        )
    module = _import(module_name, what)
    value: Any = module
    parts = attribute.split(".")
    for depth, part in enumerate(parts):
        try:
            value = getattr(value, part)
        except AttributeError:
            owner = ":".join([module_name, ".".join(parts[:depth])]) if depth else module_name
            raise CliError(
                f"{what} {reference!r}: {owner} has no attribute {part!r}"
                + _suggestion(part, dir(value))
            ) from None
    return value


def _import(module_name: str, what: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise CliError(
                f"{what}: no module named {exc.name!r} (looked in the current directory "
                f"{os.getcwd()!r} and the installed packages)"
            ) from exc
        raise CliError(f"{what}: importing {module_name!r} failed: {_describe(exc)}") from exc
    except Exception as exc:  # the user's module raised while importing: say what and where
        raise CliError(f"{what}: importing {module_name!r} failed: {_describe(exc)}") from exc


def _looks_like_command(spec: str) -> bool:
    """A command has arguments or a path (``node a.mjs``, ``./agent``), or is one plain word
    (``my-agent``); a reference has a ``:`` or a dotted module name and no spaces."""
    if any(character.isspace() for character in spec) or "/" in spec:
        return True
    return ":" not in spec and "." not in spec


def load_agent(name: str, spec: str, models: ModelOptions | None = None) -> Any:
    """An agent factory from ``--agent NAME=SPEC``: ``model:MODEL`` (a
    :class:`~envharness.agents.ModelAgent` with the ``models`` options), a ``module:attribute``
    reference, or else a command line to run as a :class:`~envharness.CommandAgent`
    (``"node agent.mjs"``).

    A command's ``implementation`` is recorded as ``command:<the command line>``; the program
    may report a more precise one in its ``ready`` message, which is logged.
    """
    model = model_agent_from(name, spec, models or ModelOptions())
    if model is not None:
        return model
    if not _looks_like_command(spec):
        factory = load_reference(spec, what=f"--agent {name}")
        return guard_factory(factory, f"agent {name!r} ({spec})")
    try:
        argv = shlex.split(spec)
    except ValueError as exc:
        raise CliError(f"--agent {name}: cannot split {spec!r} into a command: {exc}") from None
    return CommandAgent(argv, implementation=f"command:{shlex.join(argv)}")


def guard_factory(factory: Any, what: str) -> Any:
    """Wrap a loaded factory so that an exception from the user's constructor becomes a
    :class:`ConfigurationError` naming it, instead of a traceback out of the harness.

    Non-callables pass through untouched: the harness explains those best ("pass the class,
    not an instance").
    """
    if not callable(factory):
        return factory
    return _GuardedFactory(factory, what)


class _GuardedFactory:
    """The factory :func:`guard_factory` returns: a value, not a closure, so that it can be
    sent to an executor's worker processes; it answers for the factory's name, signature and
    attributes (an environment class's ``spec``), as ``functools.wraps`` would."""

    def __init__(self, factory: Any, what: str) -> None:
        self.__wrapped__ = factory
        self.what = what

    def __call__(self) -> Any:
        try:
            return self.__wrapped__()
        except EnvharnessError:
            raise
        except Exception as exc:
            raise ConfigurationError(f"{self.what}: creating it raised {_describe(exc)}") from exc

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("__wrapped__")
        if wrapped is None or (name.startswith("__") and name not in _NAMES):
            raise AttributeError(name)  # pickle's own lookups, before the state is set
        return getattr(wrapped, name)


_NAMES = frozenset({"__name__", "__qualname__"})


def environment_factory(
    environment: str | None, command: str | None, *, what: str = "ENVIRONMENT"
) -> Any:
    """The environment factory named on a command line: ``environment`` (``module:attribute``
    or an adapter reference such as ``gymnasium:FrozenLake-v1``, named ``what`` in errors) or
    ``command`` (``--environment-command``), exactly one of them."""
    if (environment is None) == (command is None):
        raise CliError(
            f"give the environment either as {what} (module:attribute, gymnasium:ID, "
            "pettingzoo:MODULE or textworld:GAME_FILE) or as --environment-command "
            '"PROGRAM ARGS", ' + ("not both" if environment is not None else "one of them")
        )
    if command is not None:
        return command_environment(command, what="--environment-command")
    assert environment is not None
    make_cwd_importable()  # a user's module, or one registering a Gymnasium id, beside them
    if has_scheme(environment):
        return load_environment(environment, what=what)
    if any(character.isspace() for character in environment.strip()):
        raise CliError(
            f"{what} {environment!r} looks like a command line: give a program that speaks "
            f"the environment protocol as --environment-command {shlex.quote(environment)}"
        )
    return guard_factory(load_reference(environment, what=what), f"environment {environment!r}")


def parse_pair(text: str, *, option: str, example: str) -> tuple[str, str]:
    """Split ``NAME=VALUE``; both sides must be non-empty."""
    name, separator, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not separator or not name or not value:
        raise CliError(f"{option} {text!r} is not NAME=VALUE, e.g. {option} {example}")
    return name, value


def command_line_harness(
    store: Path | str,
    environment: str | None,
    agent: Sequence[str],
    role: Sequence[str] | None,
    *,
    what: str = "--environment",
    action_timeout: float = DEFAULT_ACTION_TIMEOUT,
    environment_command: str | None = None,
    models: ModelOptions | None = None,
    budget: Budget | None = None,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    on_block_limit: str = DEFAULT_ON_BLOCK_LIMIT,
) -> AsyncEnvironmentHarness:
    """The harness a command line describes: the environment (a reference named ``what`` in
    errors, or ``--environment-command``), ``--agent NAME=SPEC`` and ``--role NAME=ROLE``
    pairs, ``--action-timeout`` (0 for no limit), the model agents' options, the session's
    budget and what hooks' vetoes may do (``--max-blocks``, ``--on-block-limit``). Used by
    ``run``, ``resume`` and ``optimize``."""
    make_cwd_importable()  # for the agents' modules too
    factory = environment_factory(environment, environment_command, what=what)
    agents: dict[str, Any] = {}
    pairs = [parse_pair(text, option="--agent", example="alice=my_agents:Greedy") for text in agent]
    given = models.given() if models is not None else []
    if given and not any(model_name(reference) is not None for _, reference in pairs):
        raise CliError(
            f"{', '.join(given)} applies to model agents, and no --agent NAME=model:MODEL is given"
        )
    for name, reference in pairs:
        if name in agents:
            raise CliError(f"--agent {name!r} is given twice; participant names must differ")
        agents[name] = load_agent(name, reference, models)
    roles = dict(parse_pair(text, option="--role", example="alice=buyer") for text in role or ())
    return AsyncEnvironmentHarness(
        store,
        environment=factory,
        agents=agents,
        roles=roles,
        action_timeout=action_timeout or None,
        budget=budget,
        max_blocks=max_blocks,
        on_block_limit=check_on_block_limit(on_block_limit),
    )


def code_words(
    environment: str | None,
    environment_option: str | None,
    environment_command: str | None,
    agent: Sequence[str] | None,
    role: Sequence[str] | None,
) -> list[str]:
    """The environment and agent arguments as they were given, for a command that must name
    the same code again (the ``resume`` printed after Ctrl-C)."""
    words = [environment] if environment is not None else []
    words += ["--environment", environment_option] if environment_option is not None else []
    words += ["--environment-command", environment_command] if environment_command else []
    words += [word for pair in agent or () for word in ("--agent", pair)]
    words += [word for pair in role or () for word in ("--role", pair)]
    return words


def parse_input(text: str | None) -> dict[str, Any]:
    """The scenario input as a JSON object; the environment's input type validates it later."""
    if text is None:
        return {}
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise CliError(f"--input is not valid JSON ({exc}): {text!r:.200}") from None
    if not isinstance(value, dict):
        raise CliError(
            f"--input must be a JSON object such as '{{\"starting_total\": 0}}', "
            f"not {type(value).__name__} {text!r:.200}"
        )
    return value


def _describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` — enough to find the problem without a traceback."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}:{exc.lineno})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            where = f" ({Path(frames[-1].filename)}:{frames[-1].lineno})"
    return f"{type(exc).__name__}: {exc}{where}"


def _suggestion(name: str, candidates: list[str]) -> str:
    public = [candidate for candidate in candidates if not candidate.startswith("_")]
    close = difflib.get_close_matches(name, public, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""
