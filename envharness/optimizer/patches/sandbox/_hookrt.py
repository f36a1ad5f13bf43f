"""The hook runtime: runs policy-checked hook code with a few builtins, under budgets.

Standard library only, on purpose: ``LocalSandbox`` imports this module, and ``SubprocessSandbox``
runs this very file as its worker (``python -S -P -B _hookrt.py``), so the worker starts in
milliseconds, loads nothing of the host package, and hook code is offered exactly what is
listed here — never a module object (a module leads back to ``sys``):

- builtins: a small allow-list (:data:`SAFE_BUILTINS`), ``range`` capped at
  :data:`MAX_RANGE` items, ``sum`` of numbers only, ``int`` reading at most
  :data:`MAX_INT_TEXT` characters;
- helpers: read-only namespaces ``math``, ``re`` and ``json`` holding plain functions and
  constants (``math.pi = 3`` raises, and the real modules are never reachable); ``re`` answers
  with :class:`HookMatch` and :class:`HookPattern` records;
- effects: ``allow()``, ``rewrite(action, reason="")``, ``block_and_prompt(message)``,
  ``hint(text)``;
- ``ctx`` read-only (dicts and lists that refuse changes, records with attribute access), built
  afresh for every call from JSON, so nothing a hook does reaches the caller's objects;
- ``nb`` a fresh JSON-only dict, returned only when the call succeeds.

Budgets: a trace function counts the hook's lines and checks a wall-clock deadline on every
line, in whatever thread the hook runs (``sys.settrace`` is per thread; no signals), and raises
``_Stop``, a ``BaseException`` the hook cannot catch (the policy allows only ``except`` clauses
naming the ``Exception`` subclasses offered here, and no ``finally``); a budget that tripped
fails the call even if the hook somehow returned.

Nothing in a process can interrupt one call into C, which holds the GIL (in ``LocalSandbox``:
the whole host) until it returns; so no single C call may be handed unbounded work. Code is
compiled with ``**``, ``*``, ``<<``, ``+`` and ``%`` routed through guards that refuse results
over :data:`MAX_INT_BITS` bits or :data:`MAX_SEQUENCE` items (counting inside nested
containers) and printf-style formatting before they are computed (``10**10**10``,
``"a" * 10**10``, ``[[0] * 10**6] * 10**6``, ``"%*d" % (10**10, 1)``); the policy refuses the
padding methods. A match runs in place only when :func:`regex_cost` proves it small; any other
goes to the call's :data:`RegexRunner` (in the subprocess worker: in place, under its host's
kill; in ``LocalSandbox``: a regex worker process killed at the deadline).

Values grown over many cheap lines are bounded where they grow (``extend``, ``*`` unpacking,
f-strings, ``join``, ``replace``; the policy refuses slice assignment) and measured before C
visits them: comparisons, ``in``, ``sorted``/``min``/``max``/``.sort``, ``str``/``repr``/
f-string placeholders and hashing (keys, set members, ``set``/``dict`` built in bulk) count what
C would visit, a value held twice counted twice (:func:`_visits`), up to :data:`MAX_VISITS`;
bulk hashing refuses many values sharing one hash. What the guards and copies build counts
against the call's allocation budget (:data:`MAX_BUILT`), which stands in for the memory limit
``LocalSandbox`` does not have. ``str``, ``set``, ``frozenset``, ``dict``, ``list`` and
``tuple`` are stand-ins (:class:`_StandIn`) so ``isinstance`` and ``dict.fromkeys`` still work.
"""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import functools
import itertools
import json
import math
import operator
import re
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar

__all__ = [
    "BUILT_COUNTED_FROM",
    "CATCHABLE",
    "EFFECTS",
    "HOOK_FILE",
    "MAX_BUILT",
    "MAX_INT_BITS",
    "MAX_JSON_INT_BITS",
    "MAX_JSON_VALUES",
    "MAX_RANGE",
    "MAX_SEQUENCE",
    "MAX_VISITS",
    "SAFE_BUILTINS",
    "FrozenDict",
    "FrozenList",
    "HookError",
    "Limits",
    "Program",
    "Record",
    "compile_program",
    "run_call",
    "serve",
]

HOOK_FILE = "<hook>"
"""The file name hook code is compiled under: the trace function follows only these frames."""
MAX_INT_BITS = 1 << 15
"""The biggest integer (in bits) ``**``, ``*`` and ``<<`` may produce in hook code."""
MAX_SEQUENCE = 1_000_000
"""The longest string, bytes, list or tuple ``*`` may produce in hook code."""
MAX_RANGE = 1_000_000
"""The most items a hook's ``range`` may have."""
MAX_JSON_DEPTH = 64
"""How deeply an effect or notebook value may nest."""
MAX_JSON_VALUES = 100_000
"""The most values one conversion to JSON visits (an effect, the notebook, ``json.dumps``'s
argument). A list can hold the same big list a million times for the price of a pointer each;
converting it would copy every element in this module's own, untraced code, which no line
budget stops (a 64 KiB notebook or effect holds far fewer values anyway)."""
MAX_JSON_INT_BITS = 4096
"""The biggest integer (in bits, about 1,200 digits) a JSON value from hook code may hold: Python
refuses to write integers over 4,300 digits as text, and that refusal must be the patch's
failure, not the sandbox's."""
EFFECTS = ("allow", "rewrite", "block_and_prompt", "hint")
CATCHABLE = (
    "ArithmeticError",
    "AttributeError",
    "IndexError",
    "KeyError",
    "LookupError",
    "OverflowError",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
)
"""The exceptions hook code may name in ``except``. Not ``Exception``: a trace function that
fails (``RecursionError``, ``MemoryError``) is switched off by Python, so a hook that could catch
those could go on running without its budget."""
_CACHED_PROGRAMS = 64
_MESSAGE_CHARS = 500


class Limits:
    """What one hook call may spend; the result and notebook sizes are bytes of JSON."""

    __slots__ = ("max_lines", "notebook_bytes", "result_bytes", "timeout_s")

    def __init__(
        self,
        *,
        timeout_s: float = 1.0,
        max_lines: int = 100_000,
        notebook_bytes: int = 64 * 1024,
        result_bytes: int = 64 * 1024,
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.max_lines = int(max_lines)
        self.notebook_bytes = int(notebook_bytes)
        self.result_bytes = int(result_bytes)

    def to_json(self) -> dict[str, float | int]:
        return {
            "timeout_s": self.timeout_s,
            "max_lines": self.max_lines,
            "notebook_bytes": self.notebook_bytes,
            "result_bytes": self.result_bytes,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Limits:
        return cls(
            timeout_s=value["timeout_s"],
            max_lines=value["max_lines"],
            notebook_bytes=value["notebook_bytes"],
            result_bytes=value["result_bytes"],
        )


class HookError(Exception):
    """A hook call failed; ``kind`` says how (the optimizer's ``FailureKind`` values)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Stop(BaseException):
    """Raised into hook code when its budget is spent; not an ``Exception``, so the ``except``
    clauses the policy allows cannot catch it."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


# -- guards: arithmetic that could allocate without bound --------------------------------------


MAX_BUILT = 16 * MAX_SEQUENCE
"""The most items (list and tuple items, characters, set and dict entries) one call may build
in values of :data:`BUILT_COUNTED_FROM` items or more: ``LocalSandbox`` has no memory limit of
its own, and a comprehension can keep a million-item value per line until the deadline."""
BUILT_COUNTED_FROM = 4096
"""Smaller values are not counted: building them costs a line each, which the line budget and
the deadline bound."""
_CURRENT = threading.local()
_Value = TypeVar("_Value")
"""The running call's :class:`_Budget`, for the guards (the budgets are per thread)."""


def _charge(size: int) -> None:
    if size >= BUILT_COUNTED_FROM:
        budget = getattr(_CURRENT, "budget", None)
        if budget is not None:
            budget.build(size)


def _built(value: _Value) -> _Value:
    """A value a guard just built: its size counts against the call's :data:`MAX_BUILT`."""
    if isinstance(value, _SIZED):
        _charge(len(value))
    return value


def _too_big(what: str) -> NoReturn:
    raise OverflowError(f"{what} would be too large for a hook")


def _guard_pow(base: Any, exponent: Any) -> Any:
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 1
        and base not in (-1, 0, 1)
        and base.bit_length() * exponent > MAX_INT_BITS
    ):
        _too_big("the power")
    return base**exponent


def _guard_mul(left: Any, right: Any) -> Any:
    if isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            _too_big("the product")
    elif isinstance(right, int) and isinstance(left, str | bytes | list | tuple):
        if right > 0 and _expanded(left, MAX_SEQUENCE // right) * right > MAX_SEQUENCE:
            _too_big(f"the repeated {type(left).__name__}")
    elif (
        isinstance(left, int)
        and isinstance(right, str | bytes | list | tuple)
        and left > 0
        and _expanded(right, MAX_SEQUENCE // left) * left > MAX_SEQUENCE
    ):
        _too_big(f"the repeated {type(right).__name__}")
    result = left * right
    return _built(result) if isinstance(result, _SEQUENCES) else result


def _expanded(value: Any, limit: int) -> int:
    """How many items ``value`` holds, counting inside nested containers and every character of
    a string, as C code that visits it (a comparison, ``sorted``, ``repr``) would; stops past
    ``limit``. ``[[0] * 10**6] * 10**6`` is a million pointers to build but 10**12 items to
    compare, which is the work a repeat must not hand to C."""
    if isinstance(value, str | bytes):
        return len(value)
    total = 0
    stack: list[Any] = list(itertools.islice(value, limit + 1))
    while stack and total <= limit:  # every item visited adds at least 1: at most limit + 1
        item = stack.pop()
        total += len(item) or 1 if isinstance(item, str | bytes) else 1
        if isinstance(item, list | tuple | dict | set | frozenset):
            items = item.values() if isinstance(item, dict) else item
            stack.extend(itertools.islice(items, max(limit - total + 1, 0)))
    return total


def _guard_lshift(value: Any, shift: Any) -> Any:
    if (
        isinstance(value, int)
        and isinstance(shift, int)
        and shift > 0
        and value.bit_length() + shift > MAX_INT_BITS
    ):
        _too_big("the shifted integer")
    return value << shift


_SEQUENCES = (str, bytes, list, tuple)
_SIZED = (str, bytes, list, tuple, dict, set, frozenset)


def _guard_add(left: Any, right: Any) -> Any:
    """``+``, refusing a string, bytes, list or tuple over :data:`MAX_SEQUENCE` items: joining a
    value to itself line after line doubles it each time, and what a hook then hands to C code
    (``sorted``, a comparison) would run unbounded on it."""
    if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        if len(left) + len(right) > MAX_SEQUENCE:
            _too_big(f"the joined {type(left).__name__}")
        return _built(operator.add(left, right))
    return left + right


def _guard_iadd(target: Any, value: Any) -> Any:
    """``+=``, with :func:`_guard_add`'s limit, still in place (``lst += [x]`` changes ``lst``
    for every name that holds it, as in Python)."""
    if (
        isinstance(target, _SEQUENCES)
        and isinstance(value, _SEQUENCES)
        and len(target) + len(value) > MAX_SEQUENCE
    ):
        _too_big(f"the joined {type(target).__name__}")
    if isinstance(target, list) and isinstance(value, _SEQUENCES):
        _charge(len(value))  # in place: only what is added is new
    elif isinstance(target, _SEQUENCES) and isinstance(value, _SEQUENCES):
        _charge(len(target) + len(value))
    target += value
    return target


def _guard_mod(left: Any, right: Any) -> Any:
    """``%``, except printf-style formatting: ``"%*d" % (10**10, 1)`` pads in C to a width the
    hook picks, where no budget can stop it (f-string widths are capped by the policy)."""
    if isinstance(left, str | bytes):
        raise TypeError(
            "printf-style formatting (text % values) is not offered to hooks: use an f-string "
            "such as f'{value:>5}'"
        )
    return left % right


def _sum(iterable: Iterable[Any], /, start: Any = 0) -> Any:
    """``sum`` of numbers only: summing lists or tuples copies the running total at every step
    (quadratic, in C), and ``sum([[0] * 1000] * 100000, [])`` would hold the interpreter for
    minutes."""
    if isinstance(start, bool) or not isinstance(start, int | float):
        raise TypeError(
            "sum adds numbers in hooks; join lists with a comprehension "
            "([x for part in parts for x in part])"
        )
    return sum(iterable, start)


def _range(*args: Any) -> range:
    """``range``, refusing more than :data:`MAX_RANGE` items (``max(range(10**9))`` would spend
    its time in C, where no line budget can stop it)."""
    numbers = range(*args)
    try:
        size = len(numbers)
    except OverflowError:
        size = MAX_RANGE + 1
    if size > MAX_RANGE:
        raise OverflowError(f"range of {size} items is over the hook limit of {MAX_RANGE}")
    return numbers


# -- guards: C work that visits a whole value -------------------------------------------------
#
# A comparison, a sort, ``repr``, hashing a tuple: C code visits every nested item, once per
# reference. A value built over many cheap lines can hold far more than any one line made
# (``x = [x, x]`` forty times is 2**40 items to compare or print), so these operations measure
# what they would visit first, counting every reference as C code would, and stop measuring past
# the limit.

MAX_VISITS = 1_000_000
"""The most items (nested items, keys and characters included) one comparison, sort, ``repr``,
``str`` or hash in hook code may visit."""
_DICT_VIEWS: tuple[type, ...] = (type({}.keys()), type({}.values()), type({}.items()))
_CONTAINERS = (list, tuple, dict, set, frozenset, *_DICT_VIEWS)
_HASHED_CONTAINERS = (tuple, frozenset)
_TEXT_OR_CONTAINER = (str, bytes, *_CONTAINERS)
_SHORT_TEXT = 64
_SMALL = 32
_HASH_CHECKED_FROM = 1024
"""Bulk hashing of fewer values cannot be slow even when every hash collides."""
_HASH_CROWD = 8


def _visits(value: Any, limit: int) -> int:
    """How many items C code visiting ``value`` reaches: nested items, dict keys and values and
    every character of a string, a value held twice counted twice (``x = [x, x]`` forty times
    is 2**40 items), as C visits them. Measured bottom-up, once per distinct container, so the
    measure costs what the hook built, not what it would take C; more than ``limit`` (or a value
    that holds itself) answers ``limit + 1``."""
    sizes: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack[-1]
        key = id(item)
        if key in sizes:
            stack.pop()
            continue
        parts = _parts(item)
        if key not in entered:
            entered.add(key)
            for part in parts:
                if len(part) > limit:
                    return limit + 1
                if _holds_containers(part):
                    for child in part:
                        if isinstance(child, _CONTAINERS) and id(child) not in sizes:
                            if id(child) in entered:
                                return limit + 1  # it holds itself
                            stack.append(child)
            continue
        stack.pop()
        total = sum(_part_size(part, sizes) for part in parts)
        if total > limit:
            return limit + 1
        sizes[key] = total
    return sizes[id(value)]


def _parts(item: Any) -> tuple[Any, ...]:
    if isinstance(item, dict):
        return (item.keys(), item.values())
    return (item,) if isinstance(item, _CONTAINERS) else ()


def _holds_containers(part: Any) -> bool:
    if len(part) <= _SMALL:
        return any(isinstance(child, _CONTAINERS) for child in part)
    return any(issubclass(kind, _CONTAINERS) for kind in set(map(type, part)))


def _part_size(part: Any, sizes: Mapping[int, int]) -> int:
    if len(part) > _SMALL:  # by type first: a long list of numbers or texts is measured in C
        kinds = set(map(type, part))
        if not any(issubclass(kind, _TEXT_OR_CONTAINER) for kind in kinds):
            return len(part)
        if kinds == {str}:
            return max(sum(map(len, part)), len(part))
    total = 0
    for child in part:
        if isinstance(child, str | bytes):
            total += len(child) or 1
        elif isinstance(child, _CONTAINERS):
            total += 1 + sizes[id(child)]
        else:
            total += 1
    return total


def _check_visits(value: Any, what: str) -> None:
    if isinstance(value, _CONTAINERS) and _visits(value, MAX_VISITS) > MAX_VISITS:
        raise OverflowError(
            f"{what} holds more than {MAX_VISITS} items (counting nested items, keys and "
            "characters, a value held twice counted twice): too much work for one operation in "
            "a hook"
        )


def _key(value: Any) -> Any:
    """A value about to be hashed (a key, a set member): a tuple hashes every nested item."""
    if isinstance(value, _HASHED_CONTAINERS):
        _check_visits(value, f"the {type(value).__name__} used as a key")
    return value


def _pass(value: Any) -> Any:
    """A call between two C operations of one line, so the deadline is checked between them."""
    return value


def _operand(value: Any) -> Any:
    _check_visits(value, f"the compared {type(value).__name__}")
    return value


def _comparison(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``==``, ``<``…: between two containers C visits at most the smaller, so the pair is
    refused only when both are over the limit."""

    def compare(left: Any, right: Any) -> Any:
        if (
            isinstance(left, _CONTAINERS)
            and isinstance(right, _CONTAINERS)
            and _visits(left, MAX_VISITS) > MAX_VISITS
        ):
            _check_visits(right, f"each compared {type(left).__name__}")
        return op(left, right)

    return compare


def _search(negated: bool) -> Callable[[Any, Any], Any]:
    """``in``: hashing the item, or comparing it with every member of a list or tuple. A short
    text or a number is compared in a few steps per member; a container or a long text makes
    the list measured too."""

    def search(item: Any, container: Any) -> Any:
        if isinstance(item, _CONTAINERS) or (
            isinstance(item, str | bytes) and len(item) > _SHORT_TEXT
        ):
            _check_visits(item, "the value looked for")
            if isinstance(container, list | tuple | _DICT_VIEWS[1]):
                _check_visits(container, f"the {type(container).__name__} searched")
        return (item not in container) if negated else (item in container)

    return search


def _set_operation(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``-``, ``|``, ``&``, ``^`` (sets) and ``//`` (quadratic on big integers) between two
    values: a call around each, so a line chaining many of them checks the deadline between
    them and lets other threads run."""

    def operation(left: Any, right: Any) -> Any:
        return op(left, right)

    return operation


def _placeholder(value: Any) -> Any:
    """A value put into an f-string: its ``str`` visits every nested item."""
    if isinstance(value, str) and len(value) > MAX_SEQUENCE:
        _too_big("the text")
    _check_visits(value, f"the {type(value).__name__} written as text")
    return value


def _concat(parts: list[str]) -> str:
    """An f-string with several placeholders, joined after its size is checked."""
    if sum(map(len, parts)) > MAX_SEQUENCE:
        _too_big("the f-string")
    return _built("".join(parts))


def _display(kind: str, values: list[Any], stars: tuple[bool, ...]) -> Any:
    """A list, tuple or set display, or a call's arguments, with ``*`` unpacking: measured before
    it is built (``[*x, *x]`` line after line doubles a list)."""
    parts: list[Any] = []
    total = 0
    for value, star in zip(values, stars, strict=True):
        items = (value if isinstance(value, list | tuple) else list(value)) if star else (value,)
        total += len(items)
        if total > MAX_SEQUENCE:
            _too_big(f"the unpacked {kind}")
        parts.append(items)
    joined = list(itertools.chain.from_iterable(parts))
    if kind == "set":
        return _make_set(joined)
    return _built(joined if kind == "list" else tuple(joined))


def _bulk(values: Any, what: str) -> list[Any] | tuple[Any, ...]:
    """Values about to be hashed in one C call (``set(x)``, ``dict.fromkeys(x)``)."""
    items = values if isinstance(values, list | tuple) else list(values)
    _check_visits(items, what)
    _check_hashes(items, what)
    return items


def _check_hashes(values: list[Any] | tuple[Any, ...], what: str) -> None:
    """Distinct values sharing one hash make every insertion probe all of them: building a set
    of ``range(0, n * P, P)`` (``P = 2**61 - 1``, where integer hashes wrap) is n**2 steps in
    one C call. Values with equal hashes are refused past a few distinct ones."""
    if len(values) < _HASH_CHECKED_FROM:
        return
    try:
        hashes = list(map(hash, values))
    except TypeError:
        return  # unhashable: the real call raises
    if len(set(hashes)) == len(hashes):
        return
    counts = collections.Counter(hashes)
    crowded = {found for found, count in counts.items() if count > _HASH_CROWD}
    groups: dict[int, list[Any]] = {}
    for found, value in zip(hashes, values, strict=True):
        if found in crowded:
            distinct = groups.setdefault(found, [])
            if not any(value == seen for seen in distinct):
                distinct.append(value)
                if len(distinct) > _HASH_CROWD:
                    raise OverflowError(
                        f"{what} holds many different values with the same hash; hashing them "
                        "together is quadratic work in one call"
                    )


def _make_set(*args: Any) -> set[Any]:
    return _built(set(_bulk(args[0], "set's argument"))) if args else set()


def _make_frozenset(*args: Any) -> frozenset[Any]:
    return _built(frozenset(_bulk(args[0], "frozenset's argument"))) if args else frozenset()


def _make_list(*args: Any) -> list[Any]:
    return _built(list(*args))


def _make_tuple(*args: Any) -> tuple[Any, ...]:
    return _built(tuple(*args))


def _make_dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    if not args:
        return dict(**kwargs)
    source = args[0]
    if isinstance(source, dict):
        _check_hashes(list(source), "dict's argument")
        return _built(dict(source, **kwargs))
    pairs = _bulk_pairs(source, "dict's argument")
    return _built(dict(pairs, *args[1:], **kwargs))


def _bulk_pairs(source: Any, what: str) -> list[Any]:
    pairs = list(source)
    _check_visits(pairs, what)
    _check_hashes(
        [pair[0] for pair in pairs if isinstance(pair, list | tuple) and len(pair) == 2], what
    )
    return pairs


def _make_text(*args: Any, **kwargs: Any) -> str:
    if args:
        _check_visits(args[0], f"the {type(args[0]).__name__} str writes")
    return _built(str(*args, **kwargs))


def _repr(value: Any, /) -> str:
    _check_visits(value, f"the {type(value).__name__} repr writes")
    return _built(repr(value))


def _sorted(iterable: Iterable[Any], /, *, key: Any = None, reverse: bool = False) -> list[Any]:
    """``sorted``: a sort compares every item with others, in C; the items (or their keys) are
    measured first, and the key is called once per item, as by ``sorted``."""
    values = list(iterable)
    if key is None:
        _check_visits(values, "the list sorted")
        values.sort(reverse=reverse)
        return _built(values)
    keys = list(map(key, values))
    _check_visits(keys, "the sort keys")
    order = sorted(range(len(values)), key=keys.__getitem__, reverse=reverse)
    return _built([values[index] for index in order])


_MISSING: Any = object()


def _extreme(pick: Callable[..., Any], name: str) -> Callable[..., Any]:
    def extreme(*args: Any, key: Any = None, default: Any = _MISSING) -> Any:
        if not args:
            raise TypeError(f"{name} expected at least 1 argument, got 0")
        if len(args) > 1 and default is not _MISSING:
            raise TypeError(
                f"Cannot specify a default for {name}() with multiple positional arguments"
            )
        values = list(args[0]) if len(args) == 1 else list(args)
        if not values:
            if default is _MISSING:
                raise ValueError(f"{name}() arg is an empty sequence")
            return default
        if key is None:
            _check_visits(values, f"the values {name} compares")
            return pick(values)
        keys = list(map(key, values))
        _check_visits(keys, f"the keys {name} compares")
        return values[pick(range(len(values)), key=keys.__getitem__)]

    extreme.__name__ = name
    return extreme


def _round(number: Any, ndigits: Any = None) -> Any:
    """``round``, refusing ``round(5, -10**7)`` on an integer: it computes ``10**10**7`` in C."""
    if isinstance(number, int) and isinstance(ndigits, int) and -ndigits * 3.33 > MAX_INT_BITS:
        _too_big("the power of ten round needs")
    return round(number) if ndigits is None else round(number, ndigits)


# Methods of lists, dicts, sets and texts that grow a value, hash their arguments, or compare.
_GROWING_METHODS = frozenset({"extend", "join", "replace", "translate", "sort"})
_KEYED_METHODS = frozenset(
    {
        "get", "pop", "setdefault", "add", "discard", "remove", "index", "count", "fromkeys",
        "update", "union", "intersection", "difference", "symmetric_difference",
        "intersection_update", "difference_update", "symmetric_difference_update", "issubset",
        "issuperset", "isdisjoint",
    }
)  # fmt: skip
_BULK_METHODS = frozenset(
    {
        "fromkeys", "update", "union", "intersection", "difference", "symmetric_difference",
        "intersection_update", "difference_update", "symmetric_difference_update", "issubset",
        "issuperset", "isdisjoint",
    }
)  # fmt: skip
_COPYING_METHODS = frozenset(
    {
        "copy", "upper", "lower", "casefold", "title", "capitalize", "swapcase", "strip",
        "lstrip", "rstrip", "encode", "removeprefix", "removesuffix", "split", "rsplit",
        "splitlines", "partition", "rpartition",
    }
)  # fmt: skip
"""Methods that build a new value as large as their receiver: a comprehension that keeps one
per line is a memory bomb, so what they build counts against :data:`MAX_BUILT`."""
_RECEIVERS = (list, tuple, dict, set, frozenset, str, bytes)


def _method(owner: Any, name: str) -> Any:
    """``owner.name`` for the methods above: the same method, measured before C runs it."""
    found = getattr(owner, name)
    if isinstance(owner, type):
        if name == "fromkeys" and owner in (HookDict, dict):
            return lambda *args: _call_method(name, {}, found, args, {})
        if owner in _STAND_INS or owner in _RECEIVERS:
            return lambda receiver, *args, **kwargs: (
                _call_method(name, receiver, functools.partial(found, receiver), args, kwargs)
                if isinstance(receiver, _RECEIVERS)
                else found(receiver, *args, **kwargs)
            )
        return found
    if not isinstance(owner, _RECEIVERS):
        return found
    return lambda *args, **kwargs: _call_method(name, owner, found, args, kwargs)


def _call_method(
    name: str, receiver: Any, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> Any:
    what = f"{type(receiver).__name__}.{name}'s argument"
    if name == "extend" and args:
        items = args[0] if isinstance(args[0], list | tuple) else list(args[0])
        if len(receiver) + len(items) > MAX_SEQUENCE:
            _too_big("the extended list")
        _charge(len(items))
        return method(items, *args[1:], **kwargs)
    if name == "join" and args and isinstance(receiver, str | bytes):
        parts = list(args[0])
        size = len(receiver) * max(len(parts) - 1, 0)
        size += sum(len(part) for part in parts if isinstance(part, str | bytes))
        if size > MAX_SEQUENCE:
            _too_big(f"the joined {type(receiver).__name__}")
        return _built(method(parts))
    if name == "replace" and isinstance(receiver, str | bytes):
        _check_replace(receiver, args, kwargs)
        return _built(method(*args, **kwargs))
    if name == "translate" and isinstance(receiver, str) and args:
        table = args[0]
        values = table.values() if isinstance(table, dict) else table
        longest = max((len(v) for v in values if isinstance(v, str | bytes)), default=1)
        if len(receiver) * longest > MAX_SEQUENCE:
            _too_big("the translated text")
        return _built(method(*args, **kwargs))
    if name == "sort" and type(receiver) is list:
        receiver[:] = _sorted(receiver, **kwargs)
        return None
    if name == "sort":
        _check_visits(receiver, "the list sorted")
    if name in _BULK_METHODS and isinstance(receiver, dict | set | frozenset):
        if name == "update" and isinstance(receiver, dict):
            args = tuple(arg if isinstance(arg, dict) else _bulk_pairs(arg, what) for arg in args)
        elif name == "fromkeys":
            args = (_bulk(args[0], what), *args[1:]) if args else args
        else:
            args = tuple(_bulk(arg, what) for arg in args)
        return _built(method(*args, **kwargs))
    if name in _KEYED_METHODS:
        for arg in args[:1]:
            _check_visits(arg, what)
            if isinstance(receiver, list | tuple) and (
                isinstance(arg, _CONTAINERS)
                or (isinstance(arg, str | bytes) and len(arg) > _SHORT_TEXT)
            ):
                _check_visits(receiver, f"the {type(receiver).__name__} searched")
    if name in _COPYING_METHODS:
        return _built(method(*args, **kwargs))
    return method(*args, **kwargs)


def _check_replace(text: str | bytes, args: tuple[Any, ...], kwargs: Any) -> None:
    if (
        len(args) < 2
        or not isinstance(args[0], str | bytes)
        or not isinstance(args[1], str | bytes)
    ):
        return  # the real method raises
    old, new = args[0], args[1]
    if len(new) <= len(old):
        return
    count = args[2] if len(args) > 2 else kwargs.get("count", -1)
    found = len(text) + 1 if not old else text.count(old)  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    if len(text) + found * (len(new) - len(old)) > MAX_SEQUENCE:
        _too_big(f"the replaced {type(text).__name__}")


class _StandIn(type):
    """Makes a class stand for a builtin type in hook code: ``isinstance(x, dict)`` and
    ``dict.fromkeys`` work as on the type; calling it runs the class's ``make`` guard."""

    real: type
    make: Callable[..., Any]

    def __instancecheck__(cls, value: Any) -> bool:
        return isinstance(value, cls.real)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls.real)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.make(*args, **kwargs)

    def __getattr__(cls, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(cls.real, attribute)

    def __repr__(cls) -> str:
        return f"<class '{cls.real.__name__}'>"


class HookStr(metaclass=_StandIn):
    """``str`` in hook code: measures a container before writing it."""

    real = str
    make = staticmethod(_make_text)


class HookSet(metaclass=_StandIn):
    """``set`` in hook code: measures and checks the hashes of what it is built from."""

    real = set
    make = staticmethod(_make_set)


class HookFrozenset(metaclass=_StandIn):
    """``frozenset`` in hook code (see :class:`HookSet`)."""

    real = frozenset
    make = staticmethod(_make_frozenset)


class HookDict(metaclass=_StandIn):
    """``dict`` in hook code (see :class:`HookSet`)."""

    real = dict
    make = staticmethod(_make_dict)


class HookList(metaclass=_StandIn):
    """``list`` in hook code: what it builds counts against :data:`MAX_BUILT`."""

    real = list
    make = staticmethod(_make_list)


class HookTuple(metaclass=_StandIn):
    """``tuple`` in hook code (see :class:`HookList`)."""

    real = tuple
    make = staticmethod(_make_tuple)


_STAND_INS = (HookStr, HookSet, HookFrozenset, HookDict, HookList, HookTuple)


_GUARDS: dict[type[ast.operator], str] = {
    ast.Pow: "__hook_pow__",
    ast.Mult: "__hook_mul__",
    ast.LShift: "__hook_lshift__",
    ast.Add: "__hook_add__",
    ast.Mod: "__hook_mod__",
}
_AUGMENTED_GUARDS: dict[type[ast.operator], str] = {**_GUARDS, ast.Add: "__hook_iadd__"}


_SET_OPERATORS: dict[type[ast.operator], str] = {
    ast.FloorDiv: "__hook_floordiv__",
    ast.Sub: "__hook_sub__",
    ast.BitOr: "__hook_or__",
    ast.BitAnd: "__hook_and__",
    ast.BitXor: "__hook_xor__",
}
_COMPARE_GUARDS: dict[type[ast.cmpop], str] = {
    ast.Eq: "__hook_eq__",
    ast.NotEq: "__hook_ne__",
    ast.Lt: "__hook_lt__",
    ast.LtE: "__hook_le__",
    ast.Gt: "__hook_gt__",
    ast.GtE: "__hook_ge__",
    ast.In: "__hook_in__",
    ast.NotIn: "__hook_not_in__",
}
_GUARDED_METHODS = _GROWING_METHODS | _KEYED_METHODS | _COPYING_METHODS
_KEY_FIRST_METHODS = frozenset({"get", "pop", "setdefault", "add", "discard"})
"""Called directly, these hash only a key: their arguments are measured as keys, and the call
stays as written."""


def _call(guard: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=guard, ctx=ast.Load()), args=list(args), keywords=[])


def _unpacking(kind: str, elements: list[ast.expr]) -> ast.Call:
    """``[*a, b]`` as ``__hook_display__("list", [a, b], (True, False))``."""
    values = [e.value if isinstance(e, ast.Starred) else e for e in elements]
    stars = tuple(isinstance(e, ast.Starred) for e in elements)
    return _call(
        "__hook_display__",
        ast.Constant(kind),
        ast.List(elts=values, ctx=ast.Load()),
        ast.Constant(stars),  # type: ignore[arg-type]
    )


_REAL_TYPES: Mapping[str, str] = MappingProxyType(
    {name: f"__hook_real_{name}__" for name in ("str", "set", "frozenset", "dict", "list", "tuple")}
)
"""``isinstance(x, dict)`` checks against the real type (in C, not through the stand-in's
``__instancecheck__``) when the hook never binds ``isinstance`` or the type's name itself."""


class _Guard(ast.NodeTransformer):
    """Routes the operations above through their guards: ``**``, ``*``, ``<<``, ``+``, ``%`` and
    the set operators (and their augmented forms), comparisons, keys, f-string placeholders,
    ``*`` unpacking and the methods that grow, hash or compare."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        guard = _GUARDS.get(type(node.op))
        if guard is None and not _is_number(node.left) and not _is_number(node.right):
            guard = _SET_OPERATORS.get(type(node.op))
        if guard is None:
            return node
        return ast.copy_location(_call(guard, node.left, node.right), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        guard = _AUGMENTED_GUARDS.get(type(node.op))
        if guard is None:
            return node
        target = node.target
        current: ast.expr
        if isinstance(target, ast.Name):
            current = ast.Name(id=target.id, ctx=ast.Load())
        elif isinstance(target, ast.Subscript):
            current = ast.Subscript(
                value=copy.deepcopy(target.value), slice=copy.deepcopy(target.slice), ctx=ast.Load()
            )
        else:  # attribute targets never pass the policy
            return node
        return ast.copy_location(
            ast.Assign(targets=[target], value=_call(guard, current, node.value)), node
        )

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        operands = [node.left, *node.comparators]
        if all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            return node
        if len(node.ops) == 1:
            searched = isinstance(node.ops[0], ast.In | ast.NotIn)
            if _short_constant(node.comparators[0]) or (
                not searched and _short_constant(node.left)
            ):
                return node  # against a short constant: a few steps (``0 in x`` scans x)
            guard = _COMPARE_GUARDS.get(type(node.ops[0]))
            if guard is None:
                return node
            call = _call(guard, node.left, node.comparators[0])
            return ast.copy_location(call, node)
        wrapped: list[ast.expr] = [
            o if isinstance(o, ast.Constant) else _call("__hook_operand__", o) for o in operands
        ]
        node.left, node.comparators = wrapped[0], wrapped[1:]
        return node

    def visit_FormattedValue(self, node: ast.FormattedValue) -> ast.AST:
        self.generic_visit(node)
        node.value = _call("__hook_placeholder__", node.value)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        self.generic_visit(node)
        if sum(isinstance(part, ast.FormattedValue) for part in node.values) < 2:
            return node
        parts: list[ast.expr] = [
            ast.JoinedStr(values=[part]) if isinstance(part, ast.FormattedValue) else part
            for part in node.values
        ]
        return ast.copy_location(
            _call("__hook_concat__", ast.List(elts=parts, ctx=ast.Load())), node
        )

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.slice, ast.Slice):
            if isinstance(node.ctx, ast.Load):  # a copy: it counts as built
                return ast.copy_location(_call("__hook_built__", node), node)
        elif not isinstance(node.slice, ast.Constant):
            node.slice = _call("__hook_key__", node.slice)
        return node

    def visit_Set(self, node: ast.Set) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return ast.copy_location(_unpacking("set", node.elts), node)
        node.elts = [_keyed(e) for e in node.elts]
        return node

    def visit_Dict(self, node: ast.Dict) -> ast.AST:
        self.generic_visit(node)
        node.keys = [None if k is None else _keyed(k) for k in node.keys]
        node.values = [
            _call("__hook_pass__", v) if k is None else v
            for k, v in zip(node.keys, node.values, strict=True)
        ]
        return node

    def visit_List(self, node: ast.List) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and any(isinstance(e, ast.Starred) for e in node.elts):
            return ast.copy_location(_unpacking("list", node.elts), node)
        return node

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and any(isinstance(e, ast.Starred) for e in node.elts):
            return ast.copy_location(_unpacking("tuple", node.elts), node)
        return node

    def visit_SetComp(self, node: ast.SetComp) -> ast.AST:
        self.generic_visit(node)
        node.elt = _keyed(node.elt)
        return node

    def visit_DictComp(self, node: ast.DictComp) -> ast.AST:
        self.generic_visit(node)
        node.key = _keyed(node.key)
        return node

    def __init__(self, bound: frozenset[str] = frozenset()) -> None:
        self._bound = bound

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id == "isinstance"
            and len(node.args) == 2
            and not node.keywords
            and "isinstance" not in self._bound
        ):
            node.args[1] = self._real_types(node.args[1])
        keyed = isinstance(func, ast.Attribute) and func.attr in _KEY_FIRST_METHODS
        if keyed and isinstance(func, ast.Attribute):
            func.value = self.visit(func.value)  # only the key is hashed: it alone is measured
        else:
            node.func = self.visit(func)
        node.args = [self.visit(arg) for arg in node.args]
        if keyed:  # every argument: dict.get(d, key) passes the key second
            node.args = [a if isinstance(a, ast.Starred) else _keyed(a) for a in node.args]
        node.keywords = [self.visit(keyword) for keyword in node.keywords]
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            node.args = [ast.Starred(value=_unpacking("tuple", node.args), ctx=ast.Load())]
        return node

    def _real_types(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Name) and node.id in _REAL_TYPES and node.id not in self._bound:
            return ast.copy_location(ast.Name(id=_REAL_TYPES[node.id], ctx=ast.Load()), node)
        if isinstance(node, ast.Tuple):
            node.elts = [self._real_types(element) for element in node.elts]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and node.attr in _GUARDED_METHODS:
            return ast.copy_location(
                _call("__hook_method__", node.value, ast.Constant(node.attr)), node
            )
        return node


def _bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the code binds (assigns, defines, takes as a parameter, catches)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return frozenset(names)


def _short_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and not (
        isinstance(node.value, str | bytes) and len(node.value) > _SHORT_TEXT
    )


def _is_number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float)


def _keyed(node: ast.expr) -> ast.expr:
    return node if isinstance(node, ast.Constant) else _call("__hook_key__", node)


# -- what hook code sees -----------------------------------------------------------------------


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError("ctx is read-only: change a copy (dict(...), list(...)) or keep state in nb")


class FrozenDict(dict[Any, Any]):
    """A JSON object from ``ctx``: a dict (``isinstance(x, dict)`` holds) that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = __ior__ = _refuse


class FrozenList(list[Any]):
    """A JSON array from ``ctx``: a list that refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


class Record:
    """``ctx`` and each step of ``ctx.history``: read-only fields by attribute (``ctx.state``)."""

    __slots__ = ("_fields", "_name")

    def __init__(self, name: str, fields: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fields", MappingProxyType(dict(fields)))

    def __getattr__(self, attribute: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        try:
            return fields[attribute]
        except KeyError:
            name = object.__getattribute__(self, "_name")
            raise AttributeError(
                f"{name} has no field {attribute!r}; its fields are {', '.join(sorted(fields))}"
            ) from None

    def __setattr__(self, attribute: str, value: Any) -> NoReturn:
        raise TypeError(f"{object.__getattribute__(self, '_name')} is read-only")

    def __delattr__(self, attribute: str) -> NoReturn:
        raise TypeError(f"{object.__getattribute__(self, '_name')} is read-only")

    def __repr__(self) -> str:
        fields = object.__getattribute__(self, "_fields")
        inner = ", ".join(f"{key}={value!r}" for key, value in fields.items())
        return f"{object.__getattribute__(self, '_name')}({inner})"


class _Helpers:
    """A read-only namespace of helper functions and constants (``math.sqrt``, ``re.search``)."""

    __slots__ = ("_members", "_name")

    def __init__(self, name: str, members: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_members", MappingProxyType(dict(members)))

    def __getattr__(self, attribute: str) -> Any:
        members = object.__getattribute__(self, "_members")
        try:
            return members[attribute]
        except KeyError:
            name = object.__getattribute__(self, "_name")
            raise AttributeError(
                f"{name} has no {attribute!r} for hooks; it offers {', '.join(sorted(members))}"
            ) from None

    def __setattr__(self, attribute: str, value: Any) -> NoReturn:
        raise TypeError(f"the {object.__getattribute__(self, '_name')} helpers are read-only")

    def __delattr__(self, attribute: str) -> NoReturn:
        raise TypeError(f"the {object.__getattribute__(self, '_name')} helpers are read-only")

    def __repr__(self) -> str:
        return f"<hook helpers {object.__getattribute__(self, '_name')}>"


def freeze(value: Any) -> Any:
    """A read-only copy of a JSON value."""
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return FrozenList(freeze(item) for item in value)
    return value


def _context(ctx: Mapping[str, Any]) -> Record:
    fields = {key: freeze(value) for key, value in ctx.items() if key != "history"}
    history = ctx.get("history") or ()
    fields["history"] = FrozenList(
        Record("step", {key: freeze(value) for key, value in step.items()}) for step in history
    )
    return Record("ctx", fields)


def to_json(
    value: Any,
    where: str,
    kind: str,
    *,
    strict: bool = False,
    depth: int = 0,
    left: list[int] | None = None,
) -> Any:
    """``value`` as plain JSON (read-only copies thawed), or :class:`HookError` naming where it
    stops being JSON or holds more than :data:`MAX_JSON_VALUES` values. ``strict`` (the
    notebook's rule) refuses tuples, which JSON would turn into lists. ``left`` counts down the
    values still allowed (the caller passes none)."""
    if depth > MAX_JSON_DEPTH:
        raise HookError(kind, f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
    if left is None:
        left = [MAX_JSON_VALUES]
    left[0] -= 1
    if left[0] < 0:
        raise HookError(kind, f"{where} is past the limit of {MAX_JSON_VALUES} values as JSON")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HookError(kind, f"{where} holds a lone surrogate, which is not UTF-8") from None
        return str(value)
    if isinstance(value, int):
        if value.bit_length() > MAX_JSON_INT_BITS:
            raise HookError(
                kind, f"{where} is an integer of {value.bit_length()} bits, over the "
                f"{MAX_JSON_INT_BITS} a JSON value may have here"
            )  # fmt: skip
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise HookError(kind, f"{where} is {value!r}, which JSON cannot hold")
        return float(value)
    if isinstance(value, Record):
        fields = object.__getattribute__(value, "_fields")
        return {
            key: to_json(item, f"{where}.{key}", kind, strict=strict, depth=depth + 1, left=left)
            for key, item in fields.items()
        }
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise HookError(kind, f"{where} has the key {key!r}; JSON keys are strings")
            result[str(key)] = to_json(
                item, f"{where}[{key!r}]", kind, strict=strict, depth=depth + 1, left=left
            )
        return result
    if (
        isinstance(value, FrozenList)
        or type(value) is list
        or (not strict and isinstance(value, tuple))
    ):
        return [
            to_json(item, f"{where}[{index}]", kind, strict=strict, depth=depth + 1, left=left)
            for index, item in enumerate(value)
        ]
    hint = " (use a list)" if isinstance(value, tuple | set | frozenset) else ""
    raise HookError(kind, f"{where} is a {type(value).__name__}{hint}, which is not a JSON value")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    return str(value)


def allow() -> dict[str, Any]:
    """Let the attempted action through (the same as returning ``None``)."""
    return {"effect": "allow"}


def rewrite(action: Any, reason: str = "") -> dict[str, Any]:
    """Replace the attempted action (it must be admissible when the environment says which are)."""
    value = to_json(action, "rewrite's action", "result")
    return {"effect": "rewrite", "action": value, "reason": _text(reason, "rewrite's reason")}


def block_and_prompt(message: str) -> dict[str, Any]:
    """Veto the attempted action; the agent is asked again and shown ``message``."""
    return {"effect": "block_and_prompt", "message": _text(message, "block_and_prompt's message")}


def hint(text: str) -> dict[str, Any]:
    """Show the agent ``text`` with its next observation."""
    return {"effect": "hint", "text": _text(text, "hint's text")}


def _json_dumps(value: Any, sort_keys: bool = False) -> str:
    _check_visits(value, "json.dumps' value")
    text = json.dumps(to_json(value, "json.dumps' value", "exception"), sort_keys=bool(sort_keys))
    return _built(text)


def _json_loads(text: str) -> Any:
    _charge(len(_text(text, "json.loads' argument")))
    return json.loads(text, parse_int=_read_int)


MAX_INT_TEXT = 4300
"""The longest text ``int`` and ``json.loads`` read as an integer in hook code: reading digits is
quadratic in C, and a host may have lifted Python's own limit (``sys.set_int_max_str_digits``),
which ``LocalSandbox`` shares."""


def _read_int(text: str) -> int:
    _check_int_text(len(text))
    return int(text)


def _check_int_text(length: int) -> None:
    if length > MAX_INT_TEXT:
        raise ValueError(
            f"an integer written with {length} characters is over the hook limit of {MAX_INT_TEXT}"
        )


class _IntType(type):
    """Makes :class:`HookInt` stand for ``int``: ``isinstance(x, int)`` and ``int.from_bytes``
    work as on ``int``; calling it reads text only up to :data:`MAX_INT_TEXT` characters."""

    def __instancecheck__(cls, value: Any) -> bool:
        return isinstance(value, int)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, int)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], str | bytes | bytearray):
            _check_int_text(len(args[0]))
        return int(*args, **kwargs)

    def __getattr__(cls, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        if attribute == "from_bytes":
            return _int_from_bytes
        return getattr(int, attribute)

    def __repr__(cls) -> str:
        return "<class 'int'>"


def _int_from_bytes(data: Any, *args: Any, **kwargs: Any) -> int:
    """``int.from_bytes``, refusing integers over :data:`MAX_INT_BITS` bits: dividing two
    integers of a million bytes is quadratic work in one C call."""
    if isinstance(data, bytes | bytearray) and len(data) * 8 > MAX_INT_BITS:
        _too_big("the integer read from bytes")
    return int.from_bytes(data, *args, **kwargs)


class HookInt(metaclass=_IntType):
    """``int`` in hook code (see :class:`_IntType`)."""


# -- regular expressions: matching that cannot hold the host -----------------------------------

REGEX_FAST_STEPS = 1_000_000
"""The most backtracking steps a match may provably take to run in the calling thread; past it
(or with no proof) it runs through the call's :data:`RegexRunner`."""
RegexRunner = Callable[[Mapping[str, Any], float], Any]
"""Runs one regex request (:func:`regex_op`) and returns its JSON answer, raising
``TimeoutError`` once the monotonic deadline passes. ``LocalSandbox`` passes one that hands the
request to a worker process it kills at the deadline (``re`` holds the GIL, and nothing stops it
from Python); the subprocess worker runs it in place (its host kills the whole worker)."""
_REGEX_OPS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "split")
_REGEX_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.UNICODE
_REGEX_TREES: dict[tuple[str, int], list[tuple[Any, Any]]] = {}


def regex_op(request: Mapping[str, Any]) -> Any:
    """One regex operation on plain JSON: matches as their group spans, ``findall`` tuples as
    lists. The same function answers in the calling thread, in a worker and in a regex worker,
    so every sandbox gives hook code the same results."""
    op, string = request["op"], request["string"]
    compiled = re.compile(request["pattern"], request["flags"])
    if op in ("search", "match", "fullmatch"):
        found = getattr(compiled, op)(string)
        return None if found is None else _spans(found)
    if op == "finditer":
        return [_spans(found) for found in compiled.finditer(string)]
    if op == "findall":
        found_all = compiled.findall(string)
        return [list(item) if isinstance(item, tuple) else item for item in found_all]
    if op == "sub":
        return compiled.sub(request["repl"], string, count=request["count"])
    if op == "split":
        return compiled.split(string, maxsplit=request["maxsplit"])
    raise ValueError(f"unknown regex operation {op!r}")


def run_regex_here(request: Mapping[str, Any], deadline: float) -> Any:
    """The :data:`RegexRunner` of a process its host can kill (the subprocess worker)."""
    return regex_op(request)


def _spans(found: re.Match[str]) -> list[list[int]]:
    return [list(found.span(group)) for group in range(found.re.groups + 1)]


def regex_cost(pattern: str, flags: int, length: int) -> int | None:
    """The most backtracking steps a search of ``pattern`` in a text of ``length`` characters can
    take — every start, times every path from it, times the path's length — or ``None`` when
    that is over :data:`REGEX_FAST_STEPS` or has no bound: a repeated group that can itself
    choose (``(a+)+``, ``(a|b)*``), a backreference, a conditional group."""
    key = (pattern, flags)
    tree = _REGEX_TREES.get(key)
    if tree is None:
        try:
            tree = list(re._parser.parse(pattern, flags))  # type: ignore[attr-defined]
        except (re.error, RecursionError, OverflowError, ValueError):
            return None
        if len(_REGEX_TREES) > 256:
            _REGEX_TREES.clear()  # plain dict operations: safe from several threads
        _REGEX_TREES[key] = tree
    try:
        counted = _cost(tree, length)
    except RecursionError:
        return None
    if counted is None:
        return None
    cost = (length + 1) * counted[0] * max(counted[1], 1)
    return cost if cost <= REGEX_FAST_STEPS else None


def _cost(items: Iterable[tuple[Any, Any]], length: int) -> tuple[int, int, int] | None:
    """(backtracking paths, steps along one path, fewest characters consumed) of a parsed
    sequence in a text of ``length`` characters, or ``None``."""
    paths, steps, width = 1, 0, 0
    for op, argument in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "CATEGORY"):
            steps, width = steps + 1, width + 1
        elif name == "IN":
            steps, width = steps + len(argument), width + 1
        elif name == "AT":
            steps += 1
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            inner = _cost(argument[-1] if name == "SUBPATTERN" else argument, length)
            if inner is None:
                return None
            paths, steps, width = paths * inner[0], steps + inner[1], width + inner[2]
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, body = argument
            inner = _cost(body, length)
            if inner is None or low > length:
                return None
            if low == high:
                if inner[0] > 1 and low > 64:
                    return None
                paths *= inner[0] ** low
                steps, width = steps + inner[1] * low, width + inner[2] * low
            else:
                # A variable count backtracks one count at a time; safe only when the body
                # itself cannot choose and consumes text, so the counts are at most length + 1.
                if inner[0] != 1 or inner[2] < 1:
                    return None
                most = max(min(high, length // inner[2]), low)
                paths *= 1 if name == "POSSESSIVE_REPEAT" else most - low + 1
                steps, width = steps + inner[1] * most, width + inner[2] * low
        elif name == "BRANCH":
            branches = [_cost(branch, length) for branch in argument[1]]
            known = [branch for branch in branches if branch is not None]
            if len(known) != len(branches):
                return None
            paths *= sum(branch[0] for branch in known)
            steps += max((branch[1] for branch in known), default=0)
            width += min((branch[2] for branch in known), default=0)
        elif name in ("ASSERT", "ASSERT_NOT"):
            inner = _cost(argument[1], length)
            if inner is None:
                return None
            steps += inner[0] * max(inner[1], 1)  # tried in full, never backtracked into
        else:  # backreferences, conditional groups, anything a later Python adds
            return None
        if paths * steps > REGEX_FAST_STEPS:
            return None
    return paths, steps, width


class HookMatch:
    """A match, as hook code sees it: ``group``, ``groups``, ``groupdict``, ``start``, ``end``,
    ``span``, ``string`` and ``m[1]``, as on ``re.Match``. Built from spans, so a match found in
    a worker process reads the same as one found in place."""

    __slots__ = ("_names", "_spans", "_string")

    def __init__(self, string: str, spans: list[list[int]], names: Mapping[str, int]) -> None:
        object.__setattr__(self, "_string", string)
        object.__setattr__(self, "_spans", tuple((int(s), int(e)) for s, e in spans))
        object.__setattr__(self, "_names", MappingProxyType(dict(names)))

    def __setattr__(self, attribute: str, value: Any) -> NoReturn:
        raise TypeError("a match is read-only")

    def __delattr__(self, attribute: str) -> NoReturn:
        raise TypeError("a match is read-only")

    def _index(self, group: int | str) -> int:
        names = object.__getattribute__(self, "_names")
        spans = object.__getattribute__(self, "_spans")
        if isinstance(group, str):
            if group not in names:
                raise IndexError(f"no group named {group!r}")
            return int(names[group])
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < len(spans):
            raise IndexError(f"no such group: {group!r}")
        return group

    def _text(self, group: int | str, default: Any = None) -> Any:
        start, end = object.__getattribute__(self, "_spans")[self._index(group)]
        if start < 0:
            return default
        return object.__getattribute__(self, "_string")[start:end]

    def group(self, *groups: int | str) -> Any:
        if not groups:
            return self._text(0)
        if len(groups) == 1:
            return self._text(groups[0])
        return tuple(self._text(group) for group in groups)

    def __getitem__(self, group: int | str) -> Any:
        return self._text(group)

    def groups(self, default: Any = None) -> tuple[Any, ...]:
        count = len(object.__getattribute__(self, "_spans"))
        return tuple(self._text(group, default) for group in range(1, count))

    def groupdict(self, default: Any = None) -> dict[str, Any]:
        names = object.__getattribute__(self, "_names")
        return {name: self._text(index, default) for name, index in names.items()}

    def start(self, group: int | str = 0) -> int:
        return int(object.__getattribute__(self, "_spans")[self._index(group)][0])

    def end(self, group: int | str = 0) -> int:
        return int(object.__getattribute__(self, "_spans")[self._index(group)][1])

    def span(self, group: int | str = 0) -> tuple[int, int]:
        start, end = object.__getattribute__(self, "_spans")[self._index(group)]
        return int(start), int(end)

    @property
    def string(self) -> str:
        return str(object.__getattribute__(self, "_string"))

    def __repr__(self) -> str:
        return f"<hook match span={self.span()} match={self.group()!r}>"


class _Regex:
    """The ``re`` helpers of one call. A match whose cost :func:`regex_cost` bounds runs in
    place; any other goes through the call's :data:`RegexRunner` with the call's deadline, and
    past it the call fails as a timeout."""

    __slots__ = ("_budget", "_runner")

    def __init__(self, runner: RegexRunner, budget: _Budget) -> None:
        self._runner = runner
        self._budget = budget

    def run(
        self, op: str, pattern: Any, string: Any, flags: Any, **extra: Any
    ) -> tuple[Any, re.Pattern[str]]:
        if isinstance(pattern, HookPattern):  # re.search(re.compile(...), text), as re allows
            if flags:
                raise ValueError(f"re.{op} cannot take flags with a compiled pattern")
            flags = object.__getattribute__(pattern, "_flags")
            pattern = object.__getattribute__(pattern, "_pattern")
        pattern = _text(pattern, f"re.{op}'s pattern")
        string = _text(string, f"re.{op}'s string")
        compiled = _compile_regex(pattern, flags, op)
        request = {"op": op, "pattern": pattern, "flags": compiled.flags, "string": string, **extra}
        steps = regex_cost(pattern, compiled.flags, len(string))
        if op == "sub":  # the result grows by the replacement at every match
            repl = extra["repl"]
            if "\\" in repl or (len(string) + 1) * (len(repl) + 1) > REGEX_FAST_STEPS:
                steps = None
        if steps is not None and steps <= REGEX_FAST_STEPS:
            return _built(regex_op(request)), compiled
        try:
            return _built(self._runner(request, self._budget.deadline)), compiled
        except TimeoutError:
            self._budget.trip("timeout")

    def matcher(self, op: str) -> Callable[..., HookMatch | None]:
        def find(pattern: Any, string: Any, flags: Any = 0) -> HookMatch | None:
            spans, compiled = self.run(op, pattern, string, flags)
            return None if spans is None else HookMatch(string, spans, compiled.groupindex)

        find.__name__ = op
        return find

    def finditer(self, pattern: Any, string: Any, flags: Any = 0) -> list[HookMatch]:
        """A list, not an iterator: every match is found in one go."""
        found, compiled = self.run("finditer", pattern, string, flags)
        return [HookMatch(string, spans, compiled.groupindex) for spans in found]

    def findall(self, pattern: Any, string: Any, flags: Any = 0) -> list[Any]:
        found, _ = self.run("findall", pattern, string, flags)
        return [tuple(item) if isinstance(item, list) else item for item in found]

    def sub(self, pattern: Any, repl: Any, string: Any, count: Any = 0, flags: Any = 0) -> str:
        if not isinstance(repl, str):
            raise TypeError(
                "re.sub's replacement must be a string in hooks (a function would run inside the "
                "regex engine, outside the hook's budget)"
            )
        text, _ = self.run("sub", pattern, string, flags, repl=str(repl), count=_count(count))
        return str(text)

    def split(self, pattern: Any, string: Any, maxsplit: Any = 0, flags: Any = 0) -> list[Any]:
        parts, _ = self.run("split", pattern, string, flags, maxsplit=_count(maxsplit))
        return list(parts)

    def compile(self, pattern: Any, flags: Any = 0) -> HookPattern:
        text = _text(pattern, "re.compile's pattern")
        return HookPattern(self, text, _compile_regex(text, flags, "compile").flags)

    def helpers(self) -> _Helpers:
        members: dict[str, Any] = {op: self.matcher(op) for op in ("search", "match", "fullmatch")}
        members.update(
            finditer=self.finditer,
            findall=self.findall,
            sub=self.sub,
            split=self.split,
            compile=self.compile,
            escape=re.escape,
            IGNORECASE=re.IGNORECASE,
            MULTILINE=re.MULTILINE,
            DOTALL=re.DOTALL,
            I=re.I,
            M=re.M,
            S=re.S,
        )
        return _Helpers("re", members)


class HookPattern:
    """``re.compile``'s answer in hook code: ``search``, ``match``, ``fullmatch``, ``finditer``,
    ``findall``, ``sub``, ``split``, ``pattern`` and ``flags``, run like the ``re`` helpers."""

    __slots__ = ("_flags", "_pattern", "_regex")

    def __init__(self, regex: _Regex, pattern: str, flags: int) -> None:
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_flags", flags)

    def __setattr__(self, attribute: str, value: Any) -> NoReturn:
        raise TypeError("a compiled pattern is read-only")

    def __delattr__(self, attribute: str) -> NoReturn:
        raise TypeError("a compiled pattern is read-only")

    def __getattr__(self, attribute: str) -> Any:
        regex = object.__getattribute__(self, "_regex")
        pattern = object.__getattribute__(self, "_pattern")
        flags = object.__getattribute__(self, "_flags")
        if attribute in ("search", "match", "fullmatch"):
            find = regex.matcher(attribute)
            return lambda string: find(pattern, string, flags)
        if attribute in ("finditer", "findall"):
            method = getattr(regex, attribute)
            return lambda string: method(pattern, string, flags)
        if attribute == "sub":
            return lambda repl, string, count=0: regex.sub(pattern, repl, string, count, flags)
        if attribute == "split":
            return lambda string, maxsplit=0: regex.split(pattern, string, maxsplit, flags)
        if attribute == "pattern":
            return pattern
        if attribute == "flags":
            return flags
        raise AttributeError(f"a compiled pattern has no {attribute!r} in hooks")

    def __repr__(self) -> str:
        return f"<hook pattern {object.__getattribute__(self, '_pattern')!r}>"


def _compile_regex(pattern: str, flags: Any, op: str) -> re.Pattern[str]:
    """Compiling is Python code (it lets go of the GIL); only matching can hold it."""
    if isinstance(flags, bool) or not isinstance(flags, int) or flags & ~_REGEX_FLAGS:
        raise ValueError(f"re.{op}'s flags must be made of re.I, re.M and re.S, not {flags!r}")
    try:
        return re.compile(pattern, int(flags))
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"re.{op}: not a regular expression ({exc})") from None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a count must be an integer, not {type(value).__name__}")
    return max(int(value), 0)


MATH = _Helpers(
    "math",
    {
        name: getattr(math, name)
        for name in (
            "ceil", "floor", "trunc", "sqrt", "exp", "log", "log2", "log10", "fabs",
            "isclose", "isfinite", "isinf", "isnan", "pi", "e", "tau", "inf",
        )
    },
)  # fmt: skip
JSON = _Helpers("json", {"dumps": _json_dumps, "loads": _json_loads})

SAFE_BUILTINS: Mapping[str, Any] = MappingProxyType(
    {
        **{
            name: getattr(builtins, name)
            for name in (
                "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter",
                "float", "frozenset", "int", "isinstance", "len", "list", "map", "max", "min",
                "next", "ord", "repr", "reversed", "round", "set", "sorted", "str", "tuple",
                "zip",
            )
        },
        **{name: getattr(builtins, name) for name in CATCHABLE},
        "range": _range,
        "sum": _sum,
        "int": HookInt,
        "__hook_pow__": _guard_pow,
        "__hook_add__": _guard_add,
        "__hook_iadd__": _guard_iadd,
        "__hook_mod__": _guard_mod,
        "__hook_mul__": _guard_mul,
        "__hook_lshift__": _guard_lshift,
        "__hook_floordiv__": _set_operation(operator.floordiv),
        "__hook_sub__": _set_operation(operator.sub),
        "__hook_or__": _set_operation(operator.or_),
        "__hook_and__": _set_operation(operator.and_),
        "__hook_xor__": _set_operation(operator.xor),
        "__hook_eq__": _comparison(operator.eq),
        "__hook_ne__": _comparison(operator.ne),
        "__hook_lt__": _comparison(operator.lt),
        "__hook_le__": _comparison(operator.le),
        "__hook_gt__": _comparison(operator.gt),
        "__hook_ge__": _comparison(operator.ge),
        "__hook_in__": _search(negated=False),
        "__hook_not_in__": _search(negated=True),
        "__hook_operand__": _operand,
        "__hook_key__": _key,
        "__hook_pass__": _pass,
        "__hook_placeholder__": _placeholder,
        "__hook_concat__": _concat,
        "__hook_display__": _display,
        "__hook_method__": _method,
        **{guard: getattr(builtins, name) for name, guard in _REAL_TYPES.items()},
        "str": HookStr,
        "set": HookSet,
        "frozenset": HookFrozenset,
        "dict": HookDict,
        "list": HookList,
        "tuple": HookTuple,
        "__hook_built__": _built,
        "repr": _repr,
        "sorted": _sorted,
        "min": _extreme(min, "min"),
        "max": _extreme(max, "max"),
        "round": _round,
    }
)  # fmt: skip
"""The builtins hook code gets: no ``open``, ``__import__``, ``getattr``, ``type``, ``print``…"""

_HELPERS: Mapping[str, Any] = MappingProxyType(
    {
        "math": MATH,
        "json": JSON,
        "allow": allow,
        "rewrite": rewrite,
        "block_and_prompt": block_and_prompt,
        "hint": hint,
    }
)


def _globals(regex: _Regex) -> dict[str, Any]:
    """Fresh globals for one call: nothing a call could leave behind reaches the next."""
    return {
        "__builtins__": dict(SAFE_BUILTINS),
        "__name__": "hook",
        **_HELPERS,
        "re": regex.helpers(),
    }


# -- compiling and calling ---------------------------------------------------------------------

Program = tuple[tuple[str, types.CodeType], ...]
"""Compiled code hooks: (hook name, module code defining it), in the order they run."""


def compile_program(hooks: Iterable[tuple[str, str]]) -> Program:
    """Compile code hooks (already passed by the policy) with the arithmetic guards."""
    compiled = []
    for index, (hook, source) in enumerate(hooks):
        try:
            parsed = ast.parse(source, filename=HOOK_FILE, mode="exec")
            tree = _Guard(_bound_names(parsed)).visit(parsed)
            ast.fix_missing_locations(tree)
            code = compile(tree, HOOK_FILE, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            raise HookError(
                "exception",
                f"code hook {index} ({hook}) does not compile: {type(exc).__name__}: {exc}",
            ) from None
        compiled.append((hook, code))
    return tuple(compiled)


def _here() -> None:
    """Only its code's file name is used: the name Python gives this module's code."""


_RUNTIME_FILE = _here.__code__.co_filename


class _Budget:
    """Counts the hook's lines and watches its deadline, from a per-thread trace function."""

    __slots__ = ("built", "deadline", "lines", "max_lines", "tripped")

    def __init__(self, limits: Limits) -> None:
        self.max_lines = limits.max_lines
        self.deadline = time.monotonic() + limits.timeout_s
        self.lines = 0
        self.built = 0
        self.tripped: str | None = None

    def build(self, size: int) -> None:
        """Count a large value a guard built; past :data:`MAX_BUILT` the call fails as
        ``memory``, a stop the hook cannot catch."""
        self.built += size
        if self.built > MAX_BUILT:
            self.trip("memory")

    def trip(self, kind: str) -> NoReturn:
        self.tripped = kind
        raise _Stop(kind)

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if filename != HOOK_FILE:
            # Helpers run untraced. This runtime's own (the guards) check the deadline as they
            # start, so a line chaining many guarded calls stops at the first one past it; any
            # other code (a regex worker's bookkeeping) is never interrupted halfway.
            if filename == _RUNTIME_FILE and time.monotonic() > self.deadline:
                self.trip("timeout")
            return None
        if time.monotonic() > self.deadline:
            self.trip("timeout")
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines > self.max_lines:
                self.trip("lines")
        if time.monotonic() > self.deadline:
            self.trip("timeout")
        return self._local

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        previous = sys.gettrace()
        outer = getattr(_CURRENT, "budget", None)
        _CURRENT.budget = self
        sys.settrace(self._global)
        try:
            return function(*args)
        finally:
            sys.settrace(previous)
            _CURRENT.budget = outer


def run_call(
    program: Program,
    hook: str,
    ctx: Mapping[str, Any],
    notebook: Mapping[str, Any],
    limits: Limits,
    regex: RegexRunner = run_regex_here,
) -> tuple[dict[str, Any] | None, dict[str, Any], int]:
    """Run every code hook named ``hook`` in order: (effect JSON or None, notebook, lines run).

    The notebook threads through the hooks; the first effect that intervenes (not ``None``,
    not ``allow``) wins, ``allow`` when some hook allowed explicitly and none intervened. Raises
    :class:`HookError` for any failure; the caller's ``notebook`` is never touched. ``regex``
    runs the matches the runtime cannot bound (see :data:`RegexRunner`).
    """
    frozen = _context(ctx)
    nb: dict[str, Any] = json.loads(json.dumps(notebook))
    budget = _Budget(limits)
    helpers = _Regex(regex, budget)
    decided: dict[str, Any] | None = None
    allowed = False
    for index, (name, code) in enumerate(program):
        if name != hook:
            continue
        value = _call_one(code, hook, index, frozen, nb, budget, limits, helpers)
        if value is None:
            continue
        if value["effect"] == "allow":
            allowed = True
        elif decided is None:
            decided = value
    result = to_json(nb, "nb", "notebook", strict=True)
    size = len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limits.notebook_bytes:
        raise HookError(
            "notebook",
            f"{hook} left a notebook of {size} bytes as JSON, over its "
            f"{limits.notebook_bytes}-byte cap; keep only what later calls need",
        )
    if decided is None and allowed:
        decided = allow()
    return decided, result, budget.lines


def _call_one(
    code: types.CodeType,
    hook: str,
    index: int,
    ctx: Record,
    nb: dict[str, Any],
    budget: _Budget,
    limits: Limits,
    regex: _Regex,
) -> dict[str, Any] | None:
    where = f"{hook} (code hook {index})"
    try:
        namespace = _globals(regex)
        exec(code, namespace)
        function = namespace.get(hook)
        if not callable(function):
            raise HookError("exception", f"{where} does not define a function {hook}(ctx, nb)")
        value = budget.call(function, ctx, nb)
    except _Stop as stop:
        raise HookError(stop.kind, _budget_message(where, stop.kind, limits)) from None
    except HookError:
        raise
    except MemoryError:
        raise HookError("memory", f"{where} ran out of memory") from None
    except RecursionError as exc:
        raise HookError("recursion", f"{where} recursed too deeply{_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the hook raised is its failure
        message = _clip(f"{type(exc).__name__}: {exc}")
        raise HookError("exception", f"{where} raised {message}{_line(exc)}") from None
    if budget.tripped is not None:  # the hook got past a stop: the call still fails
        raise HookError(budget.tripped, _budget_message(where, budget.tripped, limits))
    return _effect(value, where, limits)


def _effect(value: Any, where: str, limits: Limits) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HookError(
            "result",
            f"{where} returned a {type(value).__name__}; return None, allow(), rewrite(action), "
            "block_and_prompt(message) or hint(text)",
        )
    effect = to_json(value, f"the effect {where} returned", "result")
    if effect.get("effect") not in EFFECTS:
        raise HookError(
            "result",
            f"{where} returned {_clip(repr(effect))}, which is not an effect; return None, "
            "allow(), rewrite(action), block_and_prompt(message) or hint(text)",
        )
    size = len(json.dumps(effect, ensure_ascii=False).encode())
    if size > limits.result_bytes:
        raise HookError(
            "result", f"{where} returned an effect of {size} bytes, over {limits.result_bytes}"
        )
    return effect  # type: ignore[no-any-return]


def _budget_message(where: str, kind: str, limits: Limits) -> str:
    if kind == "lines":
        return f"{where} ran more than {limits.max_lines} lines, its line budget"
    if kind == "memory":
        return (
            f"{where} built more than {MAX_BUILT} items (list items, characters, entries) in "
            f"values of {BUILT_COUNTED_FROM} items or more, its allocation budget"
        )
    return f"{where} ran longer than its {limits.timeout_s:g}s wall-clock timeout"


def _line(exc: BaseException) -> str:
    """Where in the hook's own code the exception passed last."""
    line = None
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == HOOK_FILE:
            line = trace.tb_lineno
        trace = trace.tb_next
    return f" at line {line}" if line is not None else ""


def _clip(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


# -- the subprocess worker ---------------------------------------------------------------------


def _handle(request: Mapping[str, Any], programs: OrderedDict[str, Program]) -> dict[str, Any]:
    op = request.get("op")
    if op == "ping":
        return {"ok": True}
    if op == "load":
        program = compile_program((str(h), str(c)) for h, c in request["hooks"])
        programs[str(request["id"])] = program
        programs.move_to_end(str(request["id"]))
        while len(programs) > _CACHED_PROGRAMS:
            programs.popitem(last=False)
        return {"ok": True}
    if op == "call":
        found = programs.get(str(request["id"]))
        if found is None:
            return {"ok": False, "error": {"kind": "not_loaded", "message": "load the program"}}
        programs.move_to_end(str(request["id"]))
        effect, notebook, lines = run_call(
            found,
            str(request["hook"]),
            request["ctx"],
            request["nb"],
            Limits.from_json(request["limits"]),
        )
        return {"ok": True, "effect": effect, "nb": notebook, "lines": lines}
    return {"ok": False, "error": {"kind": "internal", "message": f"unknown op {op!r}"}}


def _limit_resources(memory_bytes: int) -> None:
    import resource

    def lower(which: int, soft: int) -> None:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, soft if hard == resource.RLIM_INFINITY else hard))

    lower(resource.RLIMIT_AS, memory_bytes)
    lower(resource.RLIMIT_CORE, 0)  # a CPU-limit kill leaves no core file behind
    lower(resource.RLIMIT_FSIZE, 0)  # no file can be written
    if hasattr(resource, "RLIMIT_NPROC"):
        lower(resource.RLIMIT_NPROC, 0)  # no process or thread can be started


def _limit_cpu(cpu_seconds: int) -> None:
    """Allow ``cpu_seconds`` more CPU from now (RLIMIT_CPU counts the worker's whole life);
    past it the kernel sends SIGXCPU, which kills the worker: CPU spent in C is stopped too."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + cpu_seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def serve(argv: list[str]) -> None:
    """The worker: ``_hookrt.py MEMORY_BYTES CPU_SECONDS``; JSON lines on stdin and stdout.

    The protocol streams are private duplicates; file descriptors 0 and 1 are pointed at
    ``/dev/null`` first, so nothing a hook could make print can corrupt the protocol.
    """
    import os

    memory_bytes, cpu_seconds = int(argv[0]), int(argv[1])
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin = sys.stdout = None
    _limit_resources(memory_bytes)
    programs: OrderedDict[str, Program] = OrderedDict()

    def reply(message: Mapping[str, Any]) -> None:
        try:
            data = json.dumps(message, ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            error = {"kind": "internal", "message": _clip(f"unencodable reply: {exc}")}
            data = json.dumps({"ok": False, "error": error}).encode()
        replies.write(data + b"\n")
        replies.flush()

    reply({"ok": True, "ready": os.getpid()})
    while True:
        line = requests.readline()
        if not line:
            return
        _limit_cpu(cpu_seconds)
        try:
            response = _handle(json.loads(line), programs)
        except HookError as exc:
            response = {"ok": False, "error": {"kind": exc.kind, "message": exc.message}}
        except MemoryError:
            response = {"ok": False, "error": {"kind": "memory", "message": "out of memory"}}
        except Exception as exc:  # noqa: BLE001 - reported to the host, which decides
            message = _clip(f"{type(exc).__name__}: {exc}")
            response = {"ok": False, "error": {"kind": "internal", "message": message}}
        reply(response)


def serve_regex(argv: list[str]) -> None:
    """The regex worker: ``_hookrt.py --regex MEMORY_BYTES``; one :func:`regex_op` request per
    JSON line on stdin, ``{"ok": true, "value": ...}`` per line on stdout. ``LocalSandbox``
    kills it when a match runs past its call's deadline; it ends by itself when stdin closes."""
    import os

    os.chdir("/")
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin = sys.stdout = None
    _limit_resources(int(argv[0]))
    replies.write(b'{"ok": true}\n')
    replies.flush()
    while True:
        line = requests.readline()
        if not line:
            return
        try:
            request = json.loads(line)
            _limit_cpu(int(request.get("cpu_seconds", 60)))
            reply = {"ok": True, "value": regex_op(request)}
        except MemoryError:
            reply = {"ok": False, "kind": "memory", "message": "the match ran out of memory"}
        except Exception as exc:  # noqa: BLE001 - reported to the host, which decides
            message = _clip(f"{type(exc).__name__}: {exc}")
            reply = {"ok": False, "kind": "exception", "message": message}
        try:
            data = json.dumps(reply, ensure_ascii=False).encode()
        except (MemoryError, ValueError):
            data = b'{"ok": false, "kind": "memory", "message": "the answer is too large"}'
        replies.write(data + b"\n")
        replies.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--regex"]:
        serve_regex(sys.argv[2:])
    else:
        serve(sys.argv[1:])
