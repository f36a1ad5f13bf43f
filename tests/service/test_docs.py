"""The Python examples in docs/api.md run against the real app."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import envharness.client
from tests.service._support import World

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_api_docs_python_examples_run(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions, experiments, lineage, *_ = re.findall(  # the rest: test_trajectory_api.py
        r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL
    )
    real = envharness.client.Client

    def over_the_app(base_url: str, token: str | None = None, **options: Any) -> Any:
        return real(base_url, token, transport=httpx.ASGITransport(world.app))

    monkeypatch.setattr(envharness.client, "Client", over_the_app)
    monkeypatch.setenv("ENVHARNESS_TOKEN", world.secrets["viewer"])
    exec(compile(sessions, str(DOC), "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out.splitlines()
    assert any(line.endswith("blocked") for line in printed)
    assert printed[-1].split()[1] == "segment.ended"
    exec(compile(experiments, str(DOC), "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("quickstart sweep 10 of 10 {('warm-up', 0): 'completed', ")
    assert [line.split()[0] for line in printed[1:]].count("SessionCreatedEvent") == 10
    assert printed[-1].startswith("ExperimentStatusEvent  ")
    exec(compile(lineage, str(DOC), "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith(" {'kind': 'reset-total', 'value': 0} what if the total were reset")
    assert printed[1].split() == ["total", "-4.0", "->", "-2.0"]
    assert "observation" in printed[-1]
