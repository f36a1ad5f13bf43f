"""Published prices: OpenAI's list price for calls to OpenAI's API, and nobody else's."""

from __future__ import annotations

import pytest

from envharness.llm.prices import OPENAI_PRICES, published_price
from envharness.llm.provider import Price


def test_a_model_on_openais_api_gets_its_list_price() -> None:
    price = published_price("https://api.openai.com/v1", "gpt-4o-mini")
    assert price == Price(input_per_million=0.15, output_per_million=0.60)
    assert price.usd(1_000_000, 1_000_000) == pytest.approx(0.75)


def test_a_dated_snapshot_takes_its_familys_price_and_the_longest_family_wins() -> None:
    snapshot = published_price("https://api.openai.com/v1", "gpt-4o-mini-2024-07-18")
    assert snapshot == OPENAI_PRICES["gpt-4o-mini"]
    assert (
        published_price("https://api.openai.com/v1", "gpt-4o-2024-08-06") == OPENAI_PRICES["gpt-4o"]
    )


@pytest.mark.parametrize(
    ("base_url", "model"),
    [
        ("http://127.0.0.1:8000/v1", "gpt-4o-mini"),  # a local server serving a same-named model
        ("https://openrouter.example/v1", "gpt-4o-mini"),
        ("https://api.openai.com/v1", "gpt-4o-minimal"),  # not a dated snapshot of a family
        ("https://api.openai.com/v1", "my-fine-tune"),
    ],
)
def test_no_price_is_guessed_elsewhere(base_url: str, model: str) -> None:
    assert published_price(base_url, model) is None
