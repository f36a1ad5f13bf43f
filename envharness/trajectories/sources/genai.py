"""What an OpenTelemetry GenAI model-call span says was said, as chat messages.

A ``gen_ai.chat`` record (see :mod:`.otel`) keeps its span's attributes. When the
instrumentation captured message content, the GenAI semantic conventions put it in three of
them, each a JSON array (as a string, the usual form, or as a structured attribute value):

- ``gen_ai.system_instructions``: parts (``{"type": "text", "content": …}``);
- ``gen_ai.input.messages``: ``{"role", "parts": […]}`` sent to the model;
- ``gen_ai.output.messages``: ``{"role", "parts": […], "finish_reason"}`` it answered.

A part becomes text: a ``text`` or ``reasoning`` part its ``content``; a ``tool_call`` the
canonical JSON of ``{"tool_call": {"id", "name", "arguments"}}`` (arguments sent as a JSON
string are parsed, so a call reads the same in the answer that made it and in the next
request's history); a ``tool_call_response`` its ``response``; any other part its canonical
JSON. A span without captured content says nothing. Anything else malformed is a
:class:`ValueError` naming the attribute.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from envharness.records import canonical

__all__ = ["CHAT_KINDS", "ChatTurn", "Said", "chat_turn", "merge"]

CHAT_KINDS = frozenset({"gen_ai.chat", "gen_ai.text_completion", "gen_ai.generate_content"})
"""The record kinds of model calls (``gen_ai.operation.name`` of the conventions)."""

Said = tuple[str, str]
"""One message: its role and its text."""

ChatTurn = tuple[list[Said], list[Said]]
_M = TypeVar("_M")
"""What one model call was sent (system instructions first) and what it answered."""


def chat_turn(payload: Any) -> ChatTurn:
    """The messages of one model-call record's payload (an :mod:`.otel` span payload)."""
    attributes = payload.get("attributes") if isinstance(payload, dict) else None
    if not isinstance(attributes, dict):
        return [], []
    sent: list[Said] = []
    instructions = _array(attributes, "gen_ai.system_instructions")
    if instructions:
        sent.append(("system", _text(instructions, "gen_ai.system_instructions")))
    sent += _messages(attributes, "gen_ai.input.messages")
    return sent, _messages(attributes, "gen_ai.output.messages")


def merge(conversation: list[_M], sent: Sequence[_M], answered: Sequence[_M]) -> None:
    """Add one model call (what it was ``sent``, what it ``answered``) to a participant's
    conversation, in place; messages are anything compared by value (``Said``, or the
    dataset's own message type).

    Instrumentations send either the whole history with every call or only what is new: when
    the call's input begins with the conversation so far, only the rest is added.
    """
    known = len(conversation)
    if known and sent[:known] == conversation:
        sent = sent[known:]
    conversation += sent
    conversation += answered


def _array(attributes: dict[str, Any], name: str) -> list[Any]:
    value = attributes.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, list):
        raise ValueError(f"{name} is {type(value).__name__}, not a JSON array")
    return value


def _messages(attributes: dict[str, Any], name: str) -> list[Said]:
    found: list[Said] = []
    for index, message in enumerate(_array(attributes, name)):
        where = f"{name}[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"{where} is not a message with a role")
        parts = message.get("parts", [])
        if not isinstance(parts, list):
            raise ValueError(f"{where}.parts is not an array")
        found.append((message["role"], _text(parts, f"{where}.parts")))
    return found


def _text(parts: list[Any], where: str) -> str:
    return "\n".join(_part_text(part, f"{where}[{index}]") for index, part in enumerate(parts))


def _part_text(part: Any, where: str) -> str:
    if not isinstance(part, dict):
        raise ValueError(f"{where} is {type(part).__name__}, not a part object")
    kind = part.get("type")
    if kind in ("text", "reasoning") and isinstance(part.get("content"), str):
        return str(part["content"])
    if kind == "tool_call":
        arguments = part.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: kept as the text it is
                arguments = json.loads(arguments)
        call = {"id": part.get("id"), "name": part.get("name"), "arguments": arguments}
        return canonical({"tool_call": call}).decode()
    if kind == "tool_call_response":
        response = part.get("response")
        return response if isinstance(response, str) else canonical(response).decode()
    return canonical(part).decode()
