"""What a model-backed agent says it added to its conversation, checked before it is sealed.

An answer's transcript (:attr:`~envharness.contracts.agent.AgentReply.transcript`) becomes a
``transcript`` record, and a dataset's rows are made of those records as they are: a message
without a role, with content that is not text, or with tool calls of another shape would be
evidence no dataset could read, forever. So the messages are checked here, naming the one at
fault, and copied into their JSON form, since the agent goes on changing its own conversation
after it answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = ["ROLES", "TranscriptError", "checked_transcript"]

ROLES = frozenset({"system", "user", "assistant", "tool"})
"""The roles of a transcript's messages (OpenAI's chat format, and TRL's)."""

_messages = msgspec.json.Decoder(list[dict[str, Any]])


class TranscriptError(ValueError):
    """A transcript that is not chat messages; the message says which one, and why."""


def checked_transcript(transcript: object) -> tuple[dict[str, Any], ...]:
    """``transcript``'s messages in their JSON form, or :class:`TranscriptError`."""
    if isinstance(transcript, str | bytes | Mapping) or not isinstance(transcript, Sequence):
        raise TranscriptError(
            f"the transcript is {type(transcript).__name__}; give a tuple of message dicts, "
            "e.g. ({'role': 'user', 'content': '...'}, {'role': 'assistant', 'content': '...'})"
        )
    for index, message in enumerate(transcript):
        problem = _problem(message)
        if problem is not None:
            raise TranscriptError(f"transcript[{index}] {problem}")
    try:
        data = msgspec.json.encode([dict(message) for message in transcript])
    except (TypeError, ValueError, msgspec.MsgspecError, RecursionError) as exc:
        raise TranscriptError(f"the transcript is not JSON-encodable: {exc}") from exc
    return tuple(_messages.decode(data))


def _problem(message: object) -> str | None:
    """What keeps ``message`` from being a chat message a dataset can hold (``None``: it is)."""
    if not isinstance(message, Mapping):
        return f"is {type(message).__name__}, not a message (a dict with 'role' and 'content')"
    role = message.get("role")
    if role not in ROLES:
        return f"has role {role!r}; a message's role is one of {', '.join(sorted(ROLES))}"
    content = message.get("content")
    calls = message.get("tool_calls")
    if content is None and not (role == "assistant" and calls):
        return (
            f"({role}) has no content; give its text as 'content' (only an assistant message "
            "that calls tools may have none)"
        )
    if content is not None and not isinstance(content, str):
        return f"({role}) has content of type {type(content).__name__}; give its text (a str)"
    if calls is not None:
        problem = _calls_problem(role, calls)
        if problem is not None:
            return problem
    for key in ("tool_call_id", "name"):
        if key in message and not isinstance(message[key], str):
            return f"({role}) has {key} of type {type(message[key]).__name__}; give a str"
    return None


def _calls_problem(role: str, calls: object) -> str | None:
    if role != "assistant":
        return f"({role}) has tool_calls; only an assistant message calls tools"
    if isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Sequence):
        return f"(assistant) has tool_calls of type {type(calls).__name__}; give a list"
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not (
            isinstance(function, Mapping)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), str | Mapping)
        ):
            return (
                f"(assistant) has tool_calls[{index}] = {call!r:.120}, which is not a tool "
                "call: give {'id': ..., 'type': 'function', 'function': {'name': ..., "
                "'arguments': '<JSON text>'}}"
            )
    return None
