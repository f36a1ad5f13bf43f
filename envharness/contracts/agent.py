"""The agent contract: ``act(observation) -> dict`` (sync or async) and an ``implementation``.

``implementation`` is a versioned identifier recorded with the evidence, so that a resumed
session cannot silently run different agent code. An agent may return an :class:`AgentReply`
instead of a bare dict to report what the decision cost.

Two optional methods let an agent take part in the session's lifecycle — what an agent that is
a separate program needs (see ``CommandAgent``):

- ``lifespan(context)`` returns an async context manager entered before the first turn and
  exited when the session ends, however it ends; ``context`` says where the agent is and lets
  it add ``log`` records to the evidence.
- ``feedback(turn, outcome, blocked)`` (sync or async) is called after each turn's evidence is
  committed, with the participant's executed outcome, or the reason its action was blocked. A
  ``feedback`` that also takes an ``action`` keyword is told what was executed, which differs
  from what the agent answered when a harness hook rewrote it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from envharness.errors import ConfigurationError
from envharness.records import Cost, EnvironmentRef

__all__ = [
    "Agent",
    "AgentContext",
    "AgentFactory",
    "AgentReply",
    "Cost",
    "LogLevel",
    "implementation_of",
    "is_async_agent",
]

LogLevel = Literal["debug", "info", "warning", "error"]


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


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Where an agent is acting, handed to its ``lifespan``; frozen, like all hook inputs."""

    session_id: str
    participant: str
    role: str
    seed: int
    turns: int
    environment: EnvironmentRef
    log: Callable[[str, LogLevel, str | None], None]
    """Add a ``log`` record (message, level, stream) to the session's evidence."""
    first_turn: int = 1
    """The turn this segment plays first (after a resume or for a branch, not 1)."""


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
