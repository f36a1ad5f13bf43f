"""A frozen policy that follows a fixed plan, the way a scripted or weak agent does.

It takes the first step of its plan that has not happened yet. When an attempt did not happen
— it is asked again and the world has not moved (a harness vetoed the action) — it sets that
step aside and tries the next one; once the world moves, set-aside steps are tried again. It
reads no message text: a veto works on it only by being a real veto, never through a phrase.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = ["PlanFollower"]

GIVE_UP_AFTER = 3
"""Refusals of one step after which the policy drops it for good (it never loops forever)."""


class PlanFollower:
    """Chooses the next step of ``plan`` given the steps ``done`` so far (both JSON actions)."""

    def __init__(self) -> None:
        self._last: Any = None
        self._last_done: tuple[bytes, ...] | None = None
        self._set_aside: set[bytes] = set()
        self._refusals: dict[bytes, int] = {}

    def next_step(self, plan: Sequence[Any], done: Sequence[Any]) -> Any | None:
        """The step to attempt now, or ``None`` when nothing is left."""
        done_keys = tuple(_key(step) for step in done)
        if self._last is not None:
            last = _key(self._last)
            if done_keys == self._last_done and last not in done_keys:
                self._set_aside.add(last)  # asked again, nothing moved: it did not happen
                self._refusals[last] = self._refusals.get(last, 0) + 1
            elif done_keys != self._last_done:
                self._set_aside.clear()
        remaining = [
            step
            for step in plan
            if _key(step) not in done_keys and self._refusals.get(_key(step), 0) < GIVE_UP_AFTER
        ]
        if not remaining:
            self._last = None
            return None
        choice = next((s for s in remaining if _key(s) not in self._set_aside), remaining[0])
        if _key(choice) in self._set_aside:
            self._set_aside.clear()  # everything left was refused: try again from the top
        self._last, self._last_done = choice, done_keys
        return choice


def _key(step: Any) -> bytes:
    return msgspec.json.encode(step, order="sorted")
