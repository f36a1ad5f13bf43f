"""A model's action checked against the environment's action schema, in words a model can use.

The environment publishes its action type as JSON Schema (``EnvironmentRef.action_schema``); a
model agent checks each answer against it before returning it, so a wrong answer is re-asked
with the reason instead of being blocked by the environment a turn later. envharness takes on
no JSON Schema dependency for this: :func:`action_problems` checks the subset that action types
generated from Python types use, and ignores every other keyword (so an unusual schema is
checked less strictly, never refused):

- ``$ref`` to ``#``, ``#/$defs/…`` or ``#/definitions/…``; ``allOf``, ``anyOf``, ``oneOf``
  (a ``discriminator`` picks the branch by its tag, for a clearer message);
- ``type`` (one or a list; ``integer`` means a whole number that is not a boolean), ``enum``,
  ``const``;
- numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``;
- strings: ``minLength``, ``maxLength``, ``pattern``;
- arrays: ``items``, ``prefixItems``, ``minItems``, ``maxItems``;
- objects: ``properties``, ``required``, ``additionalProperties`` (``false`` or a schema).

Each problem names where it is (``$.move.to``) and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = ["MAX_PROBLEMS", "action_problems", "resolve"]

MAX_PROBLEMS = 5
"""At most this many problems are reported (a model fixes the first ones first)."""
_MAX_DEPTH = 64

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def resolve(node: Any, root: Any) -> Any:
    """``node`` with its ``$ref`` followed (several in a row too); an unknown one stays put."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(node, Mapping) or not isinstance(node.get("$ref"), str):
            return node
        target = _target(node["$ref"], root)
        if target is None:
            return node
        node = target
    return node


def action_problems(value: Any, schema: Mapping[str, Any] | None) -> list[str]:
    """Why ``value`` does not fit ``schema`` (empty when it does, or when there is no schema)."""
    if not schema:
        return []
    problems: list[str] = []
    _check(value, schema, schema, "$", problems, 0)
    return problems[:MAX_PROBLEMS]


def _target(ref: str, root: Any) -> Any:
    if ref == "#":
        return root
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix) and isinstance(root, Mapping):
            table = root.get(prefix[2:-1])
            if isinstance(table, Mapping):
                return table.get(ref.removeprefix(prefix))
    return None


def _check(value: Any, node: Any, root: Any, path: str, problems: list[str], depth: int) -> None:
    if depth > _MAX_DEPTH or len(problems) >= MAX_PROBLEMS:
        return
    node = resolve(node, root)
    if node is False:
        problems.append(f"{path} is not allowed: the schema accepts nothing here")
        return
    if not isinstance(node, Mapping):
        return
    before = len(problems)
    _check_type(value, node, path, problems)
    if len(problems) > before:
        return  # the rest would only repeat that the type is wrong
    if "const" in node and not _same(value, node["const"]):
        problems.append(f"{path} must be {_show(node['const'])}, not {_show(value)}")
    enum = node.get("enum")
    if isinstance(enum, list) and not any(_same(value, option) for option in enum):
        options = ", ".join(_show(option) for option in enum[:20])
        problems.append(f"{path} must be one of {options}; {_show(value)} is not")
    if _is_number(value):
        _check_number(value, node, path, problems)
    elif isinstance(value, str):
        _check_string(value, node, path, problems)
    elif isinstance(value, list):
        _check_array(value, node, root, path, problems, depth)
    elif isinstance(value, dict):
        _check_object(value, node, root, path, problems, depth)
    for part in node.get("allOf") or ():
        _check(value, part, root, path, problems, depth + 1)
    for keyword in ("anyOf", "oneOf"):
        forms = node.get(keyword)
        if isinstance(forms, list) and forms:
            _check_union(value, node, forms, root, path, problems, depth)


def _check_type(value: Any, node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    wanted = node.get("type")
    if wanted is None:
        return
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    if any(_has_type(value, name) for name in names):
        return
    expected = " or ".join(str(name) for name in names)
    problems.append(f"{path} must be {_article(expected)}, not {_described(value)}")


def _has_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return _is_number(value)
    if name == "null":
        return value is None
    expected = _TYPES.get(name)
    return expected is None or isinstance(value, expected)


def _check_number(value: float, node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    for keyword, words in _BOUNDS.items():
        limit = node.get(keyword)
        if _is_number(limit) and not _within(keyword, value, limit):
            problems.append(f"{path} must be {words} {_show(limit)}, not {_show(value)}")
    step = node.get("multipleOf")
    if _is_number(step) and step > 0:
        ratio = value / step
        if not math.isclose(ratio, round(ratio), rel_tol=0.0, abs_tol=1e-9):
            problems.append(f"{path} must be a multiple of {_show(step)}, not {_show(value)}")


_BOUNDS = {
    "minimum": "at least",
    "maximum": "at most",
    "exclusiveMinimum": "more than",
    "exclusiveMaximum": "less than",
}


def _within(keyword: str, value: float, limit: float) -> bool:
    if keyword == "minimum":
        return value >= limit
    if keyword == "maximum":
        return value <= limit
    if keyword == "exclusiveMinimum":
        return value > limit
    return value < limit


def _check_string(value: str, node: Mapping[str, Any], path: str, problems: list[str]) -> None:
    shortest, longest = node.get("minLength"), node.get("maxLength")
    if isinstance(shortest, int) and len(value) < shortest:
        problems.append(f"{path} must have at least {shortest} characters, not {len(value)}")
    if isinstance(longest, int) and len(value) > longest:
        problems.append(f"{path} must have at most {longest} characters, not {len(value)}")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            matches = re.search(pattern, value) is not None
        except re.error:
            matches = True  # a pattern Python cannot read is not the model's fault
        if not matches:
            problems.append(f"{path} must match the pattern {pattern!r}; {_show(value)} does not")


def _check_array(
    value: list[Any],
    node: Mapping[str, Any],
    root: Any,
    path: str,
    problems: list[str],
    depth: int,
) -> None:
    fewest, most = node.get("minItems"), node.get("maxItems")
    if isinstance(fewest, int) and len(value) < fewest:
        problems.append(f"{path} must have at least {fewest} items, not {len(value)}")
    if isinstance(most, int) and len(value) > most:
        problems.append(f"{path} must have at most {most} items, not {len(value)}")
    prefix = node.get("prefixItems")
    leading = list(prefix) if isinstance(prefix, list) else []
    for index, (item, part) in enumerate(zip(value, leading, strict=False)):
        _check(item, part, root, f"{path}[{index}]", problems, depth + 1)
    items = node.get("items")
    if isinstance(items, Mapping) or items is False:
        for index in range(len(leading), len(value)):
            if items is False:
                problems.append(f"{path} must have at most {len(leading)} items")
                break
            _check(value[index], items, root, f"{path}[{index}]", problems, depth + 1)


def _check_object(
    value: dict[Any, Any],
    node: Mapping[str, Any],
    root: Any,
    path: str,
    problems: list[str],
    depth: int,
) -> None:
    properties = node.get("properties")
    known: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    required = node.get("required")
    missing = [key for key in required or () if isinstance(key, str) and key not in value]
    if missing:
        problems.append(f"{path} is missing the required field(s) {', '.join(missing)}")
    for key, part in known.items():
        if key in value:
            _check(value[key], part, root, _child(path, key), problems, depth + 1)
    extra = node.get("additionalProperties")
    unknown = [key for key in value if key not in known]
    if extra is False and unknown:
        allowed = ", ".join(known) or "none"
        problems.append(
            f"{path} has field(s) the schema does not allow: {', '.join(map(str, unknown))} "
            f"(allowed: {allowed})"
        )
    elif isinstance(extra, Mapping):
        for key in unknown:
            _check(value[key], extra, root, _child(path, str(key)), problems, depth + 1)


def _check_union(
    value: Any,
    node: Mapping[str, Any],
    options: list[Any],
    root: Any,
    path: str,
    problems: list[str],
    depth: int,
) -> None:
    chosen = _by_discriminator(value, node, root)
    if chosen is not None:
        _check(value, chosen, root, path, problems, depth + 1)
        return
    attempts = []
    for option in options:
        found: list[str] = []
        _check(value, option, root, path, found, depth + 1)
        if not found:
            return
        attempts.append(found)
    nearest = min(attempts, key=len)
    problems.append(
        f"{path} fits none of the {len(options)} allowed forms; the nearest: {'; '.join(nearest)}"
    )


def _by_discriminator(value: Any, node: Mapping[str, Any], root: Any) -> Any:
    discriminator = node.get("discriminator")
    if not isinstance(discriminator, Mapping) or not isinstance(value, dict):
        return None
    tag = value.get(discriminator.get("propertyName"))
    mapping = discriminator.get("mapping")
    if not isinstance(tag, str) or not isinstance(mapping, Mapping):
        return None
    ref = mapping.get(tag)
    return _target(ref, root) if isinstance(ref, str) else None


def _same(left: Any, right: Any) -> bool:
    """JSON equality: ``1`` is not ``true``, and ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    return bool(left == right)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f"{path}[{key!r}]"


def _described(value: Any) -> str:
    if value is None:
        return "null"
    return f"{_kind(value)} {_show(value)}"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _article(name: str) -> str:
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
