"""Uncertainty for small samples: a seeded percentile bootstrap, and Wilson for pass rates.

An experiment usually has a handful of trials per scenario, and metrics whose distribution
nobody knows (bounded, skewed, lumpy). The percentile bootstrap assumes no distribution and
needs nothing beyond the standard library: resample the observed values with replacement, take
the mean of each resample, and read the interval off the sorted means. Its weakness is the one
every method shares at small ``n``: the interval can only be as wide as the values observed, so
three identical values give a zero-width interval. That is why a single value gets no interval
at all rather than a ``[x, x]`` that would claim certainty.

A pass rate is different: all-pass is common, and a bootstrap of ``[1, 1, 1]`` is ``[1, 1]``.
The Wilson score interval stays honest there (3 of 3 passing is 0.44 to 1 at 95%), so pass
rates use it.

Reproducible means: the same values, seed and parameters give the same interval on any machine
and any Python version. The resampler therefore uses only ``random.Random(int).random()``,
the one part of :mod:`random` whose sequence Python guarantees not to change, and the seed is
a sha256 of its parts (never ``hash()``, which is salted per process).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from statistics import NormalDist

import msgspec

from envharness.errors import ConfigurationError

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "bootstrap_interval",
    "bootstrap_seed",
    "check_parameters",
    "mean",
    "wilson_interval",
]

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
"""Enough that the 2.5% and 97.5% percentiles move by well under the interval's width between
seeds, and still fast: 2,000 resamples of 100 values take a few tens of milliseconds."""


def bootstrap_seed(experiment_seed: int, *parts: str | None) -> int:
    """The bootstrap's seed for one interval: from the experiment's seed and what the interval
    is about (score version, scenario or ``None`` for the whole experiment, metric name).

    Each interval gets its own stream, so adding a metric or a scenario never changes the
    intervals already reported. The parts are JSON-encoded as a list, so no two different
    tuples of parts can collide by concatenation.
    """
    key = msgspec.json.encode([experiment_seed, *parts])
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def mean(values: Sequence[float]) -> float:
    """The mean, summed exactly (``math.fsum``) so the order of the values cannot change it,
    and kept between the smallest and largest value (the division can round past them)."""
    return min(max(math.fsum(values) / len(values), min(values)), max(values))


def bootstrap_interval(
    values: Sequence[float],
    *,
    seed: int,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of ``values``; ``None`` for fewer than two.

    ``resamples`` resamples of ``len(values)`` values drawn with replacement; the bounds are
    the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of their means, with
    linear interpolation between order statistics. The means of resamples lie between the
    smallest and largest value, so the interval does too.
    """
    check_parameters(confidence, resamples)
    n = len(values)
    if n < 2:
        return None
    if min(values) == max(values):
        return (values[0], values[0])
    uniform = random.Random(seed).random
    means = sorted(
        math.fsum([values[int(uniform() * n)] for _ in range(n)]) / n for _ in range(resamples)
    )
    tail = (1.0 - confidence) / 2.0
    smallest, largest = min(values), max(values)
    return (
        max(_quantile(means, tail), smallest),  # rounding must not put a bound past the data
        min(_quantile(means, 1.0 - tail), largest),
    )


def wilson_interval(
    successes: int, trials: int, *, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion; ``None`` when nothing was judged."""
    check_parameters(confidence, DEFAULT_RESAMPLES)
    if trials <= 0:
        return None
    z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(p * (1.0 - p) / trials + z2n / (4.0 * trials)) / (1.0 + z2n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact where rounding is not
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return (low, high)


def check_parameters(confidence: float, resamples: int) -> None:
    """Refuse a confidence outside (0, 1) or a resample count below one, naming the fix."""
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise ConfigurationError(f"confidence must be a number such as 0.95, not {confidence!r}")
    if not 0.0 < confidence < 1.0:
        raise ConfigurationError(
            f"confidence must be between 0 and 1 (e.g. 0.95 for 95%), not {confidence!r}"
        )
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ConfigurationError(
            f"resamples must be a positive integer (default {DEFAULT_RESAMPLES}), not {resamples!r}"
        )


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    low, high = ordered[below], ordered[above]
    return low + (high - low) * fraction if fraction else low
