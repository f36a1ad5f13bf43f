"""Agents and environments the CLI tests load by ``module:attribute``, as a user's would be."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import anyio

from envharness.fixtures import SyntheticEnvironment


class SlowAgent:
    """Takes 0.2 s per action, so a long run is still going when the test interrupts it."""

    implementation = "tests-slow@1"

    def act(self, observation: Any) -> dict[str, int]:
        time.sleep(0.2)
        return {"value": 1}


class PaddedAgent:
    """Attaches 20 kB of padding to each action (recorded as attempted, ignored when executed),
    so an export is larger than a pipe's buffer."""

    implementation = "tests-padded@1"

    def act(self, observation: Any) -> dict[str, Any]:
        return {"value": 1, "padding": "x" * 20_000}


class RaisingAgent:
    implementation = "tests-raising@1"

    def act(self, observation: Any) -> dict[str, int]:
        raise RuntimeError("[bold]no[/bold] luck")


class UnbuildableAgent:
    implementation = "tests-unbuildable@1"

    def __init__(self) -> None:
        raise ValueError("needs an API key")


class TwoRoleEnvironment(SyntheticEnvironment):
    """The synthetic rules with two roles, so a roster must say who plays which."""

    spec = dataclasses.replace(SyntheticEnvironment.spec, roles=("buyer", "seller"))


class EscapingAgent:
    """Fails with a terminal escape sequence in its message (clear the screen)."""

    implementation = "tests-escaping@1"

    def act(self, observation: Any) -> dict[str, int]:
        raise RuntimeError("\x1b[2Jscreen cleared")


an_instance = SlowAgent()


class NappingAgent:
    """Sleeps 10 ms per action without holding the event loop: a run long enough to reach."""

    implementation = "tests-napping@1"

    async def act(self, observation: Any) -> dict[str, int]:
        await anyio.sleep(0.01)
        return {"value": 1}
