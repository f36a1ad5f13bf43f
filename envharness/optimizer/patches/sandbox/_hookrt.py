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
kill; in ``LocalSandbox``: a regex worker process killed at the deadline). C work on values grown
over many lines (``extend`` doubling, then ``sorted``) is left to the subprocess worker's CPU and
memory limits and its host's kill.
"""

from __future__ import annotations

import ast
import builtins
import copy
import itertools
import json
import math
import re
import sys
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NoReturn

__all__ = [
    "CATCHABLE",
    "EFFECTS",
    "HOOK_FILE",
    "MAX_INT_BITS",
    "MAX_JSON_INT_BITS",
    "MAX_JSON_VALUES",
    "MAX_RANGE",
    "MAX_SEQUENCE",
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
    return left * right


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


def _guard_add(left: Any, right: Any) -> Any:
    """``+``, refusing a string, bytes, list or tuple over :data:`MAX_SEQUENCE` items: joining a
    value to itself line after line doubles it each time, and what a hook then hands to C code
    (``sorted``, a comparison) would run unbounded on it."""
    if (
        isinstance(left, _SEQUENCES)
        and isinstance(right, _SEQUENCES)
        and len(left) + len(right) > MAX_SEQUENCE
    ):
        _too_big(f"the joined {type(left).__name__}")
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


_GUARDS: dict[type[ast.operator], str] = {
    ast.Pow: "__hook_pow__",
    ast.Mult: "__hook_mul__",
    ast.LShift: "__hook_lshift__",
    ast.Add: "__hook_add__",
    ast.Mod: "__hook_mod__",
}
_AUGMENTED_GUARDS: dict[type[ast.operator], str] = {**_GUARDS, ast.Add: "__hook_iadd__"}


class _Guard(ast.NodeTransformer):
    """Routes ``**``, ``*``, ``<<``, ``+`` and ``%`` (and their augmented forms) through the
    guards."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        guard = _GUARDS.get(type(node.op))
        if guard is None:
            return node
        call = ast.Call(
            func=ast.Name(id=guard, ctx=ast.Load()), args=[node.left, node.right], keywords=[]
        )
        return ast.copy_location(call, node)

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
        call = ast.Call(
            func=ast.Name(id=guard, ctx=ast.Load()), args=[current, node.value], keywords=[]
        )
        return ast.copy_location(ast.Assign(targets=[target], value=call), node)


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
    return json.dumps(to_json(value, "json.dumps' value", "exception"), sort_keys=bool(sort_keys))


def _json_loads(text: str) -> Any:
    return json.loads(_text(text, "json.loads' argument"), parse_int=_read_int)


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
        return getattr(int, attribute)

    def __repr__(cls) -> str:
        return "<class 'int'>"


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
            return regex_op(request), compiled
        try:
            return self._runner(request, self._budget.deadline), compiled
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
            tree = _Guard().visit(ast.parse(source, filename=HOOK_FILE, mode="exec"))
            ast.fix_missing_locations(tree)
            code = compile(tree, HOOK_FILE, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            raise HookError(
                "exception",
                f"code hook {index} ({hook}) does not compile: {type(exc).__name__}: {exc}",
            ) from None
        compiled.append((hook, code))
    return tuple(compiled)


class _Budget:
    """Counts the hook's lines and watches its deadline, from a per-thread trace function."""

    __slots__ = ("deadline", "lines", "max_lines", "tripped")

    def __init__(self, limits: Limits) -> None:
        self.max_lines = limits.max_lines
        self.deadline = time.monotonic() + limits.timeout_s
        self.lines = 0
        self.tripped: str | None = None

    def trip(self, kind: str) -> NoReturn:
        self.tripped = kind
        raise _Stop(kind)

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != HOOK_FILE:
            return None  # helpers run untraced; the next hook line checks the deadline
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
        sys.settrace(self._global)
        try:
            return function(*args)
        finally:
            sys.settrace(previous)


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
