"""Argument fields and fact families: what tells options of one action apart, and which facts
are indexed by it.

Nothing here knows any environment; both are read off what a failure packet shows.

**Argument fields.** Actions of one name can differ by an argument: a board cell, a quantity,
a reply template. An *argument field* is a field other than the naming one whose value tells
apart admissible options of the same name (``{"op": "place", "cell": 3}`` and ``… "cell": 5``),
or — when the environment never says what is admissible — a word or integer field with a few
values that recur across sessions (an id unique to each session is no argument).

**Fact families.** Environments often expose one fact per possible argument. A
:class:`Family` is such a set of facts indexed by a value, linked to the action field whose
values index it:

- ``predicates``: predicates whose names differ only in one slot (``lit_3``, ``lit_7``;
  ``door_0_open`` … ``door_5_open``);
- ``position``: a state list read by position (``state["mask"][cell]``);
- ``key``: a state mapping read by key (``state["danger"]["3"]``);
- ``member``: a state list of values, marking those it holds (``3 in state["exits"]``).

A family *marks* an argument when its fact there is truthy; a family of numbers (not only 0 and
1) also *ranks* arguments. :meth:`Family.function` writes the fact as a nested function of hook
code; :meth:`Family.fact` computes exactly what that function returns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envharness.optimizer.engineers.actions import action_label
from envharness.optimizer.engineers.contract import FailureStep

__all__ = [
    "MAX_ARGUMENT_VALUES",
    "MAX_FAMILIES",
    "Family",
    "argument_fields",
    "discover_families",
    "field_values",
    "is_integer",
]

MAX_ARGUMENT_VALUES = 12
"""An argument field has at most this many distinct values (more is an id or free text)."""
MAX_FAMILIES = 8
"""Families kept per packet (each one multiplies the rules a search replays)."""

_SLOT = re.compile(r"\d+|[A-Za-z]+")


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _argument_value(value: Any) -> bool:
    """A value an argument can take: an integer, or one word of text."""
    return is_integer(value) or (isinstance(value, str) and bool(value) and " " not in value)


@dataclass(frozen=True, slots=True)
class Family:
    """Facts indexed by the value of action field ``field`` (see the module doc).

    ``name`` is the state key (or, for ``predicates``, the name before the slot, ``suffix`` the
    name after it); ``indices`` the argument values the family was seen to cover; ``numeric``
    whether its facts are numbers that rank arguments rather than flags."""

    kind: str
    name: str
    field: str
    indices: tuple[Any, ...] = ()
    suffix: str = ""
    numeric: bool = False

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}:{self.suffix}:{self.field}"

    def fact(self, step: FailureStep, value: Any) -> Any:
        """The fact at argument ``value`` in ``step`` (``None`` where the family says nothing)."""
        if self.kind == "predicates":
            return step.predicates.get(f"{self.name}{value}{self.suffix}")
        found = step.state.get(self.name)
        if self.kind == "position":
            if not isinstance(found, list) or not is_integer(value):
                return None
            return found[value] if 0 <= value < len(found) else None
        if self.kind == "key":
            return found.get(str(value)) if isinstance(found, dict) else None
        if self.kind == "member":
            return (value in found) if isinstance(found, list) else None
        raise ValueError(f"unknown family kind {self.kind!r}")

    def marks(self, step: FailureStep, value: Any) -> bool | None:
        """Whether the family marks ``value`` (``None`` where it says nothing)."""
        found = self.fact(step, value)
        return None if found is None else bool(found)

    def function(self, name: str) -> list[str]:
        """The fact as a nested function ``name(value)`` of hook code (indented for a hook's
        body): it returns what :meth:`fact` returns."""
        lines = [f"    def {name}(value):"]
        if self.kind == "predicates":
            lines.append(
                f"        return ctx.predicates.get({self.name!r} + str(value) + {self.suffix!r})"
            )
            return lines
        lines.append(f"        found = ctx.state.get({self.name!r})")
        if self.kind == "position":
            lines += [
                "        if not isinstance(found, list) or not isinstance(value, int):",
                "            return None",
                "        if isinstance(value, bool) or value < 0 or value >= len(found):",
                "            return None",
                "        return found[value]",
            ]
        elif self.kind == "key":
            lines.append(
                "        return found.get(str(value)) if isinstance(found, dict) else None"
            )
        else:
            lines.append("        return (value in found) if isinstance(found, list) else None")
        return lines

    def text(self) -> str:
        """How a message names the family: ``lit_<cell>``, ``state mask[<cell>]``."""
        slot = f"<{self.field}>"
        if self.kind == "predicates":
            return f"{self.name}{slot}{self.suffix}"
        if self.kind == "member":
            return f"state {self.name} (holding the {self.field})"
        return f"state {self.name}[{slot}]"


# -- argument fields -----------------------------------------------------------------------------


def field_values(steps: Iterable[FailureStep]) -> dict[str, list[Any]]:
    """Every argument-like value (an integer or one word) each action field took, in actions and
    admissible options, first seen first."""
    found: dict[str, dict[str, Any]] = {}
    for step in steps:
        for action in [step.action, *(step.admissible or [])]:
            if not isinstance(action, dict):
                continue
            for key, value in action.items():
                if isinstance(key, str) and _argument_value(value):
                    found.setdefault(key, {}).setdefault(json.dumps(value), value)
    return {key: list(values.values()) for key, values in found.items()}


def argument_fields(
    sessions: Sequence[Sequence[FailureStep]], name_field: str | None
) -> dict[str, list[Any]]:
    """The argument fields of the packet's actions (see the module doc), with their values."""
    steps = [step for session in sessions for step in session]
    values = field_values(steps)
    chosen: set[str] = set()
    shown = [step.admissible for step in steps if step.admissible]
    if shown:
        for options in shown:
            by_name: dict[str, list[dict[str, Any]]] = {}
            for option in options:
                if isinstance(option, dict):
                    by_name.setdefault(action_label(option, name_field), []).append(option)
            for group in by_name.values():
                for key in {k for option in group for k in option if k != name_field}:
                    differing = {json.dumps(option.get(key)) for option in group}
                    if len(differing) > 1 and all(_argument_value(o.get(key)) for o in group):
                        chosen.add(key)
    else:
        for key, seen in values.items():
            if key == name_field or not 2 <= len(seen) <= MAX_ARGUMENT_VALUES:
                continue
            sessions_of: dict[str, set[int]] = {}
            for number, session in enumerate(sessions):
                for step in session:
                    if isinstance(step.action, dict) and key in step.action:
                        encoded = json.dumps(step.action[key])
                        sessions_of.setdefault(encoded, set()).add(number)
            if any(len(members) > 1 for members in sessions_of.values()):
                chosen.add(key)
    return {
        key: values[key]
        for key in sorted(chosen)
        if key in values and len(values[key]) <= MAX_ARGUMENT_VALUES
    }


# -- families ------------------------------------------------------------------------------------


def discover_families(
    steps: Sequence[FailureStep],
    predicate_keys: Iterable[str],
    fields: Mapping[str, Sequence[Any]],
) -> list[Family]:
    """The families the packet shows, each linked to the action field (of ``fields``, argument
    fields and the naming field with their values) whose values index it. Of families that say
    the same at every step (a mask and one predicate per action), the first kind listed in the
    module doc is kept: two would only be textual variants of one rule."""
    predicates = set(predicate_keys)
    for step in steps:
        predicates.update(step.predicates)
    families = _predicate_families(sorted(predicates), fields)
    families += _state_families(steps, fields)
    ordered = sorted(families, key=lambda f: (_KINDS.index(f.kind), -len(f.indices), f.key))
    kept: dict[str, Family] = {}
    for family in ordered:
        values = sorted({json.dumps(v) for v in (*family.indices, *fields[family.field])})
        read = family.fact if family.numeric else family.marks
        said = json.dumps(
            [read(step, json.loads(v)) for step in steps for v in values], default=str
        )
        kept.setdefault(f"{family.field}:{said}", family)
    return list(kept.values())[:MAX_FAMILIES]


_KINDS = ("predicates", "position", "key", "member")


def _typed(text: str, values: Sequence[Any]) -> Any:
    """An index read from a name, typed like the field's values (``"3"`` → ``3``)."""
    if values and all(is_integer(v) for v in values):
        return int(text) if text.isdigit() else None
    return text


def _predicate_families(names: Sequence[str], fields: Mapping[str, Sequence[Any]]) -> list[Family]:
    slots: dict[tuple[str, str], dict[str, str]] = {}
    for name in names:
        for match in _SLOT.finditer(name):
            prefix, suffix = name[: match.start()], name[match.end() :]
            slots.setdefault((prefix, suffix), {})[match.group(0)] = name
    families = []
    for (prefix, suffix), members in sorted(slots.items()):
        if len(members) < 2:
            continue
        for field, values in sorted(fields.items()):
            texts = {str(v) for v in values}
            if len(texts & set(members)) < min(2, len(texts)):
                continue
            indices = [_typed(text, values) for text in members]
            if any(index is None for index in indices):
                continue
            families.append(
                Family("predicates", prefix, field, tuple(sorted(indices)), suffix=suffix)
            )
    return families


def _state_families(
    steps: Sequence[FailureStep], fields: Mapping[str, Sequence[Any]]
) -> list[Family]:
    lists: dict[str, list[list[Any]]] = {}
    maps: dict[str, list[dict[str, Any]]] = {}
    for step in steps:
        for key, value in step.state.items():
            if isinstance(value, list) and all(_scalar(item) for item in value):
                lists.setdefault(key, []).append(value)
            elif isinstance(value, dict) and value and all(_scalar(v) for v in value.values()):
                maps.setdefault(key, []).append(value)
    families: list[Family] = []
    for key, seen in sorted(lists.items()):
        items = [item for value in seen for item in value]
        numeric = _numeric(items)
        flags = all(isinstance(item, bool) or item in (0, 1) for item in items)
        length = min(len(value) for value in seen)
        for field, values in sorted(fields.items()):
            ints = [v for v in values if is_integer(v)]
            whole = len(ints) == len(values) and all(0 <= v < length for v in ints)
            if (flags or numeric) and length >= 2 and len(ints) >= 2 and whole:
                families.append(
                    Family("position", key, field, tuple(range(length)), numeric=numeric)
                )
            members = {json.dumps(item) for item in items if not isinstance(item, bool)}
            overlap = members & {json.dumps(v) for v in values}
            if not flags and overlap:
                families.append(Family("member", key, field, tuple(sorted(values, key=str))))
    for key, mappings in sorted(maps.items()):
        keys = {k for mapping in mappings for k in mapping}
        items = [item for mapping in mappings for item in mapping.values()]
        for field, values in sorted(fields.items()):
            if len(keys & {str(v) for v in values}) >= min(2, len(values)):
                indices = [_typed(k, values) for k in sorted(keys)]
                families.append(
                    Family(
                        "key",
                        key,
                        field,
                        tuple(i for i in indices if i is not None),
                        numeric=_numeric(items),
                    )
                )
    return families


def _scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float | str) or value is None


def _numeric(items: Sequence[Any]) -> bool:
    """Numbers that rank (not flags): some number other than 0 and 1, none of them text."""
    numbers = [i for i in items if isinstance(i, int | float) and not isinstance(i, bool)]
    return bool(numbers) and len(numbers) == len(items) and any(n not in (0, 1) for n in numbers)
