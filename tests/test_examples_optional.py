"""An example that needs an optional package says so in one line when it is missing.

The package is hidden the way a venv without it behaves for ``import``: ``sys.modules[name]
= None`` makes importing it raise :class:`ModuleNotFoundError`, whatever is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HIDE_AND_RUN = (
    "import runpy, sys\n"
    "sys.modules[sys.argv[1]] = None\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


@pytest.mark.parametrize(
    ("example", "hidden", "says"),
    [
        ("async_run.py", "trio", "which is missing: pip install trio"),
        ("gymnasium_taxi.py", "gymnasium", 'needs gymnasium: pip install "envharness[gymnasium]"'),
        ("pettingzoo_poker.py", "rlcard", 'needs rlcard: pip install "envharness[pettingzoo]"'),
        ("textworld_game.py", "textworld", 'needs textworld: pip install "envharness[textworld]"'),
        ("model_agent.py", "torch", 'needs torch: pip install "envharness[research]"'),
    ],
)
def test_an_example_without_its_package_says_so_in_one_line(
    example: str, hidden: str, says: str, tmp_path: Path
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    result = subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN, hidden, str(EXAMPLES / example), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr  # one line: no traceback
    assert result.stderr.startswith(example)
    assert says in result.stderr
    assert result.stdout == ""
    assert not any(tmp_path.iterdir())  # refused before anything was written
