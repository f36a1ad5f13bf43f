"""Naming actions without knowing the environment: which field tells actions apart.

Agents' actions are JSON objects whose shape only the environment knows. To cluster failures
and to mine rules, the optimizer needs a short name for an action (``issue_refund``, ``rm``). It
finds the *discriminating field* from the actions themselves: the string field present in most
actions, with the fewest distinct values above one (a ``tool`` or ``command`` field rather
than an ``order_id``). A free-text value (``rm -rf /tmp``) is named by its first word. Actions
with no string field at all (a Gymnasium ``Discrete`` move, ``{"action": 4}``) are told apart
by an integer field, chosen the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

__all__ = ["action_key", "action_label", "discriminating_field", "distinct", "first_word"]


def discriminating_field(actions: Iterable[Any]) -> str | None:
    """The field that best tells ``actions`` apart, or ``None`` when they are not objects.

    A string field wins over any integer field, so actions that carry a name keep it; an
    integer field names them only when none has a string field."""
    counts: dict[str, int] = {}
    values: dict[str, set[str]] = {}
    numbers: dict[str, int] = {}
    numbered: dict[str, set[int]] = {}
    total = 0
    for action in actions:
        if not isinstance(action, dict):
            continue
        total += 1
        for key, value in action.items():
            if not isinstance(key, str):
                continue
            if isinstance(value, str):
                counts[key] = counts.get(key, 0) + 1
                values.setdefault(key, set()).add(first_word(value))
            elif isinstance(value, int) and not isinstance(value, bool):
                numbers[key] = numbers.get(key, 0) + 1
                numbered.setdefault(key, set()).add(value)
    if not counts:
        counts = numbers
        values = {key: {str(number) for number in seen} for key, seen in numbered.items()}
    if not counts:
        return None

    def rank(key: str) -> tuple[float, int, int, str]:
        distinct = len(values[key])
        return (-counts[key] / total, 0 if distinct > 1 else 1, distinct, key)

    return min(counts, key=rank)


def action_label(action: Any, field: str | None) -> str:
    """A short name: the discriminating field's value (first word), else compact JSON."""
    if isinstance(action, dict) and field is not None:
        value = action.get(field)
        if isinstance(value, str):
            return first_word(value) or value
    text = msgspec.json.encode(action, order="sorted").decode()
    return text if len(text) <= 60 else text[:57] + "..."


def action_key(action: Any) -> str:
    """A canonical text of an action, to compare actions for equality."""
    return msgspec.json.encode(action, order="sorted").decode()


def first_word(text: str) -> str:
    words = text.split()
    return words[0] if words else ""


def distinct(items: Sequence[Any]) -> list[Any]:
    """``items`` without repeats (by canonical JSON), first occurrence kept."""
    seen: set[str] = set()
    kept: list[Any] = []
    for item in items:
        key = action_key(item)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept
