"""The Python blocks of docs/llm.md run, against the fake endpoint named by OPENAI_BASE_URL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.llm._support import FakeEndpoint

DOC = Path(__file__).resolve().parents[2] / "docs" / "llm.md"


def test_the_python_blocks_of_the_guide_run(
    endpoint: tuple[FakeEndpoint, str], api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, url = endpoint
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 5
    for number, block in enumerate(blocks):
        exec(compile(block, f"docs/llm.md block {number}", "exec"), {"__name__": "docs"})
    # The first block made one call, the engineer block four.
    assert len(fake.requests) == 5
    assert {request.body["model"] for request in fake.requests} == {"gpt-4o-mini"}
