"""How a model agent asks for an action in each format, and how an answer enters the chat.

Three formats (``ActionFormat`` in :mod:`envharness.agents.model` chooses among them):

- ``tools``: one function, :data:`TOOL_NAME`, whose parameters are the action's schema, offered
  with ``tool_choice`` naming it, so the endpoint makes the model call it. Function parameters
  must be an object: an action schema whose root is not one (a union of tagged objects) is
  wrapped in a single ``action`` argument.
- ``json``: ``response_format={"type": "json_object"}``, with the schema in the system message.
- ``text``: the schema in the system message and a request for one JSON object at the end of
  the answer (reasoning before it is welcome).

JSON and text mode also show an example action made from the schema (:func:`example_action`).

A re-ask answers each tool call of the rejected answer (an endpoint refuses a conversation with
an unanswered call), or is a user message when the answer made none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from envharness.agents.conversation import ChatMessage
from envharness.agents.schema import action_problems, resolve
from envharness.llm.provider import Completion

__all__ = [
    "TOOL_NAME",
    "Mode",
    "ask_line",
    "assistant_message",
    "describe",
    "example_action",
    "instructions",
    "re_ask",
    "readable_schema",
    "request_options",
    "schema_text",
    "tool_parameters",
]

Mode = Literal["tools", "json", "text"]
TOOL_NAME = "act"
"""The one tool offered to the model: its parameters are the action."""
_EXAMPLE_DEPTH = 6


def readable_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with its root ``$ref`` followed, keeping the definitions only when something
    still refers to them (a model reads ``{"type": "object", ...}`` more easily)."""
    definitions: dict[str, Any] = {
        key: schema[key] for key in ("$defs", "definitions") if key in schema
    }
    root = resolve(schema, schema)
    if not isinstance(root, Mapping) or root is schema:
        return dict(schema)
    body = {key: value for key, value in root.items() if key not in definitions}
    if definitions and '"$ref"' in json.dumps(body):
        body.update(definitions)
    return body


def schema_text(schema: Mapping[str, Any] | None) -> str:
    if not schema:
        return "(any JSON object)"
    try:
        return json.dumps(readable_schema(schema), ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(schema)


def tool_parameters(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The tool's parameters for an action schema, and whether the action is wrapped in an
    ``action`` argument."""
    if not schema:
        return {"type": "object"}, False
    readable = readable_schema(schema)
    if readable.get("type") == "object":
        return readable, False
    definitions: dict[str, Any] = {
        key: readable[key] for key in ("$defs", "definitions") if key in readable
    }
    inner = {key: value for key, value in readable.items() if key not in definitions}
    wrapped = {"type": "object", "properties": {"action": inner}, "required": ["action"]}
    return {**wrapped, **definitions}, True


def request_options(mode: Mode, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """What a call adds to the plain request in ``mode`` (nothing for text)."""
    if mode == "tools":
        tool = {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": "Take your action for this turn.",
                "parameters": dict(parameters),
            },
        }
        return {
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
        }
    if mode == "json":
        return {"response_format": {"type": "json_object"}}
    return {}


def example_action(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A small action that fits ``schema`` (zero, the lowest allowed number, the first option,
    required fields only), or ``None`` when none can be made that passes the check. Small
    models follow an example far better than a schema."""
    if not schema:
        return None
    example = _example(schema, schema, 0)
    if not isinstance(example, dict) or action_problems(example, schema):
        return None
    return example


def instructions(mode: Mode, schema: str, example: str | None, *, wrapped: bool) -> str:
    """The system message's ``$action_format``: how to answer, with the schema where needed."""
    if mode == "tools":
        where = "its `action` argument" if wrapped else "its arguments"
        return f"Answer by calling the function `{TOOL_NAME}` with your action as {where}."
    shape = f"\nFor example (any values that fit will do): {example}" if example else ""
    if mode == "json":
        return (
            "Answer with your action only: one JSON object that fits this JSON Schema:\n"
            f"{schema}{shape}"
        )
    return (
        "You may reason briefly first. End your answer with your action: one JSON object "
        f"that fits this JSON Schema:\n{schema}{shape}"
    )


def ask_line(mode: Mode, example: str | None = None) -> str:
    """The user message's ``$ask``."""
    if mode == "tools":
        return f"Call {TOOL_NAME} with your action."
    like = f", like {example}" if example else ""
    if mode == "json":
        return f"Answer with your action as one JSON object{like}."
    return f"End your answer with your action as one JSON object{like}."


def re_ask(
    mode: Mode, completion: Completion, problems: list[str], example: str | None = None
) -> list[ChatMessage]:
    """The message(s) asking again after a rejected answer (see the module doc)."""
    text = f"That is not a valid action: {'; '.join(problems)}. {ask_line(mode, example)}"
    if not completion.tool_calls:
        return [{"role": "user", "content": text}]
    replies: list[ChatMessage] = []
    answered = False
    for call in completion.tool_calls:
        if call.name == TOOL_NAME and not answered:
            answered = True
            content = text
        else:
            content = f"Not taken: call only {TOOL_NAME}, once."
        replies.append({"role": "tool", "tool_call_id": call.id, "content": content})
    if not answered:
        replies[0]["content"] = text
    return replies


def assistant_message(completion: Completion) -> ChatMessage:
    """An answer as the conversation keeps it (OpenAI's chat format)."""
    message: ChatMessage = {
        "role": "assistant",
        "content": completion.text if completion.text or not completion.tool_calls else None,
    }
    if completion.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in completion.tool_calls
        ]
    return message


def describe(completion: Completion) -> str:
    """An answer as a log record shows it: its text and each tool call."""
    parts = [completion.text] if completion.text else []
    parts += [f"[tool call {call.name}({call.arguments})]" for call in completion.tool_calls]
    return "\n".join(parts) or "(empty)"


def _example(node: Any, root: Any, depth: int) -> Any:
    node = resolve(node, root)
    if not isinstance(node, Mapping) or depth > _EXAMPLE_DEPTH:
        return None
    if "const" in node:
        return node["const"]
    enum = node.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for keyword in ("oneOf", "anyOf"):
        options = node.get(keyword)
        if isinstance(options, list):
            for option in options:
                if resolve(option, root) != {"type": "null"}:
                    return _example(option, root, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((name for name in kind if name != "null"), "null")
    if kind == "object" or (kind is None and "properties" in node):
        properties = node.get("properties") or {}
        return {
            key: _example(properties.get(key, {}), root, depth + 1)
            for key in node.get("required") or ()
            if isinstance(key, str)
        }
    if kind in ("integer", "number"):
        return _number(node, integer=kind == "integer")
    if kind == "string":
        return "x" * int(node.get("minLength") or 1)
    if kind == "boolean":
        return False
    if kind == "array":
        item = _example(node.get("items") or {}, root, depth + 1)
        return [item] * int(node.get("minItems") or 0)
    return None


def _number(node: Mapping[str, Any], *, integer: bool) -> float:
    low, high = node.get("minimum"), node.get("maximum")
    if isinstance(node.get("exclusiveMinimum"), int | float):
        low = node["exclusiveMinimum"] + (1 if integer else 0.5)
    if isinstance(node.get("exclusiveMaximum"), int | float):
        high = node["exclusiveMaximum"] - (1 if integer else 0.5)
    value: float = 0
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(high, int | float) and value > high:
        value = high
    step = node.get("multipleOf")
    if isinstance(step, int | float) and step > 0:
        value = math.ceil(value / step) * step
    return math.ceil(value) if integer else value
