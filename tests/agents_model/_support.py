"""Helpers for model-agent tests: scripted answers and a session context without a harness."""

from __future__ import annotations

from typing import Any

from envharness.contracts.agent import AgentContext
from envharness.fixtures import SyntheticEnvironment
from envharness.llm import Completion, ToolCall


def tool_call(arguments: str, *, name: str = "act", id: str = "call_1", **usage: Any) -> Completion:
    """An answer that calls a tool with ``arguments`` (the JSON text the model wrote)."""
    return Completion(
        text="",
        model="scripted",
        tool_calls=(ToolCall(id=id, name=name, arguments=arguments),),
        **usage,
    )


def priced(text: str, *, usd: float, tokens: int = 10) -> Completion:
    """A text answer with a known price and token counts."""
    return Completion(
        text=text, model="scripted", input_tokens=tokens, output_tokens=tokens, usd=usd
    )


class Context:
    """An :class:`AgentContext` for the synthetic environment, with its log kept in a list."""

    def __init__(self, *, session_id: str = "ses_1", seed: int = 7, turn: int | None = 1) -> None:
        self.logs: list[tuple[str, str, str | None]] = []
        self.turn = turn
        self.context = AgentContext(
            session_id=session_id,
            participant="alice",
            role="agent",
            seed=seed,
            turns=10,
            environment=SyntheticEnvironment.spec.reference(),
            log=lambda message, level, stream: self.logs.append((message, level, stream)),
            current_turn=lambda: self.turn,
        )
