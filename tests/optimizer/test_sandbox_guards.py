"""The guards on C-level work: each class of one call into C that could hold the interpreter
(and so, in ``LocalSandbox``, the whole host) for longer than any budget, refused before it
starts. Each test uses small inputs: the refusal comes from the size or kind of the operands,
never from running the work."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from envharness.optimizer import LocalSandbox, PatchFailure, PatchPolicyError
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
