"""What every executor accepts as a number of workers (or of experiments to split them among).

One test, not one per constructor: Python counts ``True`` as the integer 1, and a flag passed
where a count was meant must be refused like any other wrong value, not run one worker.
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["is_count"]


def is_count(value: object, most: int | None = None) -> TypeGuard[int]:
    """Whether ``value`` is a whole number from 1 (to ``most``, when given); a bool is not."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1
        and (most is None or value <= most)
    )
