"""What a session, an experiment or a model agent may spend: tokens, money and wall time.

A budget is a promise to the person paying: when a limit is reached, what is running stops
cleanly — recorded as stopped for ``budget``, resumable with a larger one — instead of failing
or running on. Every limit is optional; a limit of zero (or less) is refused, since it could
never let anything run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from envharness.errors import ConfigurationError
from envharness.records import Cost

__all__ = ["Budget", "SegmentClock", "Spending"]


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on spending; ``None`` means no limit on that quantity."""

    usd: float | None = None
    tokens: int | None = None
    """Input and output tokens together."""
    seconds: float | None = None
    """Wall time."""

    def __post_init__(self) -> None:
        for name in ("usd", "tokens", "seconds"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigurationError(
                    f"Budget {name} must be a number or None, not {type(value).__name__} {value!r}"
                )
            if not math.isfinite(value) or value <= 0:
                raise ConfigurationError(
                    f"Budget {name}={value!r} can let nothing run: give a positive limit, or "
                    f"leave {name} out for no limit"
                )

    def exceeded(self, spent: Spending) -> str | None:
        """Why ``spent`` is over this budget (naming the limit and the amount), or ``None``."""
        if self.usd is not None and spent.usd >= self.usd:
            return f"spent ${spent.usd:.4f} of a ${self.usd:.4f} budget"
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"used {spent.tokens:,} tokens of a {self.tokens:,}-token budget"
        if self.seconds is not None and spent.seconds >= self.seconds:
            return f"ran {spent.seconds:.1f} s of a {self.seconds:.1f} s budget"
        return None


@dataclass(slots=True)
class Spending:
    """What has been spent so far: a running sum of :class:`~envharness.records.Cost` values
    (an unknown amount counts as nothing). ``seconds`` is wall time, which whoever holds the
    budget measures and sets: the calls' own seconds overlap when they run side by side."""

    usd: float = 0.0
    tokens: int = 0
    seconds: float = 0.0
    calls: int = field(default=0)

    def add(self, cost: Cost | None) -> None:
        if cost is None:
            return
        self.calls += 1
        if cost.usd is not None and math.isfinite(cost.usd):  # NaN would blind the money limit
            self.usd += cost.usd
        self.tokens += (cost.input_tokens or 0) + (cost.output_tokens or 0)


class SegmentClock:
    """Wall time over a session's segments, as its records are read in order: each segment
    from its ``segment.started`` to its ``segment.ended`` — or, for one still running or one
    that crashed, to the last thing the session recorded (a ``session.status`` marks when a
    run began or ended, not play). A wall-time budget, the experiment report and the viewer
    all measure with this one clock, so they agree."""

    __slots__ = ("_began", "_last", "_total")

    def __init__(self) -> None:
        self._total = 0.0
        self._began: datetime | None = None
        self._last: datetime | None = None

    def saw(self, kind: str, at: datetime) -> None:
        if kind == "segment.started":
            self._close(self._last)
            self._began = at
        elif kind == "segment.ended":
            self._close(at)
        elif kind != "session.status":
            self._last = at

    def seconds(self, until: datetime | None = None) -> float:
        """The total, a segment left open counted to ``until`` (when the session last wrote,
        for a reader that did not see every record), else to the last record seen."""
        self._close(until if until is not None else self._last)
        return self._total

    def _close(self, end: datetime | None) -> None:
        if self._began is not None and end is not None:
            self._total += max(0.0, (end - self._began).total_seconds())
        self._began = None
