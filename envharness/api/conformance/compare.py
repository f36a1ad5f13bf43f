"""Comparing what two runs recorded, and varying one participant's entries of a state.

Evidence is compared as items — turn, kind, participant and payload — of the records the
environment decided (observations, actions, outcomes, scores), never of those about the run
itself (status, segments, checkpoints, logs), which carry ids, hosts and times. A difference is
reported as the first place it shows, with both values there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from envharness.api.conformance.report import CheckFailed

__all__ = [
    "COMPARED",
    "UNTIMED",
    "Evidence",
    "Item",
    "declared_paths",
    "decoded",
    "difference",
    "entries_at",
    "first_mismatch",
    "keyed_by",
    "label",
    "plain",
    "replaced",
    "replacement",
]

COMPARED: Final = frozenset(
    {
        "observation",
        "action.attempted",
        "action.executed",
        "action.blocked",
        "outcome",
        "outcome.participant",
        "hint",
        "artifact",
        "score",
        "finding",
    }
)
"""The record kinds a comparison covers: everything the environment decided."""
UNTIMED: Final = ("seconds",)
"""Payload fields left out of a comparison: how long something took."""
_SHOWN = 160

Item = tuple[int | None, str, str | None, Any]
"""A record as compared: its turn, kind, participant and payload (without timings)."""
Evidence = list[Item]


def first_mismatch(left: Evidence, right: Evidence) -> tuple[Item, Item | None] | None:
    """The first record that differs (the second ``None`` when one run just recorded more)."""
    for mine, theirs in zip(left, right, strict=False):
        if mine != theirs:
            return mine, theirs
    if len(left) > len(right):
        return left[len(right)], None
    if len(right) > len(left):
        return right[len(left)], None
    return None


def label(item: Item) -> str:
    """``turn 3, observation of 'alice'`` (``the end`` for a score)."""
    turn, kind, participant, _ = item
    text = f"{'the end' if turn is None else f'turn {turn}'}, {kind}"
    return text + (f" of {participant!r}" if participant else "")


def difference(left: Any, right: Any, where: str) -> str:
    """The first place two JSON values differ, and both values there."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right), key=str):
            if left.get(key, _MISSING) != right.get(key, _MISSING):
                inner = f"{where}.{key}".strip(".")
                return difference(left.get(key, _MISSING), right.get(key, _MISSING), inner)
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for index, (mine, theirs) in enumerate(zip(left, right, strict=True)):
            if mine != theirs:
                return difference(mine, theirs, f"{where}[{index}]")
    return f"{where or 'the value'} is {_shown(left)} in one and {_shown(right)} in the other"


def decoded(data: bytes | None) -> Any:
    return None if data is None else msgspec.json.decode(data)


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING: Any = _Missing()


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "(missing)"
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


# -- states ----------------------------------------------------------------------------------------


def plain(value: Any) -> bool:
    """Plain JSON values all the way down: what a state without ``state_type`` comes back as."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and plain(inner) for key, inner in value.items())
    if isinstance(value, list | tuple):
        return all(plain(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


def keyed_by(value: Any, names: set[str], where: str = "") -> list[str]:
    """Dotted paths of mappings keyed by participants' names (at most 3 levels down)."""
    found: list[str] = []
    if not isinstance(value, dict) or where.count(".") > 2:
        return found
    for key, inner in value.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(inner, dict) and len(inner) > 1 and set(inner) <= names:
            found.append(path)
        else:
            found.extend(keyed_by(inner, names, path))
    return found


def declared_paths(declared: Any) -> list[str]:
    """An environment's ``private_state``, checked: dotted paths, as strings."""
    if (
        isinstance(declared, str)
        or not isinstance(declared, Sequence)
        or not all(isinstance(path, str) and path for path in declared)
    ):
        raise CheckFailed(
            f"private_state is {declared!r:.100}, not a sequence of dotted paths",
            'declare e.g. private_state = ("hands",) for state.hands[participant]',
        )
    return list(declared)


def entries_at(value: Any, path: str) -> Any:
    """What a dotted path names in a JSON value (``None`` when nothing)."""
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def replaced(value: Any, path: str, participant: str, new: Any) -> Any:
    """A copy of ``value`` with ``path``'s entry for ``participant`` replaced by ``new``."""
    head, _, rest = path.partition(".")
    copy = dict(value)
    if rest:
        copy[head] = replaced(value[head], rest, participant, new)
    else:
        copy[head] = {**value[head], participant: new}
    return copy


def replacement(current: Any, path: str, participant: str, others: Sequence[Any]) -> Any:
    """What another seed dealt ``participant`` there (a value the environment makes itself);
    else the current entry, altered."""
    for other in others:
        entries = entries_at(other, path)
        if isinstance(entries, dict) and participant in entries and entries[participant] != current:
            return entries[participant]
    return _altered(current)


def _altered(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, list):
        return [_altered(item) for item in reversed(value)] if value else [0]
    if isinstance(value, dict):
        return {key: _altered(item) for key, item in value.items()}
    return 0
