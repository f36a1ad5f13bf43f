"""parse_answer: ``<think>…</think><patch>…</patch>`` and the errors that name what is wrong."""

from __future__ import annotations

import json

import pytest

from envharness.optimizer import PatchParseError, PatchSchemaError, parse_answer
from envharness.optimizer.patches.patch import MAX_CODE_HOOKS

CODE = "def on_before_action(ctx, nb):\n    return None"
OPS = [{"op": "add_code_hook", "hook": "on_before_action", "code": CODE}]


def answer(patch: str, think: str = "<think>refunds come before lookups</think>") -> str:
    return f"{think}\n<patch>{patch}</patch>\n"


def test_a_well_formed_answer_parses() -> None:
    parsed = parse_answer(answer(json.dumps(OPS)))
    assert parsed.think == "refunds come before lookups"
    assert [h.hook for h in parsed.patch.hooks] == ["on_before_action"]
    assert parsed.patch.hooks[0].code == CODE


def test_think_is_optional_and_surrounding_text_is_ignored() -> None:
    parsed = parse_answer(f"Here you go:\n<patch>{json.dumps(OPS)}</patch>\nThanks!")
    assert parsed.think == ""
    assert len(parsed.patch.hooks) == 1


def test_a_patch_tag_mentioned_while_thinking_is_not_the_patch() -> None:
    text = f"<think>I will answer in a <patch> block</think><patch>{json.dumps(OPS)}</patch>"
    assert len(parse_answer(text).patch.hooks) == 1


def test_a_markdown_fence_inside_the_patch_is_tolerated() -> None:
    parsed = parse_answer(answer(f"\n```json\n{json.dumps(OPS, indent=2)}\n```\n"))
    assert parsed.patch.hooks[0].code == CODE


def test_the_ops_object_form_is_accepted() -> None:
    assert len(parse_answer(answer(json.dumps({"ops": OPS}))).patch.hooks) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("<think>hm</think> no patch here", "has no <patch>", id="missing-patch"),
        pytest.param("<think>hm <patch>[]</patch>", "<think> tag is never closed", id="open-think"),
        pytest.param("<patch>[1, 2", "<patch> tag is never closed", id="open-patch"),
        pytest.param("<patch>[]</patch><patch>[]</patch>", "2 <patch> blocks", id="two-patches"),
        pytest.param("<patch>   </patch>", "<patch> block is empty", id="empty-patch"),
        pytest.param("<patch>[]</patch>", "adds no hooks", id="no-hooks"),
        pytest.param(
            '<patch>[{"op": "add_code_hook",\n "hook": "on_init", "code": "def on_init(ctx, nb):\n'
            '    return None"}]</patch>',
            r"not valid JSON: Invalid control character at line 2, column 51 .*newlines written",
            id="raw-newline-in-json",
        ),
        pytest.param("<patch>[{'op': 1}]</patch>", "not valid JSON.*line 1, column 3", id="quotes"),
    ],
)
def test_unparseable_answers_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(PatchParseError, match=message):
        parse_answer(text)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        pytest.param([{**OPS[0], "op": "delete_hook"}], "unknown operation 'delete_hook'", id="op"),
        pytest.param([{**OPS[0], "hook": "on_step"}], "'on_step' is not a hook", id="hook"),
        pytest.param([{**OPS[0], "code": ""}], r"ops\[0\]\.code is empty", id="empty-code"),
    ],
)
def test_schema_problems_are_parse_errors_too(ops: list[dict[str, str]], message: str) -> None:
    with pytest.raises(PatchSchemaError, match=message) as caught:
        parse_answer(answer(json.dumps(ops)))
    assert isinstance(caught.value, PatchParseError)


def test_too_many_hooks_in_one_answer_are_refused() -> None:
    with pytest.raises(PatchParseError, match=f"over the limit of {MAX_CODE_HOOKS}"):
        parse_answer(answer(json.dumps(OPS * (MAX_CODE_HOOKS + 1))))


def test_an_answer_that_is_not_text_is_refused() -> None:
    with pytest.raises(PatchParseError, match="is text, not bytes"):
        parse_answer(b"<patch>[]</patch>")  # type: ignore[arg-type]
