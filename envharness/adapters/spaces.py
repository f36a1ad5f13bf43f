"""Gymnasium spaces in JSON: values both ways, a JSON Schema per space, and legal-move checks.

Agents speak JSON, environments speak numpy: an observation goes out as plain JSON values
(arrays as nested lists, numpy scalars as Python numbers) and an action comes back as JSON and
is turned into what the space holds. The JSON Schema of the action space goes into the
environment's recorded spec, so an agent (a model reading its prompt, a program reading
``hello``) is told what is legal before it acts; :func:`problem` says why an action is not,
naming the space and what would be legal — that message is what a blocked agent reads.

Supported action spaces: ``Discrete`` (with ``start``), ``Box``, ``MultiDiscrete``,
``MultiBinary``, ``Text``, and ``Dict`` and ``Tuple`` of these. Any space's *values* encode
(:func:`to_json` does not need the space), so observations of other spaces still go out; only
an action space outside that list is refused (:func:`check_action_space`).

numpy and gymnasium are imported when a function first needs them, never at import time: a
plain install has neither.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Annotated, Any

import msgspec

from envharness.adapters._optional import require
from envharness.errors import ConfigurationError

__all__ = [
    "SUPPORTED",
    "action_type",
    "check_action_space",
    "discrete_values",
    "from_json",
    "json_schema",
    "move_of",
    "problem",
    "to_json",
    "to_json_subset",
]

SUPPORTED = ("Discrete", "Box", "MultiDiscrete", "MultiBinary", "Text", "Dict", "Tuple")
"""The action spaces an agent can answer in JSON."""

_SHOWN = 80
"""Characters of an offending value quoted in a message."""


@functools.cache
def _spaces() -> ModuleType:
    return require("gymnasium.spaces", "gymnasium")


@functools.cache
def _np() -> ModuleType:
    return require("numpy", "gymnasium")


# -- values --------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as JSON values: numpy arrays as nested lists, numpy scalars as Python numbers,
    tuples as lists, mappings as objects with string keys. A value JSON cannot hold raises
    ``TypeError`` naming its type."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "dtype"):  # a numpy array or scalar
        return tolist()
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    raise TypeError(f"a {type(value).__qualname__} has no JSON form")


def to_json_subset(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``mapping`` (an ``info`` dict) that have a JSON form; the others (live
    objects, callables) are left out rather than failing the step."""
    kept: dict[str, Any] = {}
    for key, value in mapping.items():
        try:
            kept[str(key)] = to_json(value)
        except TypeError:
            continue
    return kept


def from_json(space: Any, value: Any) -> Any:
    """A JSON action (already checked by :func:`problem`) as the value ``space`` holds."""
    spaces = _spaces()
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        return _np().asarray(value, dtype=space.dtype).reshape(space.shape)
    if isinstance(space, spaces.Dict):
        return {key: from_json(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(from_json(sub, item) for sub, item in zip(space.spaces, value, strict=True))
    if isinstance(space, spaces.Text):
        return str(value)
    raise _unsupported(space, "action space")


def discrete_values(space: Any, limit: int = 64) -> list[int] | None:
    """Every value of a ``Discrete`` space of at most ``limit`` values (what hooks are offered
    as admissible actions); ``None`` for any other space, or a larger one."""
    if not isinstance(space, _spaces().Discrete) or int(space.n) > limit:
        return None
    start = int(space.start)
    return list(range(start, start + int(space.n)))


# -- what is supported ---------------------------------------------------------------------------


def check_action_space(space: Any, where: str) -> None:
    """Refuse (naming it) an action space an agent cannot answer in JSON."""
    spaces = _spaces()
    if isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            check_action_space(sub, where)
    elif isinstance(space, spaces.Tuple):
        for sub in space.spaces:
            check_action_space(sub, where)
    elif not isinstance(
        space,
        spaces.Discrete | spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary | spaces.Text,
    ):
        raise _unsupported(space, f"{where}'s action space")


def _unsupported(space: Any, what: str) -> ConfigurationError:
    return ConfigurationError(
        f"{what} {space!r} is not supported: agents answer in JSON, which envharness maps to "
        f"{', '.join(SUPPORTED)} spaces; wrap the environment (gymnasium.ActionWrapper) to "
        "expose one of those"
    )


# -- JSON Schema ---------------------------------------------------------------------------------


def json_schema(space: Any) -> dict[str, Any]:
    """The JSON Schema of ``space``'s values as JSON, described by the space's own name."""
    return {**_schema(space), "description": repr(space)}


def action_type(name: str, schema: dict[str, Any], *, module: str) -> type[msgspec.Struct]:
    """The ``{"action": <value>}`` Struct agents answer in, carrying ``schema`` (the action
    space's) so that the recorded spec tells agents what is legal."""
    return msgspec.defstruct(
        name,
        [("action", Annotated[Any, msgspec.Meta(extra_json_schema=schema)])],
        module=module,
        frozen=True,
        forbid_unknown_fields=True,
    )


def move_of(action: Any) -> Any:
    """The JSON value an agent's ``{"action": ...}`` carries (typed or a plain dict)."""
    if isinstance(action, Mapping):
        return action.get("action")
    return getattr(action, "action", None)


def _schema(space: Any) -> dict[str, Any]:
    spaces = _spaces()
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1}
    if isinstance(space, spaces.Box):
        return _array_schema(space.shape, _is_integer(space.dtype), space.low, space.high)
    if isinstance(space, spaces.MultiDiscrete):
        low = space.start
        return _array_schema(space.shape, True, low, low + space.nvec - 1)
    if isinstance(space, spaces.MultiBinary):
        shape = (space.n,) if isinstance(space.n, int) else tuple(space.n)
        return _nested(shape, {"type": "integer", "enum": [0, 1]})
    if isinstance(space, spaces.Dict):
        return {
            "type": "object",
            "properties": {key: _schema(sub) for key, sub in space.spaces.items()},
            "required": list(space.spaces),
            "additionalProperties": False,
        }
    if isinstance(space, spaces.Tuple):
        count = len(space.spaces)
        return {
            "type": "array",
            "prefixItems": [_schema(sub) for sub in space.spaces],
            "items": False,
            "minItems": count,
            "maxItems": count,
        }
    if isinstance(space, spaces.Text):
        charset = "".join(sorted(space.character_set))
        return {
            "type": "string",
            "minLength": int(space.min_length),
            "maxLength": int(space.max_length),
            "pattern": f"^[{_class_escape(charset)}]*$",
        }
    raise _unsupported(space, "space")


def _array_schema(shape: tuple[int, ...], integer: bool, low: Any, high: Any) -> dict[str, Any]:
    """Nested arrays of ``shape``; the bounds on each number when they are the same for all,
    per element for a short vector, and in the description otherwise."""
    number: dict[str, Any] = {"type": "integer" if integer else "number"}
    flat_low, flat_high = low.reshape(-1).tolist(), high.reshape(-1).tolist()
    if len(set(flat_low)) <= 1 and len(set(flat_high)) <= 1:
        return _nested(shape, {**number, **_bounds(flat_low[:1], flat_high[:1])})
    if len(shape) == 1 and shape[0] <= 64:
        return {
            "type": "array",
            "prefixItems": [
                {**number, **_bounds([lo], [hi])}
                for lo, hi in zip(flat_low, flat_high, strict=True)
            ],
            "items": False,
            "minItems": shape[0],
            "maxItems": shape[0],
        }
    nested = _nested(shape, number)
    nested["description"] = f"element-wise bounds: low {low.tolist()}, high {high.tolist()}"
    return nested


def _bounds(low: list[Any], high: list[Any]) -> dict[str, Any]:
    found = {}
    if low and math.isfinite(low[0]):
        found["minimum"] = low[0]
    if high and math.isfinite(high[0]):
        found["maximum"] = high[0]
    return found


def _nested(shape: tuple[int, ...], item: dict[str, Any]) -> dict[str, Any]:
    schema = item
    for size in reversed(shape):
        schema = {"type": "array", "items": schema, "minItems": size, "maxItems": size}
    return schema


def _class_escape(characters: str) -> str:
    """``characters`` inside a regular-expression character class (ECMA and Python alike)."""
    return re.sub(r"([\\\]\[^\-])", r"\\\1", characters)


def _is_integer(dtype: Any) -> bool:
    return bool(_np().issubdtype(dtype, _np().integer))


# -- checking an action --------------------------------------------------------------------------


def problem(space: Any, value: Any, path: str = "action") -> str | None:
    """``None`` when the JSON ``value`` is a legal value of ``space``; otherwise why not, naming
    the space and what it would take (``"action 7 is outside Discrete(6): choose an integer
    0..5"``)."""
    spaces = _spaces()
    if isinstance(space, spaces.Discrete):
        return _discrete_problem(space, value, path)
    if isinstance(space, spaces.Box):
        return _array_problem(space, value, path, _is_integer(space.dtype), space.low, space.high)
    if isinstance(space, spaces.MultiDiscrete):
        high = space.start + space.nvec - 1
        return _array_problem(space, value, path, True, space.start, high)
    if isinstance(space, spaces.MultiBinary):
        np = _np()
        shape = (space.n,) if isinstance(space.n, int) else tuple(space.n)
        return _array_problem(space, value, path, True, np.zeros(shape), np.ones(shape))
    if isinstance(space, spaces.Dict):
        return _dict_problem(space, value, path)
    if isinstance(space, spaces.Tuple):
        return _tuple_problem(space, value, path)
    if isinstance(space, spaces.Text):
        return _text_problem(space, value, path)
    raise _unsupported(space, "action space")


def _discrete_problem(space: Any, value: Any, path: str) -> str | None:
    start = int(space.start)
    last = start + int(space.n) - 1
    choose = f"choose an integer {start}..{last}"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{path} {_shown(value)} is not an integer: {space!r} takes an integer; {choose}"
    if not start <= value <= last:
        return f"{path} {value} is outside {space!r}: {choose}"
    return None


def _array_problem(
    space: Any, value: Any, path: str, integer: bool, low: Any, high: Any
) -> str | None:
    np = _np()
    shape = tuple(space.shape)
    kind = "integers" if integer else "numbers"
    expected = f"{_count(shape)} {kind} as nested lists of shape {shape}"
    if shape == ():
        expected = f"one {kind[:-1]}"
    leaves = _leaves(value)
    if leaves is None or not all(_is_number(x, integer) for x in leaves):
        return f"{path} {_shown(value)} is not in {space!r}: expected {expected}"
    try:
        array = np.asarray(value, dtype=np.float64)
    except ValueError:  # ragged nesting: [[1, 2], 3]
        array = None
    if array is None or array.shape != shape:
        found = "a ragged nesting" if array is None else f"shape {array.shape}"
        return (
            f"{path} {_shown(value)} has {found}, not shape {shape} as {space!r} needs: "
            f"expected {expected}"
        )
    if not np.all(np.isfinite(array)):
        return f"{path} {_shown(value)} is not in {space!r}: numbers must be finite"
    outside = (array < low) | (array > high)
    if np.any(outside):
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        element = f"{path}{''.join(f'[{i}]' for i in where)}"
        return (
            f"{path} {_shown(value)} is outside {space!r}: {element} = {array[where].item()} "
            f"must be between {np.asarray(low)[where].item()} and {np.asarray(high)[where].item()}"
        )
    return None


def _dict_problem(space: Any, value: Any, path: str) -> str | None:
    keys = list(space.spaces)
    if not isinstance(value, dict):
        return f"{path} {_shown(value)} is not an object: {space!r} takes one with keys {keys}"
    missing = [key for key in keys if key not in value]
    unknown = [key for key in value if key not in space.spaces]
    if missing or unknown:
        said = "; ".join(
            part
            for part in (
                f"missing {missing}" if missing else "",
                f"unknown {unknown}" if unknown else "",
            )
            if part
        )
        return f"{path} has the wrong keys for {space!r}: {said} (expected exactly {keys})"
    for key, sub in space.spaces.items():
        found = problem(sub, value[key], f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def _tuple_problem(space: Any, value: Any, path: str) -> str | None:
    count = len(space.spaces)
    if not isinstance(value, list) or len(value) != count:
        return f"{path} {_shown(value)} is not in {space!r}: expected a list of {count} values"
    for index, (sub, item) in enumerate(zip(space.spaces, value, strict=True)):
        found = problem(sub, item, f"{path}[{index}]")
        if found is not None:
            return found
    return None


def _text_problem(space: Any, value: Any, path: str) -> str | None:
    low, high = int(space.min_length), int(space.max_length)
    if not isinstance(value, str):
        return f"{path} {_shown(value)} is not a string: {space!r} takes text"
    if not low <= len(value) <= high:
        return (
            f"{path} {_shown(value)} has {len(value)} characters; {space!r} takes {low} to {high}"
        )
    stray = sorted(set(value) - space.character_set)
    if stray:
        return (
            f"{path} {_shown(value)} uses characters outside {space!r}'s character set: "
            f"{''.join(stray)!r}"
        )
    return None


def _leaves(value: Any) -> list[Any] | None:
    """The numbers of a nested list (or of one number); ``None`` when it is not one."""
    if not isinstance(value, list):
        return [value]
    found: list[Any] = []
    for item in value:
        inner = _leaves(item) if isinstance(item, list) else [item]
        if inner is None:
            return None
        found.extend(inner)
    return found


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if integer else isinstance(value, int | float)


def _count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _shown(value: Any) -> str:
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
