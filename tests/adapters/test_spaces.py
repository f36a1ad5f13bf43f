"""Gymnasium spaces in JSON: values both ways, the JSON Schema agents are shown, and the
message an illegal action is blocked with."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from gymnasium import spaces

from envharness.adapters.spaces import (
    check_action_space,
    from_json,
    json_schema,
    problem,
    to_json,
    to_json_subset,
)
from envharness.errors import ConfigurationError

SUPPORTED = [
    spaces.Discrete(6),
    spaces.Discrete(3, start=-1),
    spaces.Box(-1.0, 1.0, (2,), np.float32),
    spaces.Box(0, 255, (2, 3), np.uint8),
    spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64),
    spaces.MultiDiscrete([3, 4]),
    spaces.MultiDiscrete([3, 4], start=[1, -2]),
    spaces.MultiBinary(4),
    spaces.MultiBinary([2, 2]),
    spaces.Text(5, min_length=1, charset="abc"),
    spaces.Dict({"move": spaces.Discrete(4), "force": spaces.Box(0.0, 1.0, (1,))}),
    spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3))),
]


@pytest.mark.parametrize("space", SUPPORTED, ids=repr)
def test_every_sampled_value_goes_to_json_and_back_and_is_legal(space: Any) -> None:
    space.seed(0)
    for _ in range(20):
        value = space.sample()
        shown = to_json(value)
        assert msgspec.json.decode(msgspec.json.encode(shown)) == shown  # plain JSON
        assert problem(space, shown) is None, problem(space, shown)
        assert space.contains(from_json(space, shown))


@pytest.mark.parametrize("space", SUPPORTED, ids=repr)
def test_every_supported_space_has_a_schema_that_names_it(space: Any) -> None:
    check_action_space(space, "test")
    schema = json_schema(space)
    assert schema["description"] == repr(space)
    msgspec.json.encode(schema)


def test_schemas_say_what_is_legal() -> None:
    assert json_schema(spaces.Discrete(6)) == {
        "type": "integer",
        "minimum": 0,
        "maximum": 5,
        "description": "Discrete(6)",
    }
    assert json_schema(spaces.Discrete(3, start=-1))["minimum"] == -1
    box = json_schema(spaces.Box(0, 255, (2, 3), np.uint8))
    assert (box["type"], box["minItems"], box["items"]["minItems"]) == ("array", 2, 3)
    assert box["items"]["items"] == {"type": "integer", "minimum": 0, "maximum": 255}
    per_element = json_schema(
        spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64)
    )
    assert per_element["prefixItems"] == [
        {"type": "number", "minimum": -1.0, "maximum": 1.0},
        {"type": "number", "minimum": 0.0},
    ]
    multi = json_schema(spaces.MultiDiscrete([3, 4], start=[1, -2]))
    assert [(i["minimum"], i["maximum"]) for i in multi["prefixItems"]] == [(1, 3), (-2, 1)]
    assert json_schema(spaces.MultiBinary(2))["items"] == {"type": "integer", "enum": [0, 1]}
    text = json_schema(spaces.Text(5, min_length=1, charset="a-]"))
    assert (text["minLength"], text["maxLength"], text["pattern"]) == (1, 5, r"^[\-\]a]*$")
    nested = json_schema(spaces.Dict({"move": spaces.Discrete(4)}))
    assert nested["required"] == ["move"]
    assert nested["additionalProperties"] is False
    pair = json_schema(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))))
    assert (pair["minItems"], pair["maxItems"], pair["items"]) == (2, 2, False)


@pytest.mark.parametrize(
    ("space", "value", "message"),
    [
        (spaces.Discrete(6), 7, "action 7 is outside Discrete(6): choose an integer 0..5"),
        (spaces.Discrete(6), -1, "action -1 is outside Discrete(6): choose an integer 0..5"),
        (spaces.Discrete(3, start=1), 0, "outside Discrete(3, start=1): choose an integer 1..3"),
        (spaces.Discrete(6), "north", 'action "north" is not an integer: Discrete(6) takes'),
        (spaces.Discrete(6), 2.0, "action 2.0 is not an integer"),
        (spaces.Discrete(6), True, "action true is not an integer"),
        (
            spaces.Box(-1.0, 1.0, (2,), np.float32),
            [0.5, 1.5],
            "action [0.5,1.5] is outside Box(-1.0, 1.0, (2,), float32): action[1] = 1.5 must be "
            "between -1.0 and 1.0",
        ),
        (spaces.Box(-1.0, 1.0, (2,), np.float32), [0.5], "has shape (1,), not shape (2,)"),
        (spaces.Box(-1.0, 1.0, (2,), np.float32), [[0.5], 1], "has a ragged nesting"),
        (spaces.Box(-1.0, 1.0, (2,), np.float32), ["a", 1], "expected 2 numbers as nested"),
        (spaces.Box(0, 255, (2,), np.uint8), [1.5, 2], "expected 2 integers"),
        (spaces.Box(0.0, 1.0, (), np.float32), [0.5], "expected one number"),
        (spaces.MultiDiscrete([3, 4]), [1, 4], "action[1] = 4.0 must be between 0 and 3"),
        (spaces.MultiBinary(2), [0, 2], "action[1] = 2.0 must be between 0.0 and 1.0"),
        (spaces.Text(3, charset="ab"), "abc", "characters outside Text(1, 3, charset=ab)"),
        (spaces.Text(3, charset="ab"), "abab", "has 4 characters; Text(1, 3, charset=ab) takes 1"),
        (spaces.Text(3, charset="ab"), 3, "is not a string"),
        (
            spaces.Dict({"move": spaces.Discrete(4)}),
            {"move": 9},
            "action['move'] 9 is outside Discrete(4)",
        ),
        (
            spaces.Dict({"move": spaces.Discrete(4)}),
            {"mvoe": 1},
            "wrong keys for Dict('move': Discrete(4)): missing ['move']; unknown ['mvoe']",
        ),
        (spaces.Dict({"move": spaces.Discrete(4)}), [1], "is not an object"),
        (
            spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))),
            [0, 5],
            "action[1] 5 is outside Discrete(2)",
        ),
        (spaces.Tuple((spaces.Discrete(2),)), [0, 1], "expected a list of 1 values"),
    ],
)
def test_an_illegal_action_is_named_with_its_space(space: Any, value: Any, message: str) -> None:
    found = problem(space, value)
    assert found is not None
    assert message in found


def test_a_long_value_is_shortened_in_the_message() -> None:
    found = problem(spaces.Discrete(2), "x" * 500)
    assert found is not None
    assert "..." in found
    assert len(found) < 200


@pytest.mark.parametrize(
    "space",
    [
        spaces.Sequence(spaces.Discrete(2)),
        spaces.Dict({"seq": spaces.Sequence(spaces.Discrete(2))}),
    ],
    ids=repr,
)
def test_an_action_space_agents_cannot_answer_in_json_is_refused(space: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"Sequence\(Discrete\(2\), stack=False\) is not"):
        check_action_space(space, "my env")


def test_values_of_any_space_encode_and_info_keeps_what_json_can_hold() -> None:
    assert to_json((np.int64(3), np.array([[1, 2]]), {1: np.float32(0.5)})) == [
        3,
        [[1, 2]],
        {"1": 0.5},
    ]
    assert to_json(np.array(3)) == 3
    with pytest.raises(TypeError, match="object has no JSON form"):
        to_json(object())
    info = {"prob": 1.0, "mask": np.array([1, 0], dtype=np.int8), "env": object()}
    assert to_json_subset(info) == {"prob": 1.0, "mask": [1, 0]}
