"""Effects cross process boundaries as JSON and come back as the same values."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from envharness.errors import ConfigurationError
from envharness.hooks import AddHint, Allow, BlockAndPrompt, Rewrite, effect_from_json


@pytest.mark.parametrize(
    "effect",
    [
        Allow(),
        Rewrite(action={"tool": "lookup"}, reason="x"),
        BlockAndPrompt(message="m"),
        AddHint(text="t"),
    ],
)
def test_effects_round_trip_through_json(effect: Any) -> None:
    assert effect_from_json(msgspec.json.decode(msgspec.json.encode(effect))) == effect
    assert effect_from_json(effect) is effect


def test_none_is_no_intervention() -> None:
    assert effect_from_json(None) is None


@pytest.mark.parametrize(
    "value",
    [{"effect": "teleport"}, {"effect": "hint"}, {"effect": "rewrite"}, "allow", 3, [Allow()]],
)
def test_anything_else_is_refused_with_the_choices(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="which is not an effect") as caught:
        effect_from_json(value)
    assert "block_and_prompt(message)" in str(caught.value)
