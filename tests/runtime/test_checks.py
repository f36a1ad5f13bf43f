"""The checks of users' values before they are sealed: each fast path gives the full check's
answer (it only skips the round trip for what is plainly valid)."""

from __future__ import annotations

import types
from collections.abc import Generator
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from envharness.contracts.environment import Resolution
from envharness.records import Score
from envharness.runtime.checks import (
    SessionFailure,
    checked,
    checked_resolution,
    checked_score,
    checked_signals,
    is_pending,
)

SCORES = [
    Score(version="1", metrics={"total": 1.0, "turns": 5, "skipped": None}, passed=True),
    Score(version="1", metrics={}, uncertainty={"total": 0.5}),
    Score(version="1", metrics={"nan": float("nan")}, passed=False),
    Score(version="1", metrics={"won": 1.0}, per_participant={"a": {"won": 1.0}}),
    Score(version="1", metrics={"flag": True}),  # a bool is not a number here
    Score(version="1", metrics={"text": "high"}),  # type: ignore[dict-item]
    Score(version="1", metrics={1: 1.0}),  # type: ignore[dict-item]
    Score(version="1", passed=1),  # type: ignore[arg-type]
    Score(version=2),  # type: ignore[arg-type]
    Score(version="1", per_participant={"a": {"won": "yes"}}),  # type: ignore[dict-item]
    Score(version="1", uncertainty=[("a", 1.0)]),  # type: ignore[arg-type]
    Score(version="1", metrics={"big": 10**400}),  # sealed, it could never be read back
    Score(version="1", metrics={"large": 2**64, "negative": -(2**70)}),  # a float holds these
]


def _verdict(check: Any, score: Score) -> str:
    try:
        check(score)
    except SessionFailure as failure:
        return failure.reason
    return "valid"


@pytest.mark.parametrize("score", SCORES, ids=range(len(SCORES)))
def test_a_score_is_judged_as_the_full_check_judges_it(score: Score) -> None:
    full = _verdict(lambda s: checked(s, "the environment's score() report"), score)
    assert _verdict(checked_score, score) == full


def test_a_plain_score_is_returned_as_it_is() -> None:
    score = Score(version="1", metrics={"total": 2.0}, per_participant=UNSET)
    assert checked_score(score) is score


@pytest.mark.parametrize(
    "resolution",
    [Resolution(state={}, rewards={"a": 10**400}), Resolution(state={}, signals={"s": -(10**400)})],
    ids=["reward", "signal"],
)
def test_a_number_no_float_can_hold_is_refused_before_it_is_sealed(
    resolution: Resolution,
) -> None:
    """Records are read back with floats: such a number could be sealed but never read."""
    with pytest.raises(SessionFailure, match="a float can hold"):
        checked_signals(checked_resolution(resolution, {"a": "player"}))


def test_a_large_number_a_float_holds_passes() -> None:
    resolution = Resolution(state={}, rewards={"a": 2**64}, signals={"s": -(2**70)})
    assert checked_signals(checked_resolution(resolution, {"a": "player"})) == {"s": -(2**70)}


class _Ready(msgspec.Struct):
    value: int = 0


class _Later(msgspec.Struct):
    value: int = 0

    def __await__(self) -> Generator[Any, None, int]:
        return self.value
        yield


def test_a_type_found_not_awaitable_is_remembered_but_each_generator_is_asked() -> None:
    """``is_pending`` keeps the types it found not awaitable; a generator's answer is its own
    (one made by a ``types.coroutine`` function is awaitable, a plain one is not)."""

    def plain() -> Generator[None, None, None]:
        yield

    @types.coroutine
    def iterable_coroutine() -> Generator[None, None, None]:
        yield

    for _ in range(2):  # the second time from what was remembered
        assert not is_pending(_Ready())
        assert is_pending(_Later())
        assert not is_pending(plain())
        assert is_pending(iterable_coroutine())

    async def native() -> None:
        return None

    coroutine = native()
    assert is_pending(coroutine)
    coroutine.close()
