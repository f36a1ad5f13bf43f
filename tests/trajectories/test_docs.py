"""The Python in docs/trajectories.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_trajectories_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "trajectories.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {"__name__": "trajectories_doc", "print": lambda *a: None}
    for block in blocks:
        exec(compile(block, "docs/trajectories.md", "exec"), namespace)
    rows = namespace["rows"]
    assert isinstance(rows, list)
    assert rows[0].reward == 1.0
    assert rows[0].messages[0].role == "user"
