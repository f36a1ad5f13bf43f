"""What every executor takes for a number of workers: a bool is not one, though Python says so."""

from __future__ import annotations

import pytest

from envharness.runtime.executors.counts import is_count


@pytest.mark.parametrize(("value", "most"), [(1, None), (7, None), (3, 3), (1, 1)])
def test_a_whole_number_from_one_is_a_count(value: int, most: int | None) -> None:
    assert is_count(value, most)


@pytest.mark.parametrize(
    ("value", "most"), [(0, None), (-1, None), (True, None), (1.0, None), ("2", None), (4, 3)]
)
def test_anything_else_is_not(value: object, most: int | None) -> None:
    assert not is_count(value, most)
