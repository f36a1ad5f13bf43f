"""Budgets in the runtime: what a session or an experiment has spent, against its limit.

A :class:`BudgetWatch` holds one :class:`~envharness.contracts.budget.Budget` and the
:class:`~envharness.contracts.budget.Spending` against it: every ``cost`` record the session
writes (what its agents reported), plus wall time since the watch was started, plus what
earlier segments spent (a resume recomputes that from the evidence, so a budget means the same
thing however often a session was stopped and resumed). A session watches its own budget and
its experiment's, which all the experiment's sessions share.

Only a session with a budget pays for this: :func:`counting` wraps its record function to add
each ``cost`` as it is recorded, and a session without one records exactly as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from envharness.contracts.budget import Budget, Spending
from envharness.records import Cost, Payload, RecordRow

__all__ = ["BUDGET_PREFIX", "BudgetWatch", "RecordFunction", "counting", "over_budget"]

BUDGET_PREFIX = "budget: "
"""How the reason of a session or experiment stopped by a budget begins."""

RecordFunction = Callable[..., RecordRow]
"""A session recorder's ``record(payload, *, turn=None, participant=None)``."""


class BudgetWatch:
    """One budget and what has been spent against it (``whose`` names it in the reason)."""

    __slots__ = ("_earlier_seconds", "_since", "budget", "spending", "whose")

    def __init__(self, budget: Budget, spent: Spending | None = None, *, whose: str = "") -> None:
        self.budget = budget
        self.spending = Spending() if spent is None else dataclasses.replace(spent)
        """Spent so far, this run's costs included; ``seconds`` is brought up to date by
        :meth:`exceeded`."""
        self.whose = whose
        self._earlier_seconds = self.spending.seconds
        self._since: float | None = None

    def start(self) -> None:
        """Start the wall clock (once: a second call keeps the first start)."""
        if self._since is None:
            self._since = time.monotonic()

    def add(self, cost: Cost) -> None:
        self.spending.add(cost)

    def exceeded(self) -> str | None:
        """Why the budget is spent (``"budget: ..."``, naming the limit), or ``None``."""
        spending = self.spending
        if self._since is not None:
            spending.seconds = self._earlier_seconds + (time.monotonic() - self._since)
        reason = self.budget.exceeded(spending)
        return None if reason is None else f"{BUDGET_PREFIX}{self.whose}{reason}"


def over_budget(watches: Sequence[BudgetWatch]) -> str | None:
    """The first of ``watches`` that is spent, as a stop reason; ``None`` while all have some
    left."""
    for watch in watches:
        reason = watch.exceeded()
        if reason is not None:
            return reason
    return None


def counting(record: RecordFunction, watches: Sequence[BudgetWatch]) -> RecordFunction:
    """``record``, also adding every ``cost`` it records to each of ``watches``."""
    adders = tuple(watch.spending.add for watch in watches)

    def record_counting(payload: Payload, **where: Any) -> RecordRow:
        if type(payload) is Cost:
            for add in adders:
                add(payload)
        return record(payload, **where)

    return record_counting
