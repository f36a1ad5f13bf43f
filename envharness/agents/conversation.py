"""One session's conversation with the model, and which part of it each call sends.

Messages are kept in OpenAI's chat format (plain dicts, so they are what checkpoints store
and what ``AgentReply.transcript`` hands the runtime), grouped into **exchanges**: one per
action asked for — the user message with the observation, each answer, each re-ask, and the
reply to the answer's tool call when the model used one. A tool call and its reply always sit
in the same exchange, so dropping whole exchanges never leaves a reply without its call (an
endpoint refuses such a conversation).

The window policy: the system message is always sent; of the earlier exchanges, the last
``window`` are kept, and of those only as many as fit ``max_context_tokens`` (estimated as
characters / 4, plus a little per message) when that is set. The exchange being asked is
always sent whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from envharness.llm.provider import Message, ToolCall

__all__ = [
    "ChatMessage",
    "Conversation",
    "ConversationState",
    "estimate_tokens",
    "to_message",
]

ChatMessage = dict[str, Any]
"""One message in OpenAI's chat format."""
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_RECEIVED = "Received."
"""The reply to the tool call of an answer that was taken: what happened next is shown with
the next observation, where a trimmed window cannot hide it."""


class ConversationState(msgspec.Struct, kw_only=True):
    """The conversation as a checkpoint keeps it."""

    exchanges: list[list[ChatMessage]] = []
    open_calls: list[str] = []
    """Ids of the last answer's tool calls, still waiting for their replies."""
    system_sent: bool = False
    """Whether the system message has been in a transcript yet."""


class Conversation:
    """The messages of one session (see the module doc)."""

    def __init__(self, *, window: int, max_context_tokens: int | None = None) -> None:
        self._window = window
        self._max_context_tokens = max_context_tokens
        self._state = ConversationState()

    @property
    def exchanges(self) -> tuple[tuple[ChatMessage, ...], ...]:
        """The kept exchanges, oldest first (copies)."""
        return tuple(tuple(dict(m) for m in exchange) for exchange in self._state.exchanges)

    @property
    def system_sent(self) -> bool:
        return self._state.system_sent

    def replies_to_open_calls(self) -> list[ChatMessage]:
        """The replies the last answer's tool calls are owed, to send before the next ask."""
        return [
            {"role": "tool", "tool_call_id": call, "content": TOOL_CALL_RECEIVED}
            for call in self._state.open_calls
        ]

    def context(
        self,
        system: ChatMessage,
        replies: Sequence[ChatMessage],
        current: Sequence[ChatMessage],
    ) -> list[ChatMessage]:
        """What one call sends: the system message, the kept exchanges that fit (the last of
        them closed by ``replies``), and ``current``."""
        earlier = [list(exchange) for exchange in self._state.exchanges]
        if earlier:
            earlier[-1].extend(replies)
        kept = earlier[len(earlier) - self._window :] if self._window else []
        if self._max_context_tokens is not None:
            budget = self._max_context_tokens - estimate_tokens([system, *current])
            fitting: list[list[ChatMessage]] = []
            for exchange in reversed(kept):
                budget -= estimate_tokens(exchange)
                if budget < 0:
                    break
                fitting.append(exchange)
            kept = fitting[::-1]
        return [system, *(m for exchange in kept for m in exchange), *current]

    def commit(
        self,
        replies: Sequence[ChatMessage],
        exchange: Sequence[ChatMessage],
        open_calls: Sequence[str],
        *,
        system_sent: bool,
    ) -> None:
        """Keep an answered exchange (and the replies that closed the one before)."""
        state = self._state
        if state.exchanges:
            state.exchanges[-1].extend(dict(m) for m in replies)
        state.exchanges.append([dict(m) for m in exchange])
        del state.exchanges[: max(0, len(state.exchanges) - max(self._window, 1))]
        state.open_calls = list(open_calls)
        state.system_sent = state.system_sent or system_sent

    def snapshot(self) -> ConversationState:
        return msgspec.structs.replace(
            self._state,
            exchanges=[[dict(m) for m in exchange] for exchange in self._state.exchanges],
            open_calls=list(self._state.open_calls),
        )

    def restore(self, state: ConversationState) -> None:
        exchanges = [list(exchange) for exchange in state.exchanges]
        del exchanges[: max(0, len(exchanges) - max(self._window, 1))]
        self._state = ConversationState(
            exchanges=exchanges, open_calls=list(state.open_calls), system_sent=state.system_sent
        )


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """A rough token count (characters / 4): enough to keep a window under a limit."""
    total = 0
    for message in messages:
        chars = len(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            chars += len(function.get("name") or "") + len(function.get("arguments") or "")
        total += MESSAGE_OVERHEAD_TOKENS + chars // CHARS_PER_TOKEN
    return total


def to_message(message: Mapping[str, Any]) -> Message:
    """A chat-format dict as the provider contract's :class:`Message`."""
    calls = tuple(
        ToolCall(
            id=str(call.get("id", "")),
            name=str((call.get("function") or {}).get("name", "")),
            arguments=str((call.get("function") or {}).get("arguments", "")),
        )
        for call in message.get("tool_calls") or ()
    )
    return Message(
        message["role"],
        message.get("content") or "",
        tool_calls=calls,
        tool_call_id=message.get("tool_call_id"),
    )
