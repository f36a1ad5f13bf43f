"""``--agent NAME=model:MODEL``: model agents on the command line, and the options they share.

One set of model options (``--base-url``, ``--api-key-env``, ``--temperature``, ``--template``,
``--max-tokens``, ``--action-format``, ``--price``) applies to every model agent of a run: a
command line that needs a different endpoint or template per participant is a manifest
(docs/manifests.md), where each ``[agents.NAME]`` table has its own. The budget options are the
session's, whatever its agents are. A model option given with no model agent is refused, since
it would be ignored.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from envharness.agents import ActionFormat, ModelAgent
from envharness.cli.edge import CliError
from envharness.contracts.budget import Budget
from envharness.errors import ConfigurationError
from envharness.llm import Price
from envharness.llm.openai_compatible import BASE_URL_ENV, DEFAULT_BASE_URL
from envharness.llm.prices import published_price
from envharness.manifest.model_agents import (
    ACTION_FORMATS,
    DEFAULT_KEY_ENV,
    ModelAgentSpec,
    build_model_agent,
    model_name,
)

__all__ = ["ModelOptions", "budget_from", "model_agent_from", "parse_price", "unpriced_note"]


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """The model options as given; ``None``: not given (the default applies)."""

    base_url: str | None = None
    api_key_env: str = DEFAULT_KEY_ENV
    temperature: float | None = None
    template: str | None = None
    max_tokens: int | None = None
    action_format: str | None = None
    price: str | None = None

    def given(self) -> list[str]:
        """The options that were given, as written on the command line."""
        named = {
            "--base-url": self.base_url,
            "--temperature": self.temperature,
            "--template": self.template,
            "--max-tokens": self.max_tokens,
            "--action-format": self.action_format,
            "--price": self.price,
        }
        given = [option for option, value in named.items() if value is not None]
        if self.api_key_env != DEFAULT_KEY_ENV:
            given.append("--api-key-env")
        return given

    def spec(self) -> ModelAgentSpec:
        """Every model agent's settings but its model's name."""
        if self.action_format is not None and self.action_format not in ACTION_FORMATS:
            raise CliError(
                f"--action-format {self.action_format!r} is not one of: {', '.join(ACTION_FORMATS)}"
            )
        action_format = cast(ActionFormat, self.action_format or "auto")
        return ModelAgentSpec(
            model="",
            base_url=self.base_url,
            api_key_env=self.api_key_env or None,
            temperature=0.0 if self.temperature is None else self.temperature,
            template=self.template,
            max_tokens=self.max_tokens,
            action_format=action_format,
            price=None if self.price is None else parse_price(self.price),
        )


def model_agent_from(name: str, value: str, options: ModelOptions) -> ModelAgent | None:
    """The model agent ``--agent NAME=model:MODEL`` names, or ``None`` for any other agent."""
    model = model_name(value)
    if model is None:
        return None
    if not model:
        raise CliError(
            f"--agent {name}={value}: name the model after model:, e.g. "
            f"--agent {name}=model:gpt-4o-mini"
        )
    try:
        return build_model_agent(dataclasses.replace(options.spec(), model=model))
    except ConfigurationError as exc:
        raise CliError(f"--agent {name}={value}: {exc}") from None


def unpriced_note(
    agents: Sequence[str], options: ModelOptions, budget: Budget | None
) -> str | None:
    """A note when ``--budget-usd`` meets model agents with no ``--price``: hosted APIs such as
    OpenAI's report tokens but no price, and an unpriced call counts as $0 against the
    budget."""
    if budget is None or budget.usd is None or options.price is not None:
        return None
    models = [model_name(text.partition("=")[2].strip()) for text in agents]
    base_url = options.base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    unpriced = [m for m in models if m is not None and published_price(base_url, m) is None]
    if not unpriced:
        return None
    return (
        "note: --budget-usd counts the dollars an endpoint reports, or OpenAI's published price "
        f"on its API; {', '.join(unpriced)} at {base_url} has neither, so its calls count as $0 "
        "unless --price IN/OUT gives the model's price"
    )


def parse_price(text: str) -> Price:
    """``--price IN/OUT``: US dollars per million input and output tokens."""
    given, separator, output = text.partition("/")
    try:
        if not separator:
            raise ValueError(text)
        prices = float(given), float(output)
    except ValueError:
        raise CliError(
            f"--price {text!r} is not IN/OUT, US dollars per million input and output tokens, "
            "e.g. --price 0.15/0.60"
        ) from None
    if not all(math.isfinite(price) and price >= 0 for price in prices):
        raise CliError(f"--price {text!r}: prices must be finite numbers >= 0")
    return Price(input_per_million=prices[0], output_per_million=prices[1])


def budget_from(usd: float | None, tokens: int | None, seconds: float | None) -> Budget | None:
    """The session's budget from ``--budget-usd``, ``--budget-tokens`` and ``--budget-seconds``
    (``None`` when none is given); a limit of zero or less is refused, naming the option."""
    for option, value in (
        ("--budget-usd", usd),
        ("--budget-tokens", tokens),
        ("--budget-seconds", seconds),
    ):
        if value is not None and not value > 0:
            raise CliError(
                f"{option} {value} can let nothing run: give a positive limit, or leave it out "
                "for no limit"
            )
    if usd is None and tokens is None and seconds is None:
        return None
    try:
        return Budget(usd=usd, tokens=tokens, seconds=seconds)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
