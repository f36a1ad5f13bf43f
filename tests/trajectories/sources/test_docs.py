"""docs/imports.md: its worked example runs, and the hash recipe it teaches is ours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "imports.md"


def test_the_worked_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks, "docs/imports.md lost its worked example"
    namespace: dict[str, object] = {"__name__": "imports_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert (tmp_path / "imports-demo" / "evidence.sqlite3").exists()
    assert (tmp_path / "run.jsonl").read_text(encoding="utf-8").count("\n") == 5


def test_the_documented_formats_and_kinds_are_the_real_ones() -> None:
    from envharness.trajectories.sources import FORMATS
    from envharness.trajectories.sources.kinds import EndStatus

    text = DOC.read_text()
    for name in FORMATS:
        assert f"`{name}`" in text
    assert "`completed`, `failed`, `stopped`, `interrupted`" in text
    assert EndStatus.__args__ == ("completed", "failed", "stopped", "interrupted")  # type: ignore[attr-defined]
