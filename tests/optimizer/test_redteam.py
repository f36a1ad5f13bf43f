"""Red team: escape attempts, each rejected by the policy or neutralized by the sandbox.

A *rejected* attempt never runs: ``ExecutableHarness.from_patch`` raises ``PatchPolicyError``
naming the construct. A *neutralized* attempt passes the policy (so the sandbox is what stops
it): its call fails as the patch's own failure of the expected kind, or it succeeds without
reaching anything outside its own copy — and either way the host's state and the next call's
world are unchanged.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from envharness.hooks import HookName
from envharness.optimizer import (
    CodeHook,
    ExecutableHarness,
    HarnessPatch,
    LocalSandbox,
    PatchFailure,
    PatchPolicyError,
    Sandbox,
    SandboxLimits,
    SubprocessSandbox,
)
from envharness.optimizer.patches.sandbox import _hookrt

from ._sandboxes import context, hook_code

ANSWER = "ORD-4711-SECRET"
LIMITS = SandboxLimits(timeout_s=2.0, max_lines=20_000)


@dataclass(frozen=True)
class Attempt:
    id: str
    code: str
    """The hook's body, or (starting with ``def``/a module statement) the whole module."""
    rejected: tuple[str, ...] = ()
    """For a rejected attempt: the construct(s) the policy names (any one of them)."""
    kind: str | None = None
    """For a neutralized attempt: the PatchFailure kind, or None when the call succeeds."""
    sandboxes: tuple[str, ...] = ("local", "subprocess")
    limits: SandboxLimits = LIMITS
    cpu_seconds: int = 2
    module: bool = False
    """``code`` is the whole module, not the hook's body."""

    def patch(self, hook: HookName = "on_before_action") -> HarnessPatch:
        code = self.code if self.module else hook_code(self.code, hook)
        return HarnessPatch(hooks=(CodeHook(hook=hook, code=code),))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


SPIN = "for i in range(1000000):\n    for j in range(1000000):\n        pass"

REJECTED = [
    Attempt("subclasses-walk", "return ().__class__.__base__.__subclasses__()",
            ("attribute __class__",)),
    Attempt("str-format-attribute", 'return hint("{0.__class__.__base__}".format(ctx))',
            ("attribute format",)),
    Attempt("str-format-unbound", 'return hint(str.format("{0.__class__}", ctx))',
            ("attribute format",)),
    Attempt("format-map", 'return hint("{a.__class__}".format_map({"a": ctx}))',
            ("attribute format_map",)),
    Attempt("fstring-dunder", 'return hint(f"{ctx.__class__}")', ("attribute __class__",)),
    Attempt("fstring-nested-spec", 'return hint(f"{ctx:{nb}}")',
            ("nested f-string format spec",)),
    Attempt("fstring-width-bomb", 'return hint(f"{1:>999999999}")',
            ("format spec '>999999999'",)),
    Attempt("ctx-dict", "return ctx.__dict__", ("attribute __dict__",)),
    Attempt("ctx-private-fields", "return ctx._fields", ("attribute _fields",)),
    Attempt("helper-private-members", "return math._members", ("attribute _members",)),
    Attempt("generator-frame", "g = (x for x in [1])\nreturn g.gi_frame.f_back",
            ("generator expression", "attribute gi_frame")),
    Attempt("generator-yield", "def gen():\n    yield 1\nreturn gen().gi_frame", ("yield",)),
    Attempt("traceback-frame",
            "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    return e.__traceback__.tb_frame",
            ("attribute __traceback__",)),
    Attempt("code-object", "return on_before_action.__code__", ("attribute __code__",)),
    Attempt("except-star", "try:\n    pass\nexcept* ValueError:\n    pass", ("except*",)),
    Attempt("match-statement", "match ctx:\n    case {'x': y}:\n        return y", ("match",)),
    Attempt("walrus-in-comprehension", "return [(s := ctx.state) for _ in [1]]", ("walrus :=",)),
    Attempt("while-true", "while True:\n    pass", ("while",)),
    Attempt("unicode-dunder-identifier", "return ctx._\uff3fclass\uff3f\uff3f",
            ("attribute __class__",)),  # NFKC: the parser reads it as __class__
    Attempt("escaped-dunder-string", 'return nb["_\\u005fclass__"]', ("string naming __class__",)),
    Attempt("getattr-via-vars", 'return vars(ctx)["_fields"]', ("name vars",)),
    Attempt("getattr", 'return getattr(ctx, "_" + "_class__")', ("name getattr",)),
    Attempt("type-mro", "return type(ctx).mro()", ("name type", "attribute mro")),
    Attempt("object-setattr", 'object.__setattr__(ctx, "step", 9)', ("name object",)),
    Attempt("super", "return super()", ("name super",)),
    Attempt("globals", 'return globals()["math"]', ("name globals",)),
    Attempt("print-exfiltration", "print(ctx.state)", ("name print",)),
    Attempt("open-file", 'return hint(open("/etc/passwd").read())', ("name open",)),
    Attempt("builtins-access", '__builtins__["open"]("/etc/passwd")', ("name __builtins__",)),
    Attempt("dunder-import", '__import__("os").system("id")', ("name __import__",)),
    Attempt("import-statement", 'import os\nos.system("id")', ("import",)),
    Attempt("environment-read", 'return hint(os.environ["OPENAI_API_KEY"])', ("name os",)),
    Attempt("eval", 'return eval("1")', ("name eval",)),
    Attempt("compile-exec", 'exec(compile("x = 1", "f", "exec"))', ("name exec", "name compile")),
    Attempt("lambda", "f = lambda: 1\nreturn f()", ("lambda",)),
    Attempt("class", "class A:\n    pass", ("class",)),
    Attempt("async-def", "async def f():\n    pass", ("AsyncFunctionDef",)),
    Attempt("decorator", "@math.floor\ndef f():\n    pass", ("decorator",)),
    Attempt("module-level-state", "CACHE = []\n" + hook_code("CACHE.append(1)"),
            ("top-level Assign",), module=True),
    Attempt("default-argument-state",
            "def on_before_action(ctx, nb, cache=[]):\n    cache.append(1)",
            ("def on_before_action(ctx, nb, cache)",), module=True),
    Attempt("mutate-math-pi", "math.pi = 3", ("assignment to attribute pi",)),
    Attempt("replace-re-match", "re.match = None", ("assignment to attribute match",)),
    Attempt("mutate-helper-function", "json.dumps.cache = {}", ("assignment to attribute cache",)),
    Attempt("bare-except-swallows-budget", f"try:\n{_indent(SPIN)}\nexcept:\n"
            "    return hint('swallowed')", ("bare except",)),
    Attempt("except-baseexception", "try:\n    pass\nexcept BaseException:\n    pass",
            ("except BaseException", "name BaseException")),
    Attempt("except-exception", "try:\n    pass\nexcept Exception:\n    pass",
            ("except Exception", "name Exception")),
    Attempt("finally-swallows-budget", "try:\n    pass\nfinally:\n    return hint('swallowed')",
            ("finally",)),
    Attempt("raise", "raise ValueError('x')", ("raise",)),
    Attempt("answer-leak", f"return hint('the order is {ANSWER.lower()}')",
            ("forbidden term #1",)),
    Attempt("answer-leak-split", "return hint('ORD-4711' + '-SECRET')", ("forbidden term #1",)),
    Attempt("parse-bomb", "return " + "-" * 100_000 + "1", ("nesting", "syntax error")),
    # Padding runs in C to whatever width the hook asks: seconds and gigabytes in one call.
    Attempt("padding-width-bomb", 'x = "a".ljust(10**10)', ("attribute ljust",)),
    Attempt("zfill-width-bomb", 'return hint("1".zfill(10**10))', ("attribute zfill",)),
    # x[:0] = x doubles a list in one C call per line, past every guard.
    Attempt("slice-assignment-doubling", "x = [0]\nfor i in range(40):\n    x[:0] = x",
            ("slice assignment",)),
]  # fmt: skip


NEUTRALIZED = [
    Attempt("huge-power", "return hint(str(10**10**10))", kind="exception"),
    Attempt("string-memory-bomb", 'x = "a" * 10**10', kind="exception"),
    Attempt("list-memory-bomb", "x = [0] * 10**8", kind="exception"),
    Attempt("shift-bomb", "x = 1 << 10**9", kind="exception"),
    Attempt("augmented-power-bomb", "x = 10\nx **= 10**9", kind="exception"),
    Attempt("max-of-huge-range", "return hint(str(max(range(10**9))))", kind="exception"),
    Attempt("int-from-huge-string", 'return hint(str(int("9" * 5000)))', kind="exception"),
    Attempt("infinite-iterator", "return hint(str(max(iter(int, 1))))", kind="exception"),
    Attempt("infinite-recursion", "def down(n):\n    return down(n + 1)\nreturn down(0)",
            kind="recursion"),
    Attempt("for-over-huge-range", SPIN, kind="lines"),
    Attempt("catch-the-budget", "def spin():\n" + _indent(SPIN) + "\ntry:\n    spin()\n"
            "except (ArithmeticError, AttributeError, IndexError, KeyError, LookupError, "
            "OverflowError, TypeError, ValueError, ZeroDivisionError):\n"
            "    return hint('caught')", kind="lines"),
    Attempt("catastrophic-regex", 'return re.match("(a+)+$", "a" * 40 + "b")', kind="cpu",
            sandboxes=("subprocess",), limits=SandboxLimits(timeout_s=60.0), cpu_seconds=1),
    # A backtracking match holds the GIL: in-process it would freeze the host for ever (issue
    # 18). LocalSandbox hands it to a regex worker it kills at the deadline.
    Attempt("catastrophic-regex-wall-clock", 'return re.match("(a+)+$", "a" * 40 + "b")',
            kind="timeout", limits=SandboxLimits(timeout_s=0.3)),
    Attempt("catastrophic-compiled-regex",
            'p = re.compile("(x+x+)+y")\nreturn hint(str(p.findall("x" * 40)))',
            kind="timeout", limits=SandboxLimits(timeout_s=0.1)),
    Attempt("catastrophic-regex-caught", "try:\n    re.search('(a|aa)*c', 'a' * 60)\n"
            "except (ArithmeticError, AttributeError, IndexError, KeyError, LookupError, "
            "OverflowError, TypeError, ValueError, ZeroDivisionError):\n"
            "    return hint('caught')", kind="timeout", limits=SandboxLimits(timeout_s=0.1)),
    # Quadratic, exponential-in-lines or width-driven C work, each refused before it starts.
    Attempt("quadratic-sum-of-lists", "return hint(str(len(sum([[0] * 1000] * 100000, []))))",
            kind="exception"),
    Attempt("printf-width-bomb", 'return hint("%*d" % (10**10, 1))', kind="exception"),
    Attempt("doubling-then-sort", "x = list(range(10**6))\nfor i in range(8):\n"
            "    x = x + x\nreturn hint(str(len(sorted(x))))", kind="exception"),
    Attempt("aliased-repeat-then-compare",
            "a = [[0] * 10**6] * 10**6\nb = [[0] * 10**6] * 10**6\nreturn hint(str(a == b))",
            kind="exception"),
    Attempt("memory-bomb-past-the-guards",
            'x = "a" * 999999\nx = "".join([x for i in range(300)])', kind="exception"),
    # LocalSandbox has no memory limit: what guards and copies build counts against the call's
    # allocation budget instead, and a comprehension keeping a large value per line hits it.
    Attempt("comprehension-memory-bomb", "x = [[0] * 999999 for _ in range(999999)]",
            kind="memory"),
    Attempt("kept-copies-memory-bomb",
            's = "a" * 999999\nkept = [s.upper() for _ in range(100)]', kind="memory"),
    Attempt("kept-slices-memory-bomb",
            "x = [0] * 10**6\nkept = [x[1:] for _ in range(100)]", kind="memory"),
    # Values built up over many cheap lines, each under the guards, then handed to one C call
    # that visits all of it (issue 18): growth is refused as it happens, and a comparison, sort,
    # print or hash measures what it would visit first. Sizes here are small (a few million
    # items: the unguarded runtime finishes them quickly, so each fails without its guard).
    Attempt("extend-doubling-then-sort", "x = list(range(1000))\nfor i in range(10):\n"
            "    x.extend(x)\nreturn hint(str(len(sorted(x))))", kind="exception"),
    Attempt("unpacking-doubling", "x = list(range(1000))\nfor i in range(10):\n"
            "    x = [*x, *x]\nreturn hint(str(len(x)))", kind="exception"),
    Attempt("unpacking-call-arguments", "x = list(range(1000))\n"
            "return hint(str(max(*x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x, *x) + len(x)))",
            kind=None),  # small: unpacking into a call still works
    Attempt("self-nesting-then-compare", "a = [0]\nb = [0]\nfor i in range(21):\n"
            "    a = [a, a]\n    b = [b, b]\nreturn hint(str(a == b))", kind="exception"),
    Attempt("self-nesting-then-repr", "x = [0]\nfor i in range(21):\n    x = [x, x]\n"
            "return hint(str(len(repr(x))))", kind="exception"),
    Attempt("self-nesting-in-fstring", "x = [0]\nfor i in range(21):\n    x = [x, x]\n"
            "return hint(f'{x}'[:10])", kind="exception"),
    Attempt("self-nesting-then-min", "a = [0]\nb = [0]\nfor i in range(21):\n"
            "    a = [a, a]\n    b = [b, b]\nreturn hint(str(len(min([a, b]))))", kind="exception"),
    Attempt("self-nesting-searched", "a = [0]\nb = [0]\nfor i in range(21):\n"
            "    a = [a, a]\n    b = [b, b]\nreturn hint(str(a in [b]))", kind="exception"),
    Attempt("self-nesting-key-through-unbound-get", "t = (0,)\nfor i in range(21):\n"
            "    t = (t, t)\nreturn hint(str(dict.get({}, t)))", kind="exception"),
    Attempt("self-nesting-tuple-as-key", "t = (0,)\nfor i in range(21):\n    t = (t, t)\n"
            "return hint(str(len({t: 1})))", kind="exception"),
    Attempt("zip-nesting-then-sort", "x = list(range(4))\nfor i in range(20):\n"
            "    x = list(zip(x, x))\nreturn hint(str(len(sorted(x))))", kind="exception"),
    # One C call, small inputs, no bound: ints hash modulo 2**61 - 1, so a stepped range is all
    # one hash; round(n, -k) computes 10**k; join and replace write as much as they are asked.
    Attempt("hash-collisions-in-one-call",
            "P = 2**61 - 1\nreturn hint(str(len(set(range(0, 3000 * P, P)))))", kind="exception"),
    Attempt("hash-collisions-through-fromkeys",
            "P = 2**61 - 1\nreturn hint(str(len(dict.fromkeys(range(0, 3000 * P, P)))))",
            kind="exception"),
    Attempt("round-power-of-ten", "return hint(str(round(5, -10**5)))", kind="exception"),
    Attempt("join-separator-bomb", 'return hint(str(len(("a" * 10**4).join([""] * 1000))))',
            kind="exception"),
    Attempt("replace-growth", 'return hint(str(len(("a" * 3000).replace("a", "b" * 1000))))',
            kind="exception"),
    Attempt("fstring-growth", 'x = "a" * 999999\nreturn hint(f"{x}{x}{x}"[:5])', kind="exception"),
    Attempt("huge-int-from-bytes", 'a = int.from_bytes(b"\\xff" * 10000, "big")\n'
            "return hint(str(a // 3 > 0))", kind="exception"),
    # Rebinding isinstance does not hand the hook the real types behind the guarded ones.
    Attempt("real-types-through-isinstance", "def isinstance(value, kind):\n    return kind\n"
            "P = 2**61 - 1\nreal = isinstance(1, set)\n"
            "return hint(str(len(real(range(0, 3000 * P, P)))))", kind="exception"),
    Attempt("lone-surrogate-effect", "return hint('\\ud800')", kind="result"),
    Attempt("non-json-notebook", "nb['x'] = {1, 2}", kind="notebook"),
    Attempt("helper-into-notebook", "nb['x'] = math", kind="notebook"),
    Attempt("oversized-notebook", "nb['x'] = 'a' * 100000", kind="notebook"),
    Attempt("oversized-effect", "return hint('a' * 999999)", kind="result"),
    Attempt("mutate-ctx", "ctx.state['looked_up'] = True", kind="exception"),
    Attempt("mutate-helper-namespace", "dict.update(math, {'pi': 3})", kind="exception"),
    Attempt("mutate-ctx-through-dict-methods",
            "dict.update(ctx.state, {'looked_up': True})\nreturn hint(str(ctx.state))",
            kind=None),  # only this call's copy changes: the host's ctx and the next call's do not
    Attempt("rebind-builtins-locally", "len = max\nrange = min\nreturn hint(str(len([1, 5])))",
            kind=None),  # a local name in this call only
    Attempt("inadmissible-rewrite", "return rewrite({'tool': 'drop_database'})",
            kind="inadmissible"),
    # One list held thousands of times costs a pointer each; converting it to JSON used to copy
    # every element in the runtime's own untraced code (unbounded time and memory in-process).
    Attempt("aliased-list-through-json-dumps",
            "return hint(str(len(json.dumps([[0] * 1000] * 500))))", kind="exception"),
    Attempt("aliased-list-into-notebook", "nb['x'] = [[0] * 1000] * 500", kind="notebook"),
    Attempt("aliased-list-rewrite", "return rewrite([[0] * 1000] * 500)", kind="result"),
    # Python refuses to write integers over 4,300 digits as text: the sandbox's own encoding used
    # to fail there, and the patch's failure passed for the sandbox's (infrastructure, no blame).
    Attempt("blame-dodging-int-in-notebook", "nb['x'] = 10**4400", kind="notebook"),
    Attempt("blame-dodging-int-in-rewrite", "return rewrite({'n': 10**4400})", kind="result"),
]  # fmt: skip


def test_the_corpus_is_big_enough() -> None:
    assert len(REJECTED) + len(NEUTRALIZED) >= 30
    ids = [a.id for a in REJECTED + NEUTRALIZED]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("attempt", REJECTED, ids=lambda a: a.id)
def test_rejected_by_the_policy(attempt: Attempt) -> None:
    with pytest.raises(PatchPolicyError) as caught:
        ExecutableHarness.from_patch(
            attempt.patch(), sandbox=LocalSandbox(), forbidden_terms=[ANSWER]
        )
    constructs = [v.construct for v in caught.value.violations]  # type: ignore[attr-defined]
    assert set(attempt.rejected) & set(constructs), constructs
    assert any(f"construct: {c}" in str(caught.value) or f": {c}:" in str(caught.value)
               for c in attempt.rejected)  # fmt: skip


def host_state() -> Any:
    return (
        math.pi,
        re.match,
        json.dumps,
        builtins.open,
        builtins.__import__,
        len(vars(builtins)),
        dict(os.environ),
        dict(_hookrt.SAFE_BUILTINS),
        repr(_hookrt.MATH),
        _hookrt.MATH.pi,
        _hookrt.regex_op,
        _hookrt.REGEX_FAST_STEPS,
    )


@asynccontextmanager
async def opened(kind: str, attempt: Attempt) -> AsyncIterator[Sandbox]:
    if kind == "local":
        yield LocalSandbox(attempt.limits)
    else:
        async with SubprocessSandbox(
            attempt.limits,
            cpu_seconds=attempt.cpu_seconds,
            memory_bytes=256 * 1024 * 1024,
            kill_grace_s=0.3,
        ) as sandbox:
            yield sandbox


PROBE = HarnessPatch(
    hooks=(
        CodeHook(
            hook="on_before_action",
            code=hook_code(
                'return hint(f\'{math.pi} {re.match("a", "a") is not None} \''
                "f'{len(range(3))} {ctx.state[\"looked_up\"]} {sorted(nb)}')"
            ),
        ),
    )
)


@pytest.mark.anyio
@pytest.mark.parametrize("attempt", NEUTRALIZED, ids=lambda a: a.id)
async def test_neutralized_by_the_sandbox(attempt: Attempt, anyio_backend: str) -> None:
    before = host_state()
    for kind in attempt.sandboxes:
        async with opened(kind, attempt) as sandbox:
            harness = ExecutableHarness.from_patch(attempt.patch(), sandbox=sandbox)  # passes
            ctx = context(admissible=[{"tool": "lookup_order"}, {"tool": "reply"}])
            frozen = msgspec.json.encode(ctx)
            notebook = {"kept": 1}
            if attempt.kind is None:
                effect, _ = await harness.call("on_before_action", ctx, notebook)
                assert effect is not None, kind
            else:
                with pytest.raises(PatchFailure) as caught:
                    await harness.call("on_before_action", ctx, notebook)
                assert caught.value.kind == attempt.kind, (kind, caught.value)
                assert caught.value.cause == "patch"
            assert msgspec.json.encode(ctx) == frozen  # the host's context is untouched
            assert notebook == {"kept": 1}  # and so is the host's notebook
            # The next call (the next episode) finds the world as it was.
            probe = ExecutableHarness.from_patch(PROBE, sandbox=sandbox)
            effect, _ = await probe.call("on_before_action", context(), {"kept": 1})
            assert effect is not None
            assert effect.text == f"{math.pi} True 3 False ['kept']", kind  # type: ignore[union-attr]
    assert host_state() == before
