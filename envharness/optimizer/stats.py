"""Paired comparisons: is a candidate's gain over the harness it stacks on more than noise?

Each scenario is measured twice with the same seeds — under the accepted harness and under the
candidate — so the per-scenario differences are paired. :func:`paired_comparison` reports their
mean, a seeded percentile-bootstrap interval of that mean (the same resampler as experiment
reports, :mod:`envharness.scoring.bootstrap`), and an exact one-sided **sign test**: under "the
candidate is no better", improvements and worsenings are equally likely, so the chance of at
least the observed improvements among the non-tied scenarios is a binomial tail. The sign test
assumes nothing about the size of differences (pass/fail rewards are ±1 or 0) and is exact for
small suites — which is also its honest limit: with 4 scenarios all improving, p = 1/16 > 0.05.

A scenario in ``failed`` (the candidate's own hook code failed there) never counts as better
than the reference: its difference is at most 0. The optimizer passes it when optimizing a
metric, which can be negative (an episode's return), where a failed session's value of 0 would
otherwise be a gain (:func:`envharness.optimizer.measure.crashed`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import msgspec

from envharness.scoring.bootstrap import bootstrap_interval, bootstrap_seed, mean

__all__ = ["PairedComparison", "paired_comparison", "sign_test"]


class PairedComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Per-scenario differences (candidate - reference) summarised."""

    n: int
    mean: float
    interval: tuple[float, float] | None
    p_value: float
    improved: tuple[str, ...]
    worsened: tuple[str, ...]
    ties: int
    differences: dict[str, float]


def sign_test(improved: int, worsened: int) -> float:
    """One-sided exact sign test: P(X >= improved) for X ~ Binomial(improved + worsened, 1/2)."""
    n = improved + worsened
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(improved, n + 1))
    return min(1.0, float(tail) / float(2**n))


def paired_comparison(
    candidate: Mapping[str, float | None],
    reference: Mapping[str, float | None],
    *,
    seed: int,
    key: str,
    confidence: float,
    resamples: int,
    failed: Collection[str] = (),
) -> PairedComparison:
    """Compare over the scenarios both measured; a missing candidate value counts as 0, and a
    scenario in ``failed`` (the candidate's hook code failed there) gains nothing."""
    differences: dict[str, float] = {}
    for scenario, before in reference.items():
        after = candidate.get(scenario)
        difference = float(after or 0.0) - float(before or 0.0)
        differences[scenario] = min(difference, 0.0) if scenario in failed else difference
    values = list(differences.values())
    improved = tuple(s for s, d in differences.items() if d > 0)
    worsened = tuple(s for s, d in differences.items() if d < 0)
    interval = (
        bootstrap_interval(
            values,
            seed=bootstrap_seed(seed, "optimizer", key),
            confidence=confidence,
            resamples=resamples,
        )
        if values
        else None
    )
    return PairedComparison(
        n=len(values),
        mean=float(mean(values)) if values else 0.0,
        interval=interval,
        p_value=sign_test(len(improved), len(worsened)),
        improved=improved,
        worsened=worsened,
        ties=len(values) - len(improved) - len(worsened),
        differences=differences,
    )
