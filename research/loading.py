"""Command-line inputs the research scripts share with ``envharness optimize``.

``--environment module:attribute``, ``--agent NAME=module:factory`` (repeatable),
``--scenarios FILE.jsonl|module:attribute`` and ``--base-version harness-vN`` mean exactly what
they mean to ``envharness optimize``: the same loaders read them, so a command that works there
works here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["InputError", "add_harness_arguments", "base_patch", "harness_from", "scenarios_from"]


class InputError(ValueError):
    """A command-line input that cannot be loaded; the message says which and why."""


def add_harness_arguments(parser: argparse.ArgumentParser, *, scenarios: bool = True) -> None:
    parser.add_argument(
        "--environment",
        required=True,
        metavar="module:attribute",
        help="the environment factory, e.g. envharness.demos.support_desk:SupportDesk",
    )
    parser.add_argument(
        "--agent",
        action="append",
        required=True,
        metavar="NAME=module:factory",
        help="a participant and its frozen agent; repeat for more participants",
    )
    parser.add_argument("--role", action="append", default=[], metavar="NAME=ROLE")
    if scenarios:
        parser.add_argument(
            "--scenarios",
            required=True,
            metavar="FILE.jsonl|module:attribute",
            help="the scenarios whose failures are learned from (as for envharness optimize)",
        )


def harness_from(store: Path, environment: str, agents: Sequence[str], roles: Sequence[str]) -> Any:
    """An ``AsyncEnvironmentHarness`` on ``store`` built like ``envharness optimize`` builds it."""
    from envharness.cli.edge import CliError
    from envharness.cli.loading import command_line_harness

    try:
        return command_line_harness(store, environment, agents, roles)
    except CliError as exc:
        raise InputError(str(exc)) from None


def scenarios_from(spec: str) -> list[Any]:
    from envharness.cli.edge import CliError
    from envharness.cli.optimize import load_scenarios

    try:
        return load_scenarios(spec, "--scenarios")
    except CliError as exc:
        raise InputError(str(exc)) from None


def base_patch(store: Path, version: str | None) -> Any:
    """The patch of accepted harness ``version`` in ``store`` (``None``: no base)."""
    if version is None:
        return None
    import anyio

    from envharness.errors import EnvharnessError
    from envharness.optimizer import HarnessPatch
    from envharness.optimizer.versions import harness_version
    from envharness.store import read_store

    async def read() -> Any:
        return await harness_version(await read_store(store), version)

    try:
        found = anyio.run(read)
    except EnvharnessError as exc:
        raise InputError(f"--base-version: {exc}") from None
    return HarnessPatch.from_dict(found.patch)
