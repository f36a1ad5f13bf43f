"""Getting one JSON action out of whatever shape a model answers in."""

from __future__ import annotations

import pytest

from envharness.agents.parsing import read_action
from envharness.llm import Completion, ToolCall
from tests.agents_model._support import tool_call


def text(answer: str, finish: str | None = "stop") -> Completion:
    return Completion(text=answer, model="m", finish_reason=finish)


@pytest.mark.parametrize(
    "answer",
    [
        '{"value": 3}',
        '  ```json\n{"value": 3}\n```  ',
        'I will add three.\n```json\n{"value": 3}\n```',
        'First {"value": 1} was my idea, but now: ```\n{"value": 3}\n```',
        'Let me think. {"value": 1}? No — {"value": 3} is better.',
        '<think>maybe {"value": 9}</think>\n{"value": 3}',
        'The action is {"value": 3}. (Note: {not json})',
    ],
)
def test_the_action_is_found_in_text(answer: str) -> None:
    assert read_action(text(answer), tool="act").action == {"value": 3}


@pytest.mark.parametrize(
    ("answer", "finish", "problem"),
    [
        ("", "stop", "your answer was empty"),
        ("   ", "length", "your answer was empty: it was cut off at the token limit"),
        ("I cannot help with that.", "stop", "your answer has no JSON object"),
        ('{"value": ', "length", "your answer has no JSON object (it was cut off at the token"),
        ("[1, 2]", "stop", "your answer has no JSON object"),
        ('<think>{"value": 1}', "length", "your answer has no JSON object (it was cut off"),
    ],
)
def test_no_action_says_why(answer: str, finish: str, problem: str) -> None:
    reading = read_action(text(answer, finish), tool="act")
    assert reading.action is None
    assert reading.problem is not None
    assert reading.problem.startswith(problem), reading.problem


def test_a_tool_call_is_read_first() -> None:
    answer = Completion(
        text='{"value": 9}',
        model="m",
        tool_calls=(ToolCall(id="c", name="act", arguments='{"value": 3}'),),
    )
    assert read_action(answer, tool="act").action == {"value": 3}
    assert read_action(tool_call(""), tool="act").action == {}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (tool_call('{"value": 3}', name="move"), "you called move; call act with your action"),
        (tool_call('{"value": '), "the arguments of your act call are not valid JSON"),
        (tool_call("[3]"), "the arguments of your act call must be a JSON object, not '[3]'"),
    ],
)
def test_a_bad_tool_call_says_why(answer: Completion, problem: str) -> None:
    reading = read_action(answer, tool="act")
    assert reading.action is None
    assert reading.problem is not None
    assert reading.problem.startswith(problem), reading.problem


def test_a_wrapped_action_is_unwrapped_from_the_tool_arguments() -> None:
    found = read_action(tool_call('{"action": {"type": "say"}}'), tool="act", wrapped=True)
    assert found.action == {"type": "say"}
    missing = read_action(tool_call('{"type": "say"}'), tool="act", wrapped=True)
    assert missing.problem == "call act with your action as the object in its 'action' argument"


def test_long_bad_arguments_are_quoted_short() -> None:
    reading = read_action(tool_call("{" + "no " * 500), tool="act")
    assert reading.problem is not None
    assert len(reading.problem) < 400
    assert reading.problem.endswith("…'")
