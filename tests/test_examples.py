"""Every example named in the docs runs, as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


SERVES_A_MODEL = {"model_agent.py"}
"""Examples that load SmolLM2: they share the test session's converted checkpoint (one
conversion of ~20 s for the whole run) and, beside other xdist workers, one torch thread."""


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if name in SERVES_A_MODEL:
        request.getfixturevalue("research_cache")  # sets ENVHARNESS_RESEARCH_CACHE for it
    environment = dict(os.environ)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        environment.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout
