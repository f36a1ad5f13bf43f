"""The optimizer guide's code runs as written (docs/optimizer.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_user_story_in_the_guide_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    guide = (ROOT / "docs" / "optimizer.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)
    assert blocks, "the guide shows the user story in Python"
    namespace: dict[str, object] = {"__name__": "guide"}
    for block in blocks:
        exec(compile(block, "docs/optimizer.md", "exec"), namespace)
    assert capsys.readouterr().out.strip() == "0.0 -> 1.0 harness-v1"
    session = namespace["session"]
    assert getattr(session, "status", None) == "completed"
