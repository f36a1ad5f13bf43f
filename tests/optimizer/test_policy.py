"""The AST policy: an allow-list of syntax, and errors naming construct, hook and line."""

from __future__ import annotations

import ast

import pytest

from envharness.optimizer import CodeHook, HarnessPatch, PatchPolicyError, check_patch
from envharness.optimizer.patches import policy as policy_module
from envharness.optimizer.patches.policy import ALLOWED_NODES, PolicyViolation, check_code

from ._sandboxes import hook_code

GOOD = '''
def on_before_action(ctx, nb):
    """Refunds need a lookup first."""
    action = ctx.action if isinstance(ctx.action, dict) else {}
    seen = nb.get("seen", [])
    if action.get("tool") == "issue_refund" and not ctx.predicates.get("looked_up"):
        nb["blocked"] = nb.get("blocked", 0) + 1
        return block_and_prompt(f"look the order up first ({len(seen)} seen)")
    def tools(history):
        return [step.action.get("tool") for step in history if isinstance(step.action, dict)]
    names = {name: True for name in tools(ctx.history)}
    try:
        count = int(ctx.state.get("count", "0"))
    except (ValueError, TypeError) as problem:
        count = 0
    for index, name in enumerate(sorted(names)):
        if index > 3:
            break
    total: int = count * 2 ** 3
    total += 1
    del nb["blocked"]
    if re.search(r"refund", json.dumps(action)) and math.isfinite(1.0):
        return rewrite({"tool": "lookup_order"}, reason="look up first")
    return hint(f"{total:>5} {action!r}") if total > 100 else None
'''


def violations(code: str, hook: str = "on_before_action", **kwargs: object) -> list[str]:
    return [v.construct for v in check_code(hook, code, **kwargs)]  # type: ignore[arg-type]


def test_ordinary_hook_code_passes() -> None:
    assert check_code("on_before_action", GOOD) == []
    check_patch(HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=GOOD),)))


@pytest.mark.parametrize(
    ("body", "construct"),
    [
        pytest.param("import os", "import", id="import"),
        pytest.param("from os import path", "from-import", id="from-import"),
        pytest.param("while True:\n    pass", "while", id="while"),
        pytest.param("f = lambda: 1", "lambda", id="lambda"),
        pytest.param("class A:\n    pass", "class", id="class"),
        pytest.param("async def f():\n    pass", "AsyncFunctionDef", id="async-def"),
        pytest.param("with x:\n    pass", "with", id="with"),
        pytest.param("raise ValueError()", "raise", id="raise"),
        pytest.param("assert ctx", "assert", id="assert"),
        pytest.param("global x", "global", id="global"),
        pytest.param("def g():\n    nonlocal x", "nonlocal", id="nonlocal"),
        pytest.param("def g():\n    yield 1", "yield", id="yield"),
        pytest.param("return any(x for x in [1])", "generator expression", id="genexp"),
        pytest.param("if (n := 1):\n    pass", "walrus :=", id="walrus"),
        pytest.param("try:\n    pass\nexcept* ValueError:\n    pass", "except*", id="except-star"),
        pytest.param("match ctx:\n    case _:\n        pass", "match", id="match"),
        pytest.param("return ctx @ nb", "@", id="matmul"),
        pytest.param("return eval('1')", "name eval", id="eval"),
        pytest.param("return open('/etc/passwd')", "name open", id="open"),
        pytest.param("return getattr(ctx, 'x')", "name getattr", id="getattr"),
        pytest.param("return type(ctx)", "name type", id="type"),
        pytest.param("return vars(ctx)", "name vars", id="vars"),
        pytest.param("print(ctx)", "name print", id="print"),
        pytest.param("return os.system('x')", "name os", id="os-name"),
        pytest.param("return ctx.__class__", "attribute __class__", id="dunder-attribute"),
        pytest.param("return ctx._fields", "attribute _fields", id="private-attribute"),
        pytest.param("return __builtins__", "name __builtins__", id="dunder-name"),
        pytest.param("return '{0}'.format(1)", "attribute format", id="str-format"),
        pytest.param("return '{a}'.format_map(nb)", "attribute format_map", id="format-map"),
        pytest.param("return ctx.mro", "attribute mro", id="mro"),
        pytest.param("return ctx.gi_frame", "attribute gi_frame", id="gi-prefix"),
        pytest.param("return ctx.f_back", "attribute f_back", id="f-prefix"),
        pytest.param("return ctx.tb_next", "attribute tb_next", id="tb-prefix"),
        pytest.param("return ctx.cr_frame", "attribute cr_frame", id="cr-prefix"),
        pytest.param("math.pi = 3", "assignment to attribute pi", id="attribute-store"),
        pytest.param("del ctx.state", "assignment to attribute state", id="attribute-delete"),
        pytest.param("try:\n    pass\nexcept:\n    pass", "bare except", id="bare-except"),
        pytest.param("try:\n    pass\nexcept Exception:\n    pass", "except Exception", id="broad"),
        pytest.param(
            "try:\n    pass\nexcept BaseException:\n    pass", "except BaseException", id="base"
        ),
        pytest.param("try:\n    pass\nfinally:\n    return 1", "finally", id="finally"),
        pytest.param("return 'x.__class__'", "string naming __class__", id="dunder-string"),
        pytest.param("return f'{nb:{ctx}}'", "nested f-string format spec", id="nested-spec"),
        pytest.param("return f'{1:>100000}'", "format spec '>100000'", id="wide-spec"),
        pytest.param("@dec\ndef g():\n    pass", "decorator", id="decorator"),
    ],
)
def test_refused_constructs_are_named(body: str, construct: str) -> None:
    found = check_code("on_before_action", hook_code(body))
    assert construct in [v.construct for v in found], found


def test_the_error_names_hook_line_and_construct() -> None:
    code = hook_code("x = 1\nimport os\nreturn x")
    patch = HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=code),))
    with pytest.raises(PatchPolicyError) as caught:
        check_patch(patch)
    message = str(caught.value)
    assert "1 problem" in message
    assert "on_before_action (code hook 0), line 3: import: import is not allowed" in message
    [violation] = caught.value.violations
    assert isinstance(violation, PolicyViolation)
    assert (violation.line, violation.construct) == (3, "import")


def test_every_violation_is_listed() -> None:
    code = hook_code("import os\nwhile True:\n    pass\nreturn ctx.__class__")
    with pytest.raises(PatchPolicyError, match="3 problems") as caught:
        check_patch(HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=code),)))
    assert [v.line for v in caught.value.violations] == [2, 3, 5]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("code", "construct"),
    [
        pytest.param("x = 1\n" + hook_code("return x"), "top-level Assign", id="module-state"),
        pytest.param(hook_code("return None", "on_init"), "module", id="wrong-name"),
        pytest.param(hook_code("return 1") + "\n" + hook_code("return 2"), "module", id="two"),
        pytest.param(
            "def on_before_action(ctx):\n    return None",
            "def on_before_action(ctx)",
            id="one-parameter",
        ),
        pytest.param(
            "def on_before_action(ctx, nb, cache=[]):\n    return None",
            "def on_before_action(ctx, nb, cache)",
            id="default-state",
        ),
        pytest.param(
            "def on_before_action(ctx, *nb):\n    return None",
            "def on_before_action(ctx)",
            id="varargs",
        ),
        pytest.param("def on_before_action(ctx, nb:\n", "syntax error", id="syntax"),
    ],
)
def test_the_module_holds_exactly_the_hook_function(code: str, construct: str) -> None:
    assert construct in violations(code)


def test_a_docstring_may_precede_the_function() -> None:
    assert violations('"""why"""\n' + hook_code("return None")) == []


def test_unknown_syntax_is_refused_by_the_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node type nobody allowed — as new Python syntax would be — is refused."""

    class FutureSyntax(ast.expr):
        _fields = ()

    real_parse = ast.parse

    def parse(source: str, *args: object, **kwargs: object) -> ast.Module:
        tree = real_parse(source, *args, **kwargs)  # type: ignore[call-overload]
        function = tree.body[0]
        node = FutureSyntax(lineno=2, col_offset=4)
        function.body.insert(0, ast.Expr(value=node, lineno=2, col_offset=4))
        return tree  # type: ignore[no-any-return]

    monkeypatch.setattr(policy_module.ast, "parse", parse)
    assert "FutureSyntax" in violations(hook_code("return None"))
    assert FutureSyntax not in ALLOWED_NODES
    assert not {ast.Match, ast.TryStar, ast.While, ast.NamedExpr} & ALLOWED_NODES


def test_recursion_while_parsing_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(*args: object, **kwargs: object) -> ast.Module:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(policy_module.ast, "parse", parse)
    [violation] = check_code("on_init", "whatever")
    assert violation.construct == "nesting"
    assert "RecursionError" in violation.reason


def test_memory_error_while_parsing_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(*args: object, **kwargs: object) -> ast.Module:
        raise MemoryError

    monkeypatch.setattr(policy_module.ast, "parse", parse)
    assert violations("whatever", "on_init") == ["nesting"]


def test_absurdly_nested_code_is_refused() -> None:
    deep = hook_code("return " + "-" * 100_000 + "1")
    assert violations(deep) in (["nesting"], ["syntax error"])
    chained = hook_code("return 1" + " + 1" * 300)
    assert "nesting" in violations(chained)


def test_forbidden_terms_are_refused_without_repeating_them() -> None:
    terms = ["ORD-4711"]
    for body in (
        "return hint('the order is ORD-4711')",
        "return hint('the order is ord-4711')",  # case does not matter
        "return hint('ORD-' + '4711')",  # split over constants
        "return hint('\\x4fRD-4711')",  # escaped in the source
        "return hint('\uff2f\uff32\uff24-4711')",  # fullwidth letters normalise (NFKC)
    ):
        found = check_code("on_before_action", hook_code(body), forbidden_terms=terms)
        assert [v.construct for v in found] == ["forbidden term #1"], body
        assert "4711" not in str(found[0])
    assert check_code("on_before_action", hook_code("return None"), forbidden_terms=terms) == []
    assert check_code("on_before_action", hook_code("return None"), forbidden_terms=[" "]) == []


def test_check_patch_refuses_what_is_not_a_patch() -> None:
    with pytest.raises(TypeError, match="HarnessPatch"):
        check_patch({"ops": []})  # type: ignore[arg-type]


def test_slice_assignment_is_refused_but_slices_are_read_and_deleted() -> None:
    """``x[:0] = x`` doubles a list in one C call per line, past every guard."""
    found = check_code("on_before_action", hook_code("x = [1, 2]\nx[:0] = x\nx[1:] += [3]"))
    assert [v.construct for v in found] == ["slice assignment", "slice assignment"]
    assert "build a new list" in found[0].reason
    assert check_code("on_before_action", hook_code("x = [1, 2, 3]\ny = x[1:]\ndel x[:1]")) == []
