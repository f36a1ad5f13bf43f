"""Fixtures for the model-backed layer: a fake endpoint over real HTTP and a key in the env."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm._support import KEY, FakeEndpoint, running_endpoint


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeEndpoint, str]]:
    with running_endpoint() as running:
        yield running
