"""The checks of users' values before they are sealed: each fast path gives the full check's
answer (it only skips the round trip for what is plainly valid)."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import UNSET

from envharness.records import Score
from envharness.runtime.checks import SessionFailure, checked, checked_score

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
