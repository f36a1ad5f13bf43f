"""The guards on C-level work: each class of one call into C that could hold the interpreter
(and so, in ``LocalSandbox``, the whole host) for longer than any budget, refused before it
starts. Each test uses small inputs: the refusal comes from the size or kind of the operands,
never from running the work."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from envharness.optimizer import LocalSandbox, PatchFailure, PatchPolicyError, SandboxLimits
from envharness.optimizer.patches.policy import check_patch
from envharness.optimizer.patches.sandbox import _hookrt

from ._sandboxes import ctx_json, patch_of, program_of


@pytest.fixture(scope="module")
def sandbox() -> Any:
    opened = LocalSandbox()
    yield opened
    opened.close()


def effect_text(sandbox: LocalSandbox, body: str) -> str:
    outcome = sandbox.run_sync(program_of(body), "on_before_action", ctx_json(), {})
    assert outcome.effect is not None
    return str(outcome.effect["text"])


def problem(sandbox: LocalSandbox, body: str) -> str:
    with pytest.raises(PatchFailure) as caught:
        sandbox.run_sync(program_of(body), "on_before_action", ctx_json(), {})
    assert caught.value.kind == "exception"
    return caught.value.problem


# -- sum: quadratic on sequences ---------------------------------------------------------------


def test_sum_adds_numbers(sandbox: LocalSandbox) -> None:
    assert effect_text(sandbox, "return hint(str(sum([1, 2.5]) + sum([], 3)))") == "6.5"


@pytest.mark.parametrize("call", ["sum([[1], [2]], [])", "sum([(1,), (2,)], ())", "sum([], '')"])
def test_sum_of_sequences_is_refused(sandbox: LocalSandbox, call: str) -> None:
    """``sum(lists, [])`` copies the running total at every step: 10**5 lists of 1,000 items
    are minutes in one C call."""
    assert "sum adds numbers in hooks" in problem(sandbox, f"return hint(str({call}))")


# -- printf-style formatting: a width the hook picks -------------------------------------------


def test_printf_formatting_is_refused_and_modulo_still_works(sandbox: LocalSandbox) -> None:
    assert "printf-style formatting" in problem(sandbox, 'return hint("%*d" % (10**10, 1))')
    assert "printf-style formatting" in problem(sandbox, 'fmt = "%5d"\nfmt %= 3')
    assert effect_text(sandbox, "x = 17\nx %= 5\nreturn hint(f'{17 % 5} {x} {-7 % 3}')") == "2 2 2"


@pytest.mark.parametrize("method", ["ljust", "rjust", "center", "zfill", "expandtabs"])
def test_padding_methods_are_refused_by_the_policy(method: str) -> None:
    with pytest.raises(PatchPolicyError) as caught:
        check_patch(patch_of(f'return hint("1".{method}(10**10))'))
    assert f"attribute {method}" in str(caught.value)
    assert "use an f-string" in str(caught.value)


# -- + and +=: doubling a sequence line after line ---------------------------------------------


def test_joining_past_the_sequence_limit_is_refused(sandbox: LocalSandbox) -> None:
    """Seven doublings of a million-item list are 1.3e8 items; sorting them is minutes in C."""
    half = _hookrt.MAX_SEQUENCE // 2 + 1
    assert "too large" in problem(sandbox, f"x = [0] * {half}\ny = x + x")
    assert "too large" in problem(sandbox, f"x = 'a' * {half}\nx += x")
    assert "too large" in problem(sandbox, f"x = (0,) * {half}\nx = x + x")


def test_plus_is_unchanged_below_the_limit(sandbox: LocalSandbox) -> None:
    body = """
    a = [1]
    b = a
    a += [2]
    t = (1,) + (2,)
    s = "x"
    s += "y"
    return hint(f"{b} {a + [3]} {t} {s} {1 + 2.5} {ctx.state['looked_up'] + 1}")
    """
    assert effect_text(sandbox, body) == "[1, 2] [1, 2, 3] (1, 2) xy 3.5 1"  # += stays in place


# -- *: one value repeated until C code visits it 10**12 times ---------------------------------


def test_repeating_a_big_value_is_refused(sandbox: LocalSandbox) -> None:
    """A million pointers to one million-item list build in milliseconds, but comparing two such
    lists visits 10**12 items in one C call."""
    assert "too large" in problem(sandbox, "a = [[0] * 10**6] * 10**6")
    assert "too large" in problem(sandbox, 'a = ["x" * 1000] * 10000')
    assert "too large" in problem(sandbox, "a = 10**6 * [(0,) * 10]")


def test_repeating_small_values_is_unchanged(sandbox: LocalSandbox) -> None:
    body = (
        "a = [[0] * 10] * 10\nb = [0] * 10**6\nc = 'ab' * 3\nreturn hint(f'{len(a)} {len(b)} {c}')"
    )
    assert effect_text(sandbox, body) == "10 1000000 ababab"


def test_measuring_a_repeat_stops_at_its_limit() -> None:
    """The measure itself must not do the unbounded walk it guards against."""
    visited = 0

    class Counting(list[Any]):
        def __iter__(self) -> Any:
            nonlocal visited
            for item in super().__iter__():
                visited += 1
                yield item

    inner = Counting([0] * 1000)
    assert _hookrt._expanded([inner] * 1000, 50) > 50
    assert visited <= 51


# -- int from text: quadratic in C, and the host's limit is LocalSandbox's ---------------------


def test_int_reads_at_most_4300_characters_whatever_the_host_allows(sandbox: LocalSandbox) -> None:
    """A host that lifted Python's limit (``sys.set_int_max_str_digits(0)``) lifts it for
    in-process hooks too; reading a million digits is then seconds in one C call."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert "over the hook limit of 4300" in problem(sandbox, 'x = int("9" * 4301)')
        assert "over the hook limit of 4300" in problem(sandbox, 'x = json.loads("9" * 4301)')
    finally:
        sys.set_int_max_str_digits(before)


def test_int_still_reads_like_int(sandbox: LocalSandbox) -> None:
    body = """
    kinds = [isinstance(3, int), isinstance(True, int), isinstance("3", int)]
    kinds.append(isinstance(2, (str, int)))
    values = [int("12"), int("ff", 16), int(2.7), int(), sorted(["10", "9"], key=int)]
    raw = int.from_bytes(b"\\x01\\x00", "big")
    return hint(f"{kinds} {values} {raw} {json.loads('[12]')}")
    """
    text = effect_text(sandbox, body)
    assert text == "[True, True, False, True] [12, 255, 2, 0, ['9', '10']] 256 [12]"


# -- values built over many lines: measured before C visits them -------------------------------


def test_measuring_counts_what_c_visits_and_stops_at_its_limit() -> None:
    """A value held twice is counted twice (C visits it twice), but measured once: forty
    self-doublings are 2**40 items to C and forty containers to the measure."""
    nested: Any = [0]
    for _ in range(40):
        nested = [nested, nested]
    assert _hookrt._visits(nested, 10**6) == 10**6 + 1
    # [0, 1] and its two items, the tuple, "ab" (two characters), the dict, "k", "xyz"
    assert _hookrt._visits([[0, 1], ("ab", {"k": "xyz"})], 100) == 1 + 2 + 1 + 2 + 1 + 1 + 3
    assert _hookrt._visits(list(range(10**5)), 10**6) == 10**5
    holds_itself: list[Any] = [0]
    holds_itself.append(holds_itself)
    assert _hookrt._visits(holds_itself, 100) == 101


def test_the_guarded_builtins_still_read_like_python(sandbox: LocalSandbox) -> None:
    body = """
    words = ["b", "a", "c", "a"]
    pairs = [(2, "x"), (1, "y"), (2, "a")]
    order = sorted(pairs, key=str, reverse=True)
    kept = list(words)
    kept.sort(key=len, reverse=True)
    extremes = [min(3, 1, 2), max(words), min([], default=0), max(pairs, key=len)]
    kinds = [isinstance({}, dict), isinstance("a", (int, str)), isinstance(set(), frozenset)]
    made = [sorted(set(words)), frozenset("ab") == frozenset("ba"), dict([("k", 1)], j=2)]
    made.append(dict.fromkeys(["p", "q"], 0))
    joined = [str.join("-", words), "+".join(words), "aab".replace("a", "xy", 1)]
    unpacked = [[*words[:2], 9], (*words[:1],), {*words} == set(words), max(*[4, 5])]
    merged = {**{"a": 1}, **{"b": 2}}
    chained = 1 < len(words) <= 4 != 5
    return hint(f"{order} {kept} {extremes} {kinds} {made} {joined} {unpacked} "
                f"{merged} {chained} {repr('q')} {str(7)} {words.index('c')} {words.count('a')}")
    """
    assert effect_text(sandbox, body) == (
        "[(2, 'x'), (2, 'a'), (1, 'y')] ['b', 'a', 'c', 'a'] [1, 'c', 0, (2, 'x')] "
        "[True, True, False] [['a', 'b', 'c'], True, {'k': 1, 'j': 2}, {'p': 0, 'q': 0}] "
        "['b-a-c-a', 'b+a+c+a', 'xyab'] [['b', 'a', 9], ('b',), True, 5] "
        "{'a': 1, 'b': 2} True 'q' 7 2 2"
    )


def test_many_copies_of_one_value_are_not_a_collision(sandbox: LocalSandbox) -> None:
    body = "return hint(f'{len(set([1] * 5000 + [2] * 5000))} {len(frozenset(range(5000)))}')"
    assert effect_text(sandbox, body) == "2 5000"


def test_growth_is_refused_as_it_happens(sandbox: LocalSandbox) -> None:
    assert "extended list" in problem(sandbox, "x = [0] * 600000\nx.extend(x)")
    assert "extended list" in problem(sandbox, "x = [0] * 600000\nlist.extend(x, x)")
    assert "unpacked list" in problem(sandbox, "x = [0] * 600000\ny = [*x, *x]")
    assert "unpacked set" in problem(sandbox, "x = list(range(600000))\ny = {*x, *x}")
    assert "translated text" in problem(sandbox, "x = ('a' * 1000).translate({97: 'b' * 1001})")


def test_a_hook_rebinding_a_type_name_gets_the_guarded_type(sandbox: LocalSandbox) -> None:
    """``isinstance(x, dict)`` is compiled against the real type only when the hook binds
    neither name; a hook that does gets the guarded stand-ins it would get anyway."""
    body = "dict = set\nreturn hint(f'{isinstance(set(), dict)} {dict}')"
    assert effect_text(sandbox, body) == "True <class 'set'>"


# -- the allocation budget: LocalSandbox's stand-in for a memory limit -------------------------


def test_large_values_built_count_against_the_budget_and_the_stop_cannot_be_caught(
    sandbox: LocalSandbox,
) -> None:
    body = """
    x = [0] * 100000
    try:
        kept = [list(x) for _ in range(1000)]
    except (ArithmeticError, AttributeError, IndexError, KeyError, LookupError, OverflowError,
            TypeError, ValueError, ZeroDivisionError):
        return hint("caught")
    """
    patient = LocalSandbox(SandboxLimits(timeout_s=60.0))  # a busy machine is not the point
    with pytest.raises(PatchFailure) as caught:
        patient.run_sync(program_of(body), "on_before_action", ctx_json(), {})
    assert caught.value.kind == "memory"
    assert "allocation budget" in caught.value.problem


def test_small_values_and_values_dropped_in_place_are_not_counted(sandbox: LocalSandbox) -> None:
    """Values under 4,096 items cost a line each; growing one list in place counts what is
    added, not the whole list again."""
    body = """
    small = [list(range(100)) for _ in range(5000)]
    grown = []
    for i in range(3000):
        grown += [i] * 100
    return hint(f"{len(small)} {len(grown)}")
    """
    assert effect_text(sandbox, body) == "5000 300000"


def test_a_guard_checks_the_deadline_before_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """One line can chain many guarded calls; each checks the deadline as it starts. The clock
    passes the deadline after the hook's first line began, so the ``sorted`` on that line is
    stopped before it measures anything."""
    readings = iter([0.0, 0.0, 0.0])
    clock = SimpleNamespace(monotonic=lambda: next(readings, 100.0))
    monkeypatch.setattr(_hookrt, "time", clock)
    measured: list[Any] = []
    monkeypatch.setattr(_hookrt, "_check_visits", lambda value, what: measured.append(value))
    program = _hookrt.compile_program(
        [("on_before_action", "def on_before_action(ctx, nb):\n    return sorted([2, 1])")]
    )
    with pytest.raises(_hookrt.HookError) as caught:
        _hookrt.run_call(program, "on_before_action", ctx_json(), {}, _hookrt.Limits())
    assert caught.value.kind == "timeout"
    assert measured == []


def _names(source: str) -> set[str]:
    """The names the compiled hook function uses (its guards among them)."""
    [(_, module)] = _hookrt.compile_program([("on_before_action", source)])
    [function] = [c for c in module.co_consts if hasattr(c, "co_names")]
    return set(function.co_names)


@pytest.mark.parametrize(
    ("expression", "guarded"),
    [
        ("0 in x", True),  # scans x: a line of a thousand of these would hold the GIL
        ("x in 'abc'", False),
        ("x == 'a'", False),
        ("x == y", True),
        ("x // y", True),
        ("x // 2", False),
        ("x | y", True),
    ],
)
def test_comparisons_and_operators_between_values_are_calls(expression: str, guarded: bool) -> None:
    names = _names(f"def on_before_action(ctx, nb):\n    x = y = 1\n    return {expression}")
    assert any(name.startswith("__hook_") for name in names) is guarded, names
