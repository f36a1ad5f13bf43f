"""Published per-token prices of hosted models, so a ``usd`` budget counts without setup.

OpenAI's API reports tokens but not money, so without a price every call would cost "$0" and a
money budget would never stop anything. This table holds the list prices (US dollars per
million input / output tokens, standard tier) that OpenAI published as of :data:`AS_OF`. It
applies only to calls sent to OpenAI's own API root: a local or third-party server that serves
a model under the same name is not charged OpenAI's price. Prices change; give your own with
``OpenAICompatibleProvider(prices=...)``, ``--price IN/OUT`` or a manifest's ``price`` — those
always win over this table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from envharness.llm.provider import Price

__all__ = ["AS_OF", "OPENAI_PRICES", "published_price"]

AS_OF = "2025-08"
"""When the prices below were OpenAI's published list prices."""

OPENAI_PRICES: Mapping[str, Price] = {
    "gpt-5": Price(input_per_million=1.25, output_per_million=10.00),
    "gpt-5-mini": Price(input_per_million=0.25, output_per_million=2.00),
    "gpt-5-nano": Price(input_per_million=0.05, output_per_million=0.40),
    "gpt-4.1": Price(input_per_million=2.00, output_per_million=8.00),
    "gpt-4.1-mini": Price(input_per_million=0.40, output_per_million=1.60),
    "gpt-4.1-nano": Price(input_per_million=0.10, output_per_million=0.40),
    "gpt-4o": Price(input_per_million=2.50, output_per_million=10.00),
    "gpt-4o-mini": Price(input_per_million=0.15, output_per_million=0.60),
    "o3-mini": Price(input_per_million=1.10, output_per_million=4.40),
    "o4-mini": Price(input_per_million=1.10, output_per_million=4.40),
}

_OPENAI_HOST = "api.openai.com"
_SNAPSHOT = re.compile(r"(?P<family>.+)-\d{4}-\d{2}-\d{2}")


def published_price(base_url: str, model: str) -> Price | None:
    """OpenAI's list price of ``model`` when ``base_url`` is OpenAI's API, else ``None``.

    A dated snapshot (``gpt-4o-mini-2024-07-18``) takes its family's price.
    """
    if urlsplit(base_url).hostname != _OPENAI_HOST:
        return None
    if model in OPENAI_PRICES:
        return OPENAI_PRICES[model]
    snapshot = _SNAPSHOT.fullmatch(model)
    return OPENAI_PRICES.get(snapshot["family"]) if snapshot else None
