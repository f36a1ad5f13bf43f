"""A scripted chat model behind the research folder's OpenAI-compatible server, on loopback.

The server is the real one (``research/serve_openai.py``: its routes, its validation, its bearer
check, its usage counts); only the model is scripted, so tests of model agents named on a
command line or in a manifest run in milliseconds, need no torch, and can see every request.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from research.serve_openai import ChatModel, ChatResult, serving

__all__ = ["ScriptedChat", "scripted_server"]


class ScriptedChat(ChatModel):
    """Answers every request with ``answer(messages)``; keeps what it was asked."""

    def __init__(
        self,
        name: str = "scripted-chat",
        answer: Callable[[list[dict[str, str]]], str] | None = None,
    ) -> None:
        super().__init__(None, None, name=name)  # no weights: the answers are scripted
        self.answer = answer or (lambda messages: json.dumps({"value": 1}))
        self.requests: list[list[dict[str, str]]] = []
        self.options: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[dict[str, str]], **options: Any) -> ChatResult:
        asked = [dict(message) for message in messages]
        with self._lock:
            self.requests.append(asked)
            self.options.append(options)
        text = self.answer(asked)
        prompt = sum(len(message["content"].split()) for message in asked)
        return ChatResult(
            text=text,
            prompt_tokens=prompt,
            completion_tokens=len(text.split()),
            finish_reason="stop",
        )


@contextlib.contextmanager
def scripted_server(chat: ScriptedChat, *, api_key: str | None = None) -> Iterator[str]:
    """Serve ``chat`` on a free loopback port; yield the API root (``http://127.0.0.1:P/v1``)."""
    with serving(chat, api_key=api_key) as root:
        yield root
