"""A provider that answers from a script: model-backed code tested with no model and no network.

Replies are handed out in the order calls arrive; each is a text, a whole :class:`Completion`
(to test cost accounting or tool calls), an exception to raise (a :class:`ProviderError` to test
failures), or a function of the call. Every call is kept in :attr:`ScriptedProvider.calls` for
assertions, with the tools and response format it offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from envharness.llm.provider import Completion, Message, ProviderError

__all__ = ["ScriptedCall", "ScriptedProvider", "ScriptedReply"]


class ScriptedCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call a scripted provider received."""

    messages: tuple[Message, ...]
    temperature: float
    top_p: float
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None


ScriptedReply = str | Completion | Exception | Callable[[ScriptedCall], "str | Completion"]
"""What a scripted provider answers one call with."""


class ScriptedProvider:
    """Answers calls with ``replies`` in order; a call past the end raises ProviderError.

    ``supports_tools`` is what it tells a caller (a model agent offers tools only when true);
    it answers whatever the script says either way.
    """

    def __init__(
        self,
        replies: Iterable[ScriptedReply],
        *,
        model: str = "scripted",
        name: str = "scripted-model",
        supports_tools: bool = True,
    ) -> None:
        self._replies = list(replies)
        self._model = model
        self._name = name
        self._supports_tools = supports_tools
        self.calls: list[ScriptedCall] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def supports_tools(self) -> bool:
        return self._supports_tools

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> Completion:
        call = ScriptedCall(
            messages=tuple(messages),
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            stop=tuple(stop) if stop is not None else None,
            tools=tuple(dict(tool) for tool in tools) if tools is not None else None,
            tool_choice=(tool_choice if isinstance(tool_choice, str | None) else dict(tool_choice)),
            response_format=dict(response_format) if response_format is not None else None,
        )
        index = len(self.calls)
        self.calls.append(call)
        if index >= len(self._replies):
            raise ProviderError(
                f"the scripted provider has {len(self._replies)} replies and got call "
                f"{index + 1}; script more replies",
                attempts=1,
            )
        reply = self._replies[index]
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(call)
        if isinstance(reply, Completion):
            return reply
        return Completion(text=reply, model=self._model)
