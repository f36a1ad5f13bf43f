"""The provider contract: messages in, one completion with its cost out.

Everything model-backed in envharness talks to a model through :class:`Provider`, so an engineer
can run against a hosted endpoint, a local server or a scripted fake without changing. A
provider retries what is worth retrying itself and raises :class:`ProviderError` when it gives
up; callers decide whether a failed call stops anything (the model engineer records it as a
failed proposal and the optimizer goes on).

A provider that can also offer the model tools and ask for JSON answers — OpenAI's ``tools``,
``tool_choice`` and ``response_format`` — is a :class:`StructuredProvider`: a model agent asks
for its action through a tool call where the endpoint supports one, instead of parsing text.
The plain contract is unchanged, so a provider written for the engineer still serves it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from envharness.errors import EnvharnessError
from envharness.records import Cost

__all__ = [
    "Completion",
    "Message",
    "Price",
    "Provider",
    "ProviderError",
    "StructuredProvider",
    "ToolCall",
    "total_cost",
]


class ProviderError(EnvharnessError):
    """A model call failed for good: the endpoint refused it, or kept failing through the retries.

    ``status`` is the last HTTP status when there was one; ``attempts`` how many requests were
    made. The message names the endpoint, what went wrong and, for a refusal, an excerpt of the
    answer; it never contains the API key.
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A function call a model answered with: ``arguments`` is the JSON text it wrote, kept
    unparsed (a model can write invalid JSON, and the caller should see exactly what)."""

    id: str
    name: str
    arguments: str


class Message(msgspec.Struct, frozen=True):
    """One chat message.

    An assistant message may carry the ``tool_calls`` the model made; a ``tool`` message
    answers one of them, named by ``tool_call_id``.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """One model answer and what it cost.

    Token counts are the endpoint's own (``None`` when it reports none); ``usd`` comes from the
    endpoint when it reports a price, else from the provider's price table, else ``None``;
    ``seconds`` is the wall time of the whole call, retries and their waits included.
    """

    text: str
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    usd: float | None = None
    seconds: float = 0.0
    finish_reason: str | None = None
    attempts: int = 1
    tool_calls: tuple[ToolCall, ...] = ()
    """The functions the model called (only when it was offered tools); ``text`` may then be
    empty."""

    def cost(self) -> Cost:
        """The completion's cost as the ``cost`` record payload."""
        return Cost(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            usd=self.usd,
            seconds=self.seconds,
            model=self.model,
        )


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """US dollars per million tokens, for endpoints that do not report a price themselves."""

    input_per_million: float
    output_per_million: float

    def usd(self, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """The price of a call, or ``None`` when a token count is unknown."""
        if input_tokens is None or output_tokens is None:
            return None
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


@runtime_checkable
class Provider(Protocol):
    """A chat model behind some endpoint.

    ``name`` says what kind of provider it is (``"openai"`` for any OpenAI-compatible endpoint)
    and ``model`` which model it asks for; both end up in evidence.
    """

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> Completion:
        """One completion; raises :class:`ProviderError` when the call failed for good."""
        ...


@runtime_checkable
class StructuredProvider(Provider, Protocol):
    """A provider that also passes OpenAI's ``tools``, ``tool_choice`` and ``response_format``
    to its endpoint, and returns the model's tool calls in :attr:`Completion.tool_calls`.

    ``supports_tools`` says whether offering tools is worth trying at all; an endpoint may
    still refuse them (a 400), which a caller can take as "ask in plain text instead".
    """

    @property
    def supports_tools(self) -> bool: ...

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
        """One completion; ``tools`` (OpenAI function definitions), ``tool_choice`` and
        ``response_format`` are sent as given, and left out of the request when ``None``."""
        ...


def total_cost(costs: Iterable[Cost | None]) -> Cost:
    """The sum of several costs (one line per iteration or per accepted version).

    A token count or price is summed over the costs that report it and is ``None`` when none
    does; ``model`` is kept when every cost names the same one.
    """
    items = [cost for cost in costs if cost is not None]

    def summed(values: list[int | None]) -> int | None:
        known = [value for value in values if value is not None]
        return sum(known) if known else None

    def summed_float(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return sum(known) if known else None

    models = {cost.model for cost in items}
    return Cost(
        input_tokens=summed([cost.input_tokens for cost in items]),
        output_tokens=summed([cost.output_tokens for cost in items]),
        usd=summed_float([cost.usd for cost in items]),
        seconds=summed_float([cost.seconds for cost in items]),
        model=models.pop() if len(models) == 1 else None,
    )
