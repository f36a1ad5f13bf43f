"""The fake OpenAI-compatible endpoint of the provider tests, for the agent's wire tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm._support import FakeEndpoint, running_endpoint


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeEndpoint, str]]:
    with running_endpoint() as running:
        yield running
