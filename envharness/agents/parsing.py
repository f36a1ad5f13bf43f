"""One JSON action out of a model's answer: a tool call, a JSON-mode answer, or prose around JSON.

Models answer in every shape: a native tool call; a bare JSON object (JSON mode); an object in
a fenced code block after some reasoning; an object in the middle of a sentence; a refusal with
no object at all. :func:`read_action` takes them in that order of trust and says, when it finds
nothing usable, why — in words the model is shown when it is asked again:

1. a tool call named ``tool`` (another tool's call, or arguments that are not a JSON object,
   are problems);
2. else the text, with any ``<think>…</think>`` reasoning removed: the whole text as JSON; else
   the last fenced block (```` ```json … ``` ````) that holds an object; else the last
   top-level ``{…}`` object that decodes.

When the action schema's root is not an object, tools take the action under one ``action``
argument (the tool's parameters must be an object); ``wrapped`` unwraps it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from envharness.llm import Completion

__all__ = ["EXCERPT_CHARS", "Reading", "read_action"]

EXCERPT_CHARS = 200
"""How much of a bad answer a problem quotes back."""

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n(.*?)```", re.DOTALL)
_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_decoder = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Reading:
    """What was read from an answer: the action (unchecked against the schema), or why none."""

    action: dict[str, Any] | None
    problem: str | None = None


def read_action(completion: Completion, *, tool: str, wrapped: bool = False) -> Reading:
    """The action in ``completion`` (see the module doc), or the problem to tell the model."""
    if completion.tool_calls:
        return _from_tool_calls(completion, tool, wrapped)
    text = completion.text.strip()
    cut = completion.finish_reason == "length"
    if not text:
        if cut:
            return Reading(None, "your answer was empty: it was cut off at the token limit")
        return Reading(None, "your answer was empty")
    found = _object_in(_THINKING.sub(" ", text).strip())
    if found is None:
        tail = " (it was cut off at the token limit: answer more briefly)" if cut else ""
        return Reading(None, f"your answer has no JSON object{tail}")
    return Reading(found)


def _from_tool_calls(completion: Completion, tool: str, wrapped: bool) -> Reading:
    ours = [call for call in completion.tool_calls if call.name == tool]
    if not ours:
        names = ", ".join(sorted({call.name or "(no name)" for call in completion.tool_calls}))
        return Reading(None, f"you called {names}; call {tool} with your action")
    call = ours[0]
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError as exc:
        return Reading(
            None,
            f"the arguments of your {tool} call are not valid JSON ({exc}): "
            f"{_excerpt(call.arguments)}",
        )
    if not isinstance(arguments, dict):
        return Reading(
            None,
            f"the arguments of your {tool} call must be a JSON object, not "
            f"{_excerpt(call.arguments)}",
        )
    if not wrapped:
        return Reading(arguments)
    action = arguments.get("action")
    if not isinstance(action, dict):
        return Reading(None, f"call {tool} with your action as the object in its 'action' argument")
    return Reading(action)


def _object_in(text: str) -> dict[str, Any] | None:
    whole = _loads(_unfenced(text))
    if isinstance(whole, dict):
        return whole
    for block in reversed(_FENCE.findall(text)):
        value = _loads(block)
        if isinstance(value, dict):
            return value
    last: dict[str, Any] | None = None
    position = text.find("{")
    while position != -1:
        try:
            value, end = _decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            last = value
        position = text.find("{", end)
    return last


def _unfenced(text: str) -> str:
    """The text without one fence around all of it (```` ```json\\n{…}\\n``` ````)."""
    match = _FENCE.fullmatch(text.strip())
    return match.group(1) if match else text


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…")
