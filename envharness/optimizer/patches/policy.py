"""The AST policy: which Python a code hook may be written in.

An allow-list, not a deny-list: every syntax node type a hook may use is named in
:data:`ALLOWED_NODES`, so constructs nobody thought about (``except*``, ``match``, syntax added
by a later Python) are refused until someone allows them on purpose. On top of the node types,
names, attributes, string constants, ``except`` clauses, f-string format specs and the shape of
the module are checked; :func:`check_patch` raises :class:`PatchPolicyError` listing each
violation with its hook, line and construct.

What the rules defend (docs/patches.md has the full list and what is *not* defended):

- no way out of the sandbox: no imports, no dunder or private (``_x``) names or attributes, no
  frame/traceback/generator/code attributes (``f_``, ``tb_``, ``gi_``, ``cr_``, ``ag_``, ``co_``
  prefixes, ``mro``), no ``str.format``/``format_map`` (``"{0.__class__}".format(x)`` walks
  attributes), no reflection builtins (``getattr``, ``vars``, ``type``…), no ``eval``/``exec``/
  ``compile``/``open``, no string naming a dunder;
- no hiding from the budget: no ``while`` (loop over something bounded), no generators, no
  bare or broad ``except`` and no ``finally`` (either could swallow the budget's stop), no
  ``raise``, no padding methods (``ljust``, ``zfill``…: C work as wide as the hook asks), no
  slice assignment (``x[:0] = x`` doubles a list in one C call);
- no state outside ``nb``: the module holds only the hook function; attributes are never
  assigned (ctx and the helpers are read-only); no ``global``/``nonlocal``, classes or lambdas;
- no answer leakage: code may not mention the environment's forbidden terms.

A ``RecursionError`` or ``MemoryError`` while parsing (absurdly nested code) is a rejection.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

import msgspec

from envharness.optimizer.patches.errors import PatchPolicyError
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox._hookrt import CATCHABLE

__all__ = [
    "ALLOWED_NODES",
    "FORBIDDEN_ATTRIBUTES",
    "FORBIDDEN_NAMES",
    "MAX_NESTING",
    "PolicyViolation",
    "check_code",
    "check_patch",
]

MAX_NESTING = 100
"""Deeper syntax trees are refused (they exist only to crash parsers and compilers)."""
_MAX_REPORTED = 20

ALLOWED_NODES: frozenset[type[ast.AST]] = frozenset(
    {
        # structure
        ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Pass,
        # statements
        ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.Expr, ast.If, ast.For,
        ast.Break, ast.Continue, ast.Try, ast.ExceptHandler,
        # expressions
        ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call, ast.keyword,
        ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Starred,
        ast.Dict, ast.Set, ast.List, ast.Tuple,
        ast.ListComp, ast.SetComp, ast.DictComp, ast.comprehension,
        ast.JoinedStr, ast.FormattedValue,
        # contexts and operators
        ast.Load, ast.Store, ast.Del,
        ast.And, ast.Or,
        ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
        ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd,
        ast.Not, ast.UAdd, ast.USub, ast.Invert,
        ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn,
    }
)  # fmt: skip
"""Every syntax node type hook code may contain; anything else is refused."""

_NO_IMPORT = "import is not allowed: hooks get the helpers math, re and json without importing"
_REFUSED: dict[str, str] = {
    "Import": _NO_IMPORT,
    "ImportFrom": _NO_IMPORT,
    "While": "a while loop is not allowed: loop with for over a list or a range",
    "Lambda": "lambda is not allowed: define a nested function with def",
    "ClassDef": "a class is not allowed",
    "AsyncFunctionDef": "async code is not allowed",
    "Await": "async code is not allowed",
    "AsyncFor": "async code is not allowed",
    "AsyncWith": "async code is not allowed",
    "With": "with is not allowed: hooks open nothing",
    "Raise": "raise is not allowed: return None (no intervention) or an effect",
    "Assert": "assert is not allowed: return None (no intervention) or an effect",
    "Global": "global is not allowed: keep state in nb",
    "Nonlocal": "nonlocal is not allowed: keep state in nb",
    "Yield": "a generator (yield) is not allowed",
    "YieldFrom": "a generator (yield from) is not allowed",
    "GeneratorExp": "a generator expression is not allowed: use a list comprehension [...]",
    "NamedExpr": "the walrus operator := is not allowed: use a plain assignment",
    "TryStar": "except* is not allowed",
    "Match": "match is not allowed: use if/elif",
    "MatMult": "the @ operator is not allowed",
    "TypeAlias": "a type alias is not allowed",
}

_NO_MODULES = "hooks have no modules: no filesystem, network or subprocess access"
_REFLECTION = "reflection is not allowed (it leads out of the sandbox)"
FORBIDDEN_NAMES: dict[str, str] = {
    **dict.fromkeys(("eval", "exec", "compile"), "dynamic code execution is not allowed"),
    **dict.fromkeys(
        (
            "getattr", "setattr", "delattr", "hasattr", "globals", "locals", "vars", "dir",
            "type", "super", "object", "id", "memoryview", "classmethod", "staticmethod",
            "property", "callable", "issubclass",
        ),
        _REFLECTION,
    ),
    **dict.fromkeys(("open", "input", "breakpoint", "help", "exit", "quit"), "I/O is not allowed"),
    "print": "print is not allowed: its output goes nowhere; keep notes in nb",
    "format": "format() is not allowed: use an f-string",
    **dict.fromkeys(
        (
            "os", "sys", "subprocess", "socket", "shutil", "pathlib", "io", "builtins",
            "importlib", "ctypes", "signal", "threading", "multiprocessing", "asyncio",
            "urllib", "http", "requests", "httpx", "resource", "gc", "inspect", "pickle",
            "marshal", "tempfile", "glob", "posix", "nt", "select", "mmap", "fcntl",
        ),
        _NO_MODULES,
    ),
    **dict.fromkeys(
        ("Exception", "BaseException"),
        "broad exception classes are not allowed: name the ones you expect "
        f"({', '.join(CATCHABLE)})",
    ),
}  # fmt: skip
"""Names hook code may not mention at all, with the reason given."""

FORBIDDEN_ATTRIBUTES: dict[str, str] = {
    "format": "str.format is not allowed (format strings can reach attributes): use an f-string",
    "format_map": "str.format_map is not allowed (format strings can reach attributes)",
    "mro": "mro is not allowed (it leads to every class)",
    **{
        name: f"str.{name} is not allowed (it pads in C to any width, past every budget): use "
        "an f-string such as f'{text:>10}' (widths up to 3 digits)"
        for name in ("ljust", "rjust", "center", "zfill", "expandtabs")
    },
}
"""Attributes hook code may not use, besides names starting with ``_`` and the prefixes below."""
_FORBIDDEN_PREFIXES = ("f_", "tb_", "gi_", "cr_", "ag_", "co_")
_DUNDER = re.compile(r"__\w+__")
_SAFE_SPEC = re.compile(r"[<>^=]?[+\- ]?#?0?\d{0,3}[,_]?(\.\d{1,3})?[bcdeEfFgGnosxX%]?")


class PolicyViolation(msgspec.Struct, frozen=True, kw_only=True):
    """One construct the policy refuses: which code hook, where, what, and why."""

    hook: str
    index: int
    line: int
    column: int
    construct: str
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.hook} (code hook {self.index}), line {self.line}: {self.construct}: "
            f"{self.reason}"
        )


def check_patch(patch: HarnessPatch, *, forbidden_terms: Sequence[str] = ()) -> None:
    """Raise :class:`PatchPolicyError` naming every refused construct (hook, line, construct)."""
    if not isinstance(patch, HarnessPatch):
        raise TypeError(f"check_patch needs a HarnessPatch, not {type(patch).__name__}")
    violations: list[PolicyViolation] = []
    for index, code_hook in enumerate(patch.hooks):
        violations.extend(
            check_code(code_hook.hook, code_hook.code, index=index, forbidden_terms=forbidden_terms)
        )
    if violations:
        shown = violations[:_MAX_REPORTED]
        more = len(violations) - len(shown)
        lines = "\n".join(f"  - {violation}" for violation in shown)
        tail = f"\n  … and {more} more" if more else ""
        raise PatchPolicyError(
            f"the patch breaks the hook code policy ({len(violations)} problem"
            f"{'s' if len(violations) != 1 else ''}):\n{lines}{tail}",
            tuple(violations),
        )


def check_code(
    hook: str, code: str, *, index: int = 0, forbidden_terms: Sequence[str] = ()
) -> list[PolicyViolation]:
    """The violations in one code hook's source (empty when it may run)."""
    found: list[PolicyViolation] = []

    def refuse(line: int, column: int, construct: str, reason: str) -> None:
        found.append(
            PolicyViolation(
                hook=hook, index=index, line=line, column=column, construct=construct, reason=reason
            )
        )

    try:
        tree = ast.parse(code, filename="<hook>", mode="exec")
    except SyntaxError as exc:
        refuse(exc.lineno or 0, exc.offset or 0, "syntax error", str(exc.msg))
        return found
    except (RecursionError, MemoryError) as exc:
        refuse(0, 0, "nesting", f"the code is too deeply nested to parse ({type(exc).__name__})")
        return found
    except (ValueError, OverflowError) as exc:
        refuse(0, 0, "source", f"the code cannot be parsed: {exc}")
        return found
    try:
        _check_module(tree, hook, refuse)
        _check_nodes(tree, refuse)
    except (RecursionError, MemoryError) as exc:  # pragma: no cover - the walk is iterative
        refuse(0, 0, "nesting", f"the code is too deeply nested to check ({type(exc).__name__})")
    _check_terms(code, tree, forbidden_terms, refuse)
    found.sort(key=lambda v: (v.line, v.column))
    return found


_Refuse = Callable[[int, int, str, str], None]
"""Records one violation: line, column, construct, reason."""


def _where(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", -1) + 1


def _check_module(tree: ast.Module, hook: str, refuse: _Refuse) -> None:
    """Exactly one top-level ``def <hook>(ctx, nb):`` (after an optional docstring)."""
    body = list(tree.body)
    if body and _is_docstring(body[0]):
        body = body[1:]
    functions = [node for node in body if isinstance(node, ast.FunctionDef)]
    for node in body:
        if not isinstance(node, ast.FunctionDef):
            refuse(
                *_where(node),
                f"top-level {type(node).__name__}",
                f"the module may hold only `def {hook}(ctx, nb):` (state outside it would "
                "survive between calls; keep state in nb)",
            )
    if len(functions) != 1 or functions[0].name != hook:
        names = ", ".join(f.name for f in functions) or "none"
        refuse(
            1,
            1,
            "module",
            f"define exactly one top-level function named {hook} (found: {names})",
        )
    for function in functions:
        if function.name != hook:
            continue
        arguments = function.args
        plain = [a.arg for a in arguments.posonlyargs + arguments.args]
        if (
            len(plain) != 2
            or arguments.vararg
            or arguments.kwarg
            or arguments.kwonlyargs
            or arguments.defaults
        ):
            refuse(
                *_where(function),
                f"def {hook}({', '.join(plain)})",
                f"the hook's signature must be exactly {hook}(ctx, nb)",
            )


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _check_nodes(tree: ast.Module, refuse: _Refuse) -> None:
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    too_deep = False
    while stack:
        node, depth = stack.pop()
        kind = type(node).__name__
        if depth > MAX_NESTING:
            if not too_deep:
                refuse(*_where(node), "nesting", f"the code nests deeper than {MAX_NESTING} levels")
            too_deep = True
            continue
        if type(node) not in ALLOWED_NODES:
            refuse(*_where(node), _construct(node), _REFUSED.get(kind, f"{kind} is not allowed"))
            continue
        _check_node(node, refuse)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _construct(node: ast.AST) -> str:
    names = {
        "Import": "import",
        "ImportFrom": "from-import",
        "While": "while",
        "Lambda": "lambda",
        "ClassDef": "class",
        "With": "with",
        "Raise": "raise",
        "Assert": "assert",
        "Global": "global",
        "Nonlocal": "nonlocal",
        "Yield": "yield",
        "YieldFrom": "yield from",
        "GeneratorExp": "generator expression",
        "NamedExpr": "walrus :=",
        "TryStar": "except*",
        "Match": "match",
        "MatMult": "@",
    }
    kind = type(node).__name__
    return names.get(kind, kind)


def _check_node(node: ast.AST, refuse: _Refuse) -> None:
    if isinstance(node, ast.Name):
        _check_identifier(node.id, node, refuse, "name")
        reason = FORBIDDEN_NAMES.get(node.id)
        if reason is not None:
            refuse(*_where(node), f"name {node.id}", reason)
    elif isinstance(node, ast.Attribute):
        _check_attribute(node, refuse)
    elif (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Slice)
        and isinstance(node.ctx, ast.Store)
    ):
        refuse(
            *_where(node),
            "slice assignment",
            "assigning to a slice is not allowed (x[:0] = x grows a list in one C call, past "
            "every guard): build a new list, such as x = x[:i] + ys + x[j:]",
        )
    elif isinstance(node, ast.FunctionDef):
        _check_identifier(node.name, node, refuse, "function")
        if node.decorator_list:
            refuse(*_where(node), "decorator", "decorators are not allowed")
    elif isinstance(node, ast.arg):
        _check_identifier(node.arg, node, refuse, "parameter")
    elif isinstance(node, ast.keyword) and node.arg is not None:
        _check_identifier(node.arg, node, refuse, "keyword")
    elif isinstance(node, ast.Try):
        if node.finalbody:
            refuse(
                node.finalbody[0].lineno,
                node.finalbody[0].col_offset + 1,
                "finally",
                "finally is not allowed (it could swallow the budget's stop)",
            )
    elif isinstance(node, ast.ExceptHandler):
        _check_handler(node, refuse)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, str | bytes):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            match = _DUNDER.search(text)
            if match is not None:
                refuse(
                    *_where(node),
                    f"string naming {match.group(0)}",
                    "strings naming dunder attributes are not allowed",
                )
    elif isinstance(node, ast.FormattedValue):
        _check_spec(node, refuse)
    elif isinstance(node, ast.comprehension) and node.is_async:
        refuse(*_where(node.target), "async comprehension", "async code is not allowed")


def _check_identifier(name: str, node: ast.AST, refuse: _Refuse, what: str) -> None:
    if name.startswith("__"):
        refuse(
            *_where(node),
            f"{what} {name}",
            "dunder and private names are not allowed (they lead out of the sandbox)",
        )


def _check_attribute(node: ast.Attribute, refuse: _Refuse) -> None:
    attribute = node.attr
    if attribute.startswith("_"):
        refuse(
            *_where(node),
            f"attribute {attribute}",
            "attributes starting with _ are not allowed (dunder and private attributes lead "
            "out of the sandbox)",
        )
    elif attribute in FORBIDDEN_ATTRIBUTES:
        refuse(*_where(node), f"attribute {attribute}", FORBIDDEN_ATTRIBUTES[attribute])
    elif attribute.startswith(_FORBIDDEN_PREFIXES):
        refuse(
            *_where(node),
            f"attribute {attribute}",
            "frame, traceback, generator and code attributes are not allowed",
        )
    if not isinstance(node.ctx, ast.Load):
        refuse(
            *_where(node),
            f"assignment to attribute {attribute}",
            "attributes are never assigned or deleted: ctx and the helpers are read-only; keep "
            "state in nb",
        )


def _check_handler(node: ast.ExceptHandler, refuse: _Refuse) -> None:
    if node.name is not None:
        _check_identifier(node.name, node, refuse, "name")
    if node.type is None:
        refuse(
            *_where(node),
            "bare except",
            f"name the exceptions you expect ({', '.join(CATCHABLE)}); a bare except would "
            "swallow the budget's stop",
        )
        return
    names = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    for name in names:
        if not isinstance(name, ast.Name) or name.id not in CATCHABLE:
            shown = name.id if isinstance(name, ast.Name) else type(name).__name__
            refuse(
                *_where(name),
                f"except {shown}",
                f"only these exceptions may be caught: {', '.join(CATCHABLE)}",
            )


def _check_spec(node: ast.FormattedValue, refuse: _Refuse) -> None:
    spec = node.format_spec
    if spec is None:
        return
    parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
    text = ""
    for part in parts:
        if not isinstance(part, ast.Constant) or not isinstance(part.value, str):
            refuse(*_where(node), "nested f-string format spec", "format specs must be constant")
            return
        text += part.value
    if _SAFE_SPEC.fullmatch(text) is None:
        refuse(
            *_where(node),
            f"format spec {text!r}",
            "only simple format specs are allowed (width and precision up to 3 digits)",
        )


def _check_terms(code: str, tree: ast.Module, terms: Iterable[str], refuse: _Refuse) -> None:
    """The environment's forbidden terms (answer leakage), in the source as written, in its
    NFKC normal form, and in its decoded string constants. The term itself is not repeated in
    the message: it may be the answer."""
    wanted = [(number, term.casefold()) for number, term in enumerate(terms, 1) if term.strip()]
    if not wanted:
        return
    views = [code.casefold(), unicodedata.normalize("NFKC", code).casefold()]
    constants = [
        (node, node.value.casefold())
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    joined = "".join(text for _, text in constants)
    for number, term in wanted:
        for view in views:
            position = view.find(term)
            if position >= 0:
                line = view.count("\n", 0, position) + 1
                refuse(line, 1, f"forbidden term #{number}", "the code mentions a term the "
                       "environment forbids (answer leakage)")  # fmt: skip
                break
        else:
            for node, text in constants:
                if term in text:
                    refuse(*_where(node), f"forbidden term #{number}", "a string constant "
                           "spells a term the environment forbids (answer leakage)")  # fmt: skip
                    break
            else:
                if term in joined:
                    refuse(1, 1, f"forbidden term #{number}", "the string constants together "
                           "spell a term the environment forbids (answer leakage)")  # fmt: skip
