"""The JSON Schema subset the model agent checks actions with, on schemas msgspec generates."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pytest

from envharness.agents import action_problems
from envharness.agents.schema import MAX_PROBLEMS, resolve


class Move(msgspec.Struct, tag="move", forbid_unknown_fields=True):
    to: Annotated[str, msgspec.Meta(pattern="^[a-h][1-8]$")]
    promote: Literal["queen", "rook"] | None = None


class Say(msgspec.Struct, tag="say"):
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=10)]
    volume: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.5


class Bet(msgspec.Struct):
    chips: Annotated[int, msgspec.Meta(ge=1, le=100, multiple_of=5)]
    cards: Annotated[list[int], msgspec.Meta(min_length=1, max_length=2)] = []
    note: str | None = None


BET = msgspec.json.schema(Bet)
UNION = msgspec.json.schema(Move | Say)


@pytest.mark.parametrize(
    "value",
    [
        {"chips": 5},
        {"chips": 100, "cards": [1, 2], "note": None},
        {"chips": 10, "note": "all in", "extra": 1},  # unknown fields allowed unless forbidden
    ],
)
def test_a_valid_action_has_no_problems(value: dict[str, Any]) -> None:
    assert action_problems(value, BET) == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({}, "$ is missing the required field(s) chips"),
        ({"chips": "5"}, '$.chips must be an integer, not a string "5"'),
        ({"chips": True}, "$.chips must be an integer, not a boolean true"),
        ({"chips": 5.0}, "$.chips must be an integer, not a number 5.0"),
        ({"chips": 0}, "$.chips must be at least 1, not 0"),
        ({"chips": 105}, "$.chips must be at most 100, not 105"),
        ({"chips": 7}, "$.chips must be a multiple of 5, not 7"),
        ({"chips": 5, "cards": []}, "$.cards must have at least 1 items, not 0"),
        ({"chips": 5, "cards": [1, 2, 3]}, "$.cards must have at most 2 items, not 3"),
        ({"chips": 5, "cards": [1, "x"]}, '$.cards[1] must be an integer, not a string "x"'),
        ({"chips": 5, "note": 3}, "$.note fits none of the 2 allowed forms"),
        ([5], "$ must be an object, not an array [5]"),
        (None, "$ must be an object, not null"),
    ],
)
def test_each_violation_names_where_and_what(value: Any, problem: str) -> None:
    problems = action_problems(value, BET)
    assert problems
    assert problems[0].startswith(problem), problems


def test_a_tagged_union_is_checked_against_the_branch_its_tag_names() -> None:
    assert action_problems({"type": "move", "to": "e4"}, UNION) == []
    assert action_problems({"type": "say", "text": "hi", "volume": 0.9}, UNION) == []
    [problem] = action_problems({"type": "move", "to": "z9"}, UNION)
    assert problem == "$.to must match the pattern '^[a-h][1-8]$'; \"z9\" does not"
    [problem] = action_problems({"type": "move", "to": "e4", "promote": "king"}, UNION)
    assert "$.promote fits none of the 2 allowed forms" in problem
    assert 'must be one of "queen", "rook"; "king" is not' in problem
    [problem] = action_problems({"type": "move", "to": "e4", "speed": 3}, UNION)
    assert problem == "$ has field(s) the schema does not allow: speed (allowed: type, to, promote)"
    [problem] = action_problems({"type": "say", "text": ""}, UNION)
    assert problem == "$.text must have at least 1 characters, not 0"
    [problem] = action_problems({"type": "say", "text": "x", "volume": 1}, UNION)
    assert problem == "$.volume must be less than 1, not 1"


def test_an_unknown_tag_is_checked_against_every_branch() -> None:
    [problem] = action_problems({"type": "fly"}, UNION)
    assert problem.startswith("$ fits none of the 2 allowed forms; the nearest: ")


def test_no_schema_accepts_anything_and_unknown_keywords_are_ignored() -> None:
    assert action_problems({"anything": 1}, None) == []
    assert action_problems({"x": 1}, {"type": "object", "x-vendor": True, "format": "odd"}) == []
    assert action_problems({"x": 1}, {"$ref": "#/$defs/Missing"}) == []  # unresolvable


def test_the_remaining_keywords() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "items": False,
            },
            "mode": {"const": "fast"},
            "level": {"type": ["integer", "null"], "exclusiveMinimum": 0},
            "flag": {"enum": [True, 1]},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "never": False,
            "both": {"allOf": [{"minimum": 2}, {"maximum": 3}]},
            "count": {"type": "number"},
            "item": {"$ref": "#/definitions/Item"},
        },
        "definitions": {"Item": {"type": "object", "required": ["id"]}},
    }
    good = {
        "pair": [1, "a"],
        "mode": "fast",
        "level": None,
        "flag": True,
        "tags": {"a": "b"},
        "both": 2.5,
        "count": 1,
        "item": {"id": 1},
    }
    assert action_problems(good, schema) == []
    assert action_problems({"pair": [1, "a", 3]}, schema) == ["$.pair must have at most 2 items"]
    assert action_problems({"mode": "slow"}, schema) == ['$.mode must be "fast", not "slow"']
    assert action_problems({"level": 0}, schema) == ["$.level must be more than 0, not 0"]
    assert action_problems({"flag": False}, schema) == [
        "$.flag must be one of true, 1; false is not"
    ]
    assert action_problems({"tags": {"a": 1}}, schema) == [
        "$.tags.a must be a string, not an integer 1"
    ]
    assert action_problems({"never": 1}, schema) == [
        "$.never is not allowed: the schema accepts nothing here"
    ]
    assert action_problems({"both": 4}, schema) == ["$.both must be at most 3, not 4"]
    assert action_problems({"count": "1"}, schema) == ['$.count must be a number, not a string "1"']
    assert action_problems({"item": {}}, schema) == ["$.item is missing the required field(s) id"]
    assert action_problems({"odd key": 1}, {"properties": {"odd key": {"type": "string"}}}) == [
        "$['odd key'] must be a string, not an integer 1"
    ]


def test_problems_are_capped_and_a_bad_pattern_is_not_the_models_fault() -> None:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(9)}}
    assert len(action_problems({f"f{i}": i for i in range(9)}, schema)) == MAX_PROBLEMS
    assert action_problems("x", {"type": "string", "pattern": "("}) == []


def test_resolve_follows_refs_and_stops_at_a_loop() -> None:
    schema = {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"type": "object"}}}
    assert resolve(schema, schema) == {"type": "object"}
    looping = {"$ref": "#"}
    assert resolve(looping, looping) == looping
