"""The notebook: JSON values only, exactly as written, under a size cap."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from envharness.errors import ConfigurationError
from envharness.hooks import NOTEBOOK_LIMIT_BYTES, checked_notebook
from envharness.hooks.notebook import encoded_notebook


def test_a_json_notebook_is_copied_deeply() -> None:
    original = {"seen": [1, 2.5, "x", None, True], "nested": {"a": {"b": []}}}
    copy = checked_notebook(original)
    assert copy == original
    copy["nested"]["a"]["b"].append(1)
    assert original["nested"]["a"]["b"] == []


def test_the_encoding_is_canonical() -> None:
    assert (
        encoded_notebook({"b": 1, "a": 2}) == encoded_notebook({"a": 2, "b": 1}) == b'{"a":2,"b":1}'
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([1], "must be a JSON object (a dict), not list"),
        ({"t": (1, 2)}, "nb['t'] is a tuple (use a list)"),
        ({"s": {1}}, "nb['s'] is a set (use a list)"),
        ({"d": datetime.date(2024, 1, 1)}, "nb['d'] is a date"),
        ({"b": b"x"}, "nb['b'] is a bytes"),
        ({"f": float("inf")}, "nb['f'] is inf, which JSON cannot hold"),
        ({"k": {1: "x"}}, "nb['k'] has the key 1 (int)"),
        ({"deep": [[{"x": object()}]]}, "nb['deep'][0][0]['x'] is a object"),
    ],
)
def test_values_json_would_change_are_refused_naming_where(value: Any, problem: str) -> None:
    with pytest.raises(ConfigurationError, match="notebook") as caught:
        checked_notebook(value)
    assert problem in str(caught.value)


def test_a_self_referencing_notebook_is_refused_not_recursed_forever() -> None:
    loop: dict[str, Any] = {}
    loop["me"] = loop
    with pytest.raises(ConfigurationError, match="nests deeper than 64 levels"):
        checked_notebook(loop)


def test_the_cap_counts_json_bytes() -> None:
    fits = {"x": "a" * (NOTEBOOK_LIMIT_BYTES - len('{"x":""}'))}
    assert checked_notebook(fits) == fits
    with pytest.raises(ConfigurationError, match="over its 65536-byte cap"):
        checked_notebook({"x": "a" * NOTEBOOK_LIMIT_BYTES})
    with pytest.raises(ConfigurationError, match="over its 10-byte cap"):
        checked_notebook({"x": "0123456789"}, limit=10)
