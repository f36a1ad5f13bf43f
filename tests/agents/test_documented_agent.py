"""The agent docs/connect-an-agent.md teaches passes the suite, and the page lists every case.

A newcomer copies that agent first; if it stopped passing, the page would teach a broken
program.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from envharness.protocol.conformance import CASES, check_agent
from tests.agents._support import ROOT

PAGE = ROOT / "docs" / "connect-an-agent.md"


def documented_agent() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    [agent] = [block for block in blocks if block.startswith("#!/usr/bin/env python3")]
    return agent


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_documented_minimal_agent_passes(tmp_path: Path) -> None:
    script = tmp_path / "my_agent.py"
    script.write_text(documented_agent())

    report = await check_agent([sys.executable, "-I", "-S", str(script)])

    assert [(r.name, r.status) for r in report.results if r.status != "passed"] == [
        ("snapshot-restore", "skipped")
    ]
    assert report.implementation == "my-agent@1"


def test_the_page_describes_every_case() -> None:
    table = PAGE.read_text().split("| case | your program")[1].split("\n\n")[0]
    described = re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.MULTILINE)
    assert described == [case.name for case in CASES]
