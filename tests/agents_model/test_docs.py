"""The Python blocks of docs/model-agents.md run, against the fake endpoint named by
OPENAI_BASE_URL, and the page documents exactly the template fields there are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envharness.agents.template import SYSTEM_FIELDS, USER_FIELDS
from tests.llm._support import KEY, FakeEndpoint, completion

DOC = Path(__file__).resolve().parents[2] / "docs" / "model-agents.md"


def test_the_python_blocks_of_the_guide_run(
    endpoint: tuple[FakeEndpoint, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake, url = endpoint
    fake.default = completion('I will add one.\n```json\n{"value": 1}\n```')
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    for number, block in enumerate(blocks):
        exec(compile(block, f"docs/model-agents.md block {number}", "exec"), {"__name__": "docs"})
    assert len(fake.requests) == 5  # the first block's five turns reached the target
    assert all(request.body["model"] == "gpt-4o-mini" for request in fake.requests)
    assert all(request.body["tools"][0]["function"]["name"] == "act" for request in fake.requests)


def test_the_guide_lists_every_template_field() -> None:
    text = DOC.read_text()
    tables = re.findall(r"^\| (?:system|user) part \|.*?\n\n", text, flags=re.DOTALL | re.MULTILINE)
    documented = set(re.findall(r"`\$(\w+)`", "".join(tables)))
    assert documented == set(SYSTEM_FIELDS) | set(USER_FIELDS)
