"""The agent contract: ``act(observation) -> dict`` (sync or async) and an ``implementation``.

``implementation`` is a versioned identifier recorded with the evidence, so that a resumed
session cannot silently run different agent code. An agent may return an :class:`AgentReply`
instead of a bare dict to report what the decision cost.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from envharness.errors import ConfigurationError
from envharness.records import Cost

__all__ = ["Agent", "AgentFactory", "AgentReply", "Cost", "implementation_of", "is_async_agent"]


@runtime_checkable
class Agent(Protocol):
    implementation: str

    def act(self, observation: Any) -> dict[str, Any] | AgentReply | Awaitable[Any]: ...


AgentFactory = Callable[[], Agent]
"""A class or zero-argument callable; it is called once per session (a fresh agent each time)."""


@dataclass(frozen=True, slots=True)
class AgentReply:
    """An action together with its cost (tokens, money, time — every field optional)."""

    action: dict[str, Any]
    cost: Cost | None = None


def implementation_of(agent: object, participant: str) -> str:
    """The agent's declared implementation, or a clear error naming the participant."""
    value = getattr(agent, "implementation", None)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(
            f"agent for participant {participant!r} ({type(agent).__name__}) has no "
            "`implementation` string; set e.g. implementation = 'my-agent@1' so evidence "
            "records which code acted"
        )
    if not callable(getattr(agent, "act", None)):
        raise ConfigurationError(
            f"agent for participant {participant!r} ({type(agent).__name__}) has no "
            "act(observation) method"
        )
    return value


def is_async_agent(agent: object) -> bool:
    return inspect.iscoroutinefunction(getattr(agent, "act", None))
