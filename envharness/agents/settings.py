"""A model agent's settings, checked once when it is built and shared by its per-session copies.

Every setting is checked before anything is spent, with an error naming the setting, the value
and what would do: a run should fail at its first line, not at its hundredth model call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from envharness.agents.template import AgentTemplate, load_template
from envharness.contracts.budget import Budget
from envharness.errors import ConfigurationError
from envharness.llm.provider import Provider, StructuredProvider

__all__ = ["ActionFormat", "Settings", "supports_tools"]

ActionFormat = Literal["auto", "tools", "json", "text"]
"""How the agent asks for an action: ``tools`` (a native tool call), ``json`` (JSON mode),
``text`` (a JSON object in plain text), or ``auto`` (tools where the provider offers them, else
text; an endpoint that refuses tools with a 400 is asked in text for the rest of the session)."""


def supports_tools(provider: Provider) -> bool:
    """Whether offering ``provider`` tools is worth trying (a :class:`StructuredProvider`
    that says so)."""
    return isinstance(provider, StructuredProvider) and bool(provider.supports_tools)


@dataclass(frozen=True, slots=True)
class Settings:
    """What every per-session copy of one agent shares (see ``ModelAgent`` for each)."""

    provider: Provider
    system: str
    template: AgentTemplate
    temperature: float
    max_tokens: int | None
    budget: Budget | None
    attempts: int
    window: int
    max_context_tokens: int | None
    action_format: ActionFormat
    implementation: str

    @classmethod
    def checked(
        cls,
        provider: Provider,
        *,
        system: str | None,
        template: str | AgentTemplate | None,
        temperature: float,
        max_tokens: int | None,
        budget: Budget | None,
        attempts: int,
        window: int,
        max_context_tokens: int | None,
        action_format: ActionFormat,
        implementation: str | None,
    ) -> Settings:
        if not isinstance(provider, Provider):
            raise ConfigurationError(
                f"provider must be a Provider (name, model and async complete()), not {provider!r}"
            )
        if system is not None and not isinstance(system, str):
            raise ConfigurationError(f"system must be a string or None, not {system!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ConfigurationError(f"temperature must be a number, not {temperature!r}")
        if not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
            raise ConfigurationError(f"temperature must be between 0 and 2, not {temperature!r}")
        _check_count("max_tokens", max_tokens, minimum=1, optional=True)
        _check_count("attempts", attempts, minimum=1)
        _check_count("window", window, minimum=0)
        _check_count("max_context_tokens", max_context_tokens, minimum=1, optional=True)
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigurationError(
                f"budget must be an envharness Budget(usd=..., tokens=..., seconds=...), "
                f"not {budget!r}"
            )
        _check_format(provider, action_format)
        loaded = load_template(template)
        if implementation is None:
            implementation = f"model-agent@{loaded.version}:{provider.name}/{provider.model}"
        elif not isinstance(implementation, str) or not implementation.strip():
            raise ConfigurationError(
                f"implementation must be a non-empty string or None, not {implementation!r}"
            )
        return cls(
            provider=provider,
            system=system or "",
            template=loaded,
            temperature=float(temperature),
            max_tokens=max_tokens,
            budget=budget,
            attempts=attempts,
            window=window,
            max_context_tokens=max_context_tokens,
            action_format=action_format,
            implementation=implementation,
        )


def _check_format(provider: Provider, action_format: Any) -> None:
    if action_format not in get_args(ActionFormat):
        raise ConfigurationError(
            f"action_format must be one of {', '.join(get_args(ActionFormat))}, "
            f"not {action_format!r}"
        )
    if action_format == "tools" and not supports_tools(provider):
        raise ConfigurationError(
            f"action_format='tools' needs a provider that offers tools; {provider!r} does "
            "not (use action_format='auto' to take tools where they are offered)"
        )
    if action_format == "json" and not isinstance(provider, StructuredProvider):
        raise ConfigurationError(
            f"action_format='json' needs a provider that takes a response_format; "
            f"{provider!r} does not (use action_format='text')"
        )


def _check_count(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        also = " (or None)" if optional else ""
        raise ConfigurationError(f"{name} must be an integer >= {minimum}{also}, not {value!r}")
