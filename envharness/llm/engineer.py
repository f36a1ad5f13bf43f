"""An engineer backed by a chat model: the failure packet in a versioned prompt, K answers back.

:class:`ModelEngineer` renders the packet into its prompt, asks the provider ``count`` times
concurrently (bounded by a capacity limiter) and returns each raw answer as a
:class:`~envharness.optimizer.Proposal` with its cost. It does not parse the answers: the
optimizer parses, validates and sandboxes every engineer's proposals the same way. A call that
fails for good (endpoint down, refusing, answering garbage through all retries) becomes a
proposal with ``error`` set, so one bad call costs one candidate, never the run.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from envharness.errors import ConfigurationError
from envharness.llm.prompt import PromptTemplate, RenderLimits, load_prompt, render_packet
from envharness.llm.provider import Message, Provider, ProviderError
from envharness.optimizer import FailurePacket, Proposal
from envharness.records import Cost

__all__ = ["SEED_MODULUS", "ModelEngineer"]

SEED_MODULUS = 2**31
"""Seeds sent to the endpoint are reduced below this (some servers take only 32-bit seeds)."""


class ModelEngineer:
    """Proposes patches by asking a chat model (see the module doc).

    ``prompt`` is a packaged prompt's name, a prompt file's path, or a loaded template.
    Sampling uses ``temperature`` and ``top_p`` (0.7 and 0.95, as Harness-R1 samples its
    candidates); a single proposal is asked for greedily (temperature 0) unless
    ``greedy_single`` is off. Call ``i`` of a batch gets the seed ``seed + i``, so endpoints that
    honour seeds still give distinct samples, and a rerun asks the same questions.
    ``max_concurrency`` bounds the calls in flight; pass ``limiter`` to share one bound between
    engineers. ``name`` defaults to the provider's (``"openai"`` for an OpenAI-compatible one).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        prompt: str | Path | PromptTemplate = "engineer-v1",
        temperature: float = 0.7,
        top_p: float = 0.95,
        greedy_single: bool = True,
        max_tokens: int | None = 4096,
        max_concurrency: int = 8,
        limiter: anyio.CapacityLimiter | None = None,
        limits: RenderLimits | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(provider, Provider):
            raise ConfigurationError(
                f"provider must be a Provider (name, model and async complete()), not {provider!r}"
            )
        if not 0.0 <= temperature <= 2.0:
            raise ConfigurationError(f"temperature must be between 0 and 2, not {temperature!r}")
        if not 0.0 < top_p <= 1.0:
            raise ConfigurationError(f"top_p must be more than 0 and at most 1, not {top_p!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be at least 1 (or None), not {max_tokens!r}")
        if max_concurrency < 1:
            raise ConfigurationError(f"max_concurrency must be at least 1, not {max_concurrency!r}")
        self._provider = provider
        self._prompt = prompt if isinstance(prompt, PromptTemplate) else load_prompt(prompt)
        self._temperature = temperature
        self._top_p = top_p
        self._greedy_single = greedy_single
        self._max_tokens = max_tokens
        self._max_concurrency = max_concurrency
        self._limiter = limiter
        self._limits = limits or RenderLimits()
        self._name = name or provider.name

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        """The prompt's version and the model: ``engineer-v1@<digest>/<model>``."""
        return f"{self._prompt.version}/{self._provider.model}"

    @property
    def prompt(self) -> PromptTemplate:
        return self._prompt

    def messages(self, packet: FailurePacket) -> list[Message]:
        """The messages every call about ``packet`` sends (to inspect or log a prompt)."""
        return render_packet(self._prompt, packet, self._limits)

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        """``count`` raw answers, in call order; failed calls come back with ``error`` set."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigurationError(f"count must be a positive integer, not {count!r}")
        messages = self.messages(packet)
        greedy = count == 1 and self._greedy_single
        temperature, top_p = (0.0, 1.0) if greedy else (self._temperature, self._top_p)
        limiter = self._limiter or anyio.CapacityLimiter(self._max_concurrency)
        proposals: list[Proposal | None] = [None] * count

        async def ask(index: int) -> None:
            async with limiter:
                started = anyio.current_time()
                try:
                    completion = await self._provider.complete(
                        messages,
                        temperature=temperature,
                        top_p=top_p,
                        max_tokens=self._max_tokens,
                        seed=(seed + index) % SEED_MODULUS,
                    )
                except ProviderError as exc:
                    proposals[index] = self._failed(str(exc), started)
                    return
                except Exception as exc:  # noqa: BLE001 - a provider plugin's bug costs one candidate
                    proposals[index] = self._failed(f"{type(exc).__name__}: {exc}", started)
                    return
            proposals[index] = Proposal(
                engineer=self._name, text=completion.text, cost=completion.cost()
            )

        async with anyio.create_task_group() as group:
            for index in range(count):
                group.start_soon(ask, index)
        return [proposal for proposal in proposals if proposal is not None]

    def _failed(self, error: str, started: float) -> Proposal:
        cost = Cost(seconds=anyio.current_time() - started, model=self._provider.model)
        return Proposal(engineer=self._name, error=error, cost=cost)
