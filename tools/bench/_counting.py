"""Shared by the benchmarks: counting the journal's commits without changing it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envharness.store.journal import Journal


class CommitCounter:
    """Counts the journal's transactions by wrapping its one method that runs them."""

    def __init__(self) -> None:
        self.commits = 0
        self.rows = 0
        self._original = Journal._transaction

    def __enter__(self) -> CommitCounter:
        original = self._original

        def counted(journal: Journal, batch: Iterable[Any]) -> None:
            batch = list(batch)
            original(journal, batch)
            self.commits += 1
            self.rows += sum(len(request.rows) for request in batch)

        Journal._transaction = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Journal._transaction = self._original  # type: ignore[method-assign]
