"""What each action format sends: tool parameters, instructions and the example action."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pytest

from envharness.agents.formats import (
    ask_line,
    example_action,
    instructions,
    readable_schema,
    request_options,
    schema_text,
    tool_parameters,
)
from envharness.agents.schema import action_problems


class Bet(msgspec.Struct):
    chips: Annotated[int, msgspec.Meta(ge=1, le=100, multiple_of=5)]
    note: str | None = None


class Say(msgspec.Struct, tag="say"):
    text: Annotated[str, msgspec.Meta(min_length=3)]
    to: Literal["all", "team"]
    loud: bool
    volume: Annotated[float, msgspec.Meta(gt=0, lt=1)]


class Fold(msgspec.Struct, tag="fold"):
    pass


class Hand(msgspec.Struct):
    cards: Annotated[list[int], msgspec.Meta(min_length=2)]
    say: Say


@pytest.mark.parametrize(
    ("action_type", "example"),
    [
        (Bet, {"chips": 5}),
        (Fold | Say, {"type": "fold"}),
        (Say | Fold, {"type": "say", "text": "xxx", "to": "all", "loud": False, "volume": 0.5}),
        (
            Hand,
            {
                "cards": [0, 0],
                "say": {"type": "say", "text": "xxx", "to": "all", "loud": False, "volume": 0.5},
            },
        ),
    ],
)
def test_an_example_action_fits_its_schema(action_type: Any, example: dict[str, Any]) -> None:
    schema = msgspec.json.schema(action_type)
    assert example_action(schema) == example
    assert action_problems(example, schema) == []


def test_no_example_when_none_can_be_made() -> None:
    assert example_action(None) is None
    assert (
        example_action(
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
                "required": ["n"],
            }
        )
        is None
    )
    assert example_action({"type": "string"}) is None  # an action is an object


def test_the_root_reference_is_followed_for_the_model_to_read() -> None:
    schema = msgspec.json.schema(Bet)
    assert "$ref" in schema
    readable = readable_schema(schema)
    assert readable["type"] == "object"
    assert "$defs" not in readable
    assert schema_text(None) == "(any JSON object)"
    parameters, wrapped = tool_parameters(schema)
    assert (parameters, wrapped) == (readable, False)
    nested = readable_schema(msgspec.json.schema(Hand))
    assert "$defs" in nested  # still referred to, by the say field


def test_a_union_is_wrapped_and_offered_as_one_tool() -> None:
    parameters, wrapped = tool_parameters(msgspec.json.schema(Fold | Say))
    assert wrapped
    assert parameters["required"] == ["action"]
    assert "anyOf" in parameters["properties"]["action"]
    assert set(parameters["$defs"]) == {"Fold", "Say"}
    options = request_options("tools", parameters)
    assert options["tools"][0]["function"]["parameters"] == parameters
    assert options["tool_choice"] == {"type": "function", "function": {"name": "act"}}
    assert request_options("json", parameters) == {"response_format": {"type": "json_object"}}
    assert request_options("text", parameters) == {}


def test_instructions_and_the_ask_line_per_format() -> None:
    assert instructions("tools", "{}", None, wrapped=True).endswith("its `action` argument.")
    assert "For example" not in instructions("text", "{}", None, wrapped=False)
    text = instructions("text", "{S}", '{"v": 0}', wrapped=False)
    assert text.endswith('{S}\nFor example (any values that fit will do): {"v": 0}')
    assert instructions("json", "{S}", None, wrapped=False).startswith(
        "Answer with your action only"
    )
    assert ask_line("tools", '{"v": 0}') == "Call act with your action."
    assert (
        ask_line("json", '{"v": 0}') == 'Answer with your action as one JSON object, like {"v": 0}.'
    )
    assert ask_line("text") == "End your answer with your action as one JSON object."
