"""Code in the docs runs, and the documented digest recipe matches what envharness writes."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import encode_record
from envharness.store import read_store

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(), flags=re.DOTALL)


def test_the_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for block in python_blocks(ROOT / "README.md"):
        if '["node"' in block and shutil.which("node") is None:
            continue  # the Node.js example needs node on PATH; everything else runs anywhere
        exec(compile(block, "README.md", "exec"), namespace)
    assert (tmp_path / ".local" / "my-environment" / "evidence.sqlite3").exists()
    # The environment the README teaches must really run.
    harness = EnvironmentHarness(
        tmp_path / "counter",
        environment=namespace["Counter"],
        agents={"a": namespace["IncrementAgent"]},
    )
    input_type = namespace["Input"]
    session = harness.run(Scenario(id="counter", input=input_type(starting_total=9)), turns=3)
    assert session.status == "completed"
    assert session.reason == "the environment reported done at turn 1"


def test_the_documented_digest_recipe_matches(tmp_path: Path) -> None:
    harness = EnvironmentHarness(
        tmp_path, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    session = harness.run(
        Scenario(id="doc", input=SyntheticScenarioInput(starting_total=-2), metadata={"é": 1.5}),
        turns=3,
    )
    [recipe] = [b for b in python_blocks(ROOT / "docs" / "evidence.md") if "hashlib" in b]

    async def lines() -> list[bytes]:
        store = await read_store(tmp_path)
        return [encode_record(row) async for row in store.rows(session.id)]

    import anyio

    for line in anyio.run(lines):
        exec(recipe, {"text": line.decode()})


def test_docs_link_only_to_files_that_exist() -> None:
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            if not (page.parent / target).exists():
                missing.append(f"{page.name} -> {target}")
    assert missing == [], os.linesep.join(missing)
