"""The hook runtime: runs policy-checked hook code with a few builtins, under budgets.

Standard library only, on purpose: ``LocalSandbox`` imports this module, and ``SubprocessSandbox``
runs this very file as its worker (``python -S -P -B _hookrt.py``), so the worker starts in
milliseconds, loads nothing of the host package, and hook code is offered exactly what is
listed here — never a module object (a module leads back to ``sys``):

- builtins: a small allow-list (:data:`SAFE_BUILTINS`), ``range`` capped at
  :data:`MAX_RANGE` items;
- helpers: read-only namespaces ``math``, ``re`` and ``json`` holding plain functions and
  constants (``math.pi = 3`` raises, and the real modules are never reachable);
- effects: ``allow()``, ``rewrite(action, reason="")``, ``block_and_prompt(message)``,
  ``hint(text)``;
- ``ctx`` read-only (dicts and lists that refuse changes, records with attribute access), built
  afresh for every call from JSON, so nothing a hook does reaches the caller's objects;
- ``nb`` a fresh JSON-only dict, returned only when the call succeeds.

Budgets: a trace function counts the hook's lines and checks a wall-clock deadline on every
line, in whatever thread the hook runs (``sys.settrace`` is per thread; no signals), and raises
``_Stop``, a ``BaseException`` the hook cannot catch (the policy allows only ``except`` clauses
naming the ``Exception`` subclasses offered here, and no ``finally``); a budget that tripped
fails the call even if the hook somehow returned. Code is compiled with ``a ** b``, ``a * b``
and ``a << b`` routed through guards that refuse results over :data:`MAX_INT_BITS` bits or
:data:`MAX_SEQUENCE` items (``10**10**10``, ``"a" * 10**10``) before they are computed. None of
this can interrupt one long call into C code (a catastrophic regex, ``sorted`` of a huge list):
only the subprocess worker's CPU and memory limits and its host's kill stop those.
"""

from __future__ import annotations

import ast
import builtins
import copy
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
        if len(left) * right > MAX_SEQUENCE:
            _too_big(f"the repeated {type(left).__name__}")
    elif (
        isinstance(left, int)
        and isinstance(right, str | bytes | list | tuple)
        and len(right) * left > MAX_SEQUENCE
    ):
        _too_big(f"the repeated {type(right).__name__}")
    return left * right


def _guard_lshift(value: Any, shift: Any) -> Any:
    if (
        isinstance(value, int)
        and isinstance(shift, int)
        and shift > 0
        and value.bit_length() + shift > MAX_INT_BITS
    ):
        _too_big("the shifted integer")
    return value << shift


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
}


class _Guard(ast.NodeTransformer):
    """Routes ``**``, ``*`` and ``<<`` (and their augmented forms) through the guards."""

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
        guard = _GUARDS.get(type(node.op))
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
    return json.loads(_text(text, "json.loads' argument"))


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
RE = _Helpers(
    "re",
    {
        name: getattr(re, name)
        for name in (
            "search", "match", "fullmatch", "findall", "sub", "split", "escape", "compile",
            "IGNORECASE", "MULTILINE", "DOTALL", "I", "M", "S",
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
                "next", "ord", "repr", "reversed", "round", "set", "sorted", "str", "sum",
                "tuple", "zip",
            )
        },
        **{name: getattr(builtins, name) for name in CATCHABLE},
        "range": _range,
        "__hook_pow__": _guard_pow,
        "__hook_mul__": _guard_mul,
        "__hook_lshift__": _guard_lshift,
    }
)  # fmt: skip
"""The builtins hook code gets: no ``open``, ``__import__``, ``getattr``, ``type``, ``print``…"""

_HELPERS: Mapping[str, Any] = MappingProxyType(
    {
        "math": MATH,
        "re": RE,
        "json": JSON,
        "allow": allow,
        "rewrite": rewrite,
        "block_and_prompt": block_and_prompt,
        "hint": hint,
    }
)


def _globals() -> dict[str, Any]:
    """Fresh globals for one call: nothing a call could leave behind reaches the next."""
    return {"__builtins__": dict(SAFE_BUILTINS), "__name__": "hook", **_HELPERS}


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

    def _trip(self, kind: str) -> NoReturn:
        self.tripped = kind
        raise _Stop(kind)

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != HOOK_FILE:
            return None  # helpers run untraced; the next hook line checks the deadline
        if time.monotonic() > self.deadline:
            self._trip("timeout")
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines > self.max_lines:
                self._trip("lines")
        if time.monotonic() > self.deadline:
            self._trip("timeout")
        return self._local

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        previous = sys.gettrace()
        sys.settrace(self._global)
        try:
            return function(*args)
        finally:
            sys.settrace(previous)


def run_call(
    program: Program, hook: str, ctx: Mapping[str, Any], notebook: Mapping[str, Any], limits: Limits
) -> tuple[dict[str, Any] | None, dict[str, Any], int]:
    """Run every code hook named ``hook`` in order: (effect JSON or None, notebook, lines run).

    The notebook threads through the hooks; the first effect that intervenes (not ``None``,
    not ``allow``) wins, ``allow`` when some hook allowed explicitly and none intervened. Raises
    :class:`HookError` for any failure; the caller's ``notebook`` is never touched.
    """
    frozen = _context(ctx)
    nb: dict[str, Any] = json.loads(json.dumps(notebook))
    budget = _Budget(limits)
    decided: dict[str, Any] | None = None
    allowed = False
    for index, (name, code) in enumerate(program):
        if name != hook:
            continue
        value = _call_one(code, hook, index, frozen, nb, budget, limits)
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
) -> dict[str, Any] | None:
    where = f"{hook} (code hook {index})"
    try:
        namespace = _globals()
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


if __name__ == "__main__":
    serve(sys.argv[1:])
