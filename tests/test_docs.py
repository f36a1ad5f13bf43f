"""Code in the docs runs, and the documented digest recipe matches what envharness writes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.contracts.environment import Resolution, ScoreReport
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


# Floats whose JSON forms differ between writers: Python's json writes 1e+16, 1e-07 and 3e-05
# where msgspec (which writes what envharness stores) writes 1e16, 1e-7 and 0.00003.
AWKWARD_FLOATS = {"big": 1e16, "tiny": 1e-7, "small": 3e-05, "huge": 1.5e300, "third": 1 / 3}


class AwkwardSignals(SyntheticEnvironment):
    def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        resolution = super().resolve(state, actions)
        return dataclasses.replace(resolution, signals={**resolution.signals, **AWKWARD_FLOATS})

    def score(self, state: Any, scenario: Scenario[Any]) -> ScoreReport:
        report = super().score(state, scenario)
        return dataclasses.replace(report, metrics={**report.metrics, **AWKWARD_FLOATS})


def test_the_documented_digest_recipe_matches(tmp_path: Path) -> None:
    harness = EnvironmentHarness(
        tmp_path, environment=AwkwardSignals, agents={"alice": SyntheticAgent}
    )
    metadata = {"é": 1.5, **AWKWARD_FLOATS, "nested": {"z": 2e-9, "a": [1e21, -4e-6]}}
    session = harness.run(
        Scenario(id="doc", input=SyntheticScenarioInput(starting_total=-2), metadata=metadata),
        turns=3,
    )
    [recipe] = [b for b in python_blocks(ROOT / "docs" / "evidence.md") if "hashlib" in b]

    async def lines() -> list[bytes]:
        store = await read_store(tmp_path)
        return [encode_record(row) async for row in store.rows(session.id)]

    exported = anyio.run(lines)
    kinds = {json.loads(line)["kind"] for line in exported}
    assert {"session.created", "outcome", "score"} <= kinds
    # The floats are in the stored bytes in msgspec's form, which Python's json does not
    # reproduce: a recipe that re-serialises the payload fails on these lines.
    assert b'"big":1e16' in exported[0]
    assert b'"small":0.00003' in exported[0]
    assert not all(_json_reserialised_digest_matches(line) for line in exported)
    # Compiled as the reader would run it: not under this module's __future__ imports.
    code = compile(recipe, "docs/evidence.md", "exec", dont_inherit=True)
    for line in exported:
        exec(code, {"text": line.decode()})


def _json_reserialised_digest_matches(line: bytes) -> bool:
    """The recipe these docs once gave: decode with ``json``, re-encode with sorted keys."""
    fields = json.loads(line)
    body = {key: value for key, value in fields.items() if key != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return bool(hashlib.sha256(canonical.encode()).hexdigest() == fields["digest"])


def test_docs_link_only_to_files_that_exist() -> None:
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            if not (page.parent / target).exists():
                missing.append(f"{page.name} -> {target}")
    assert missing == [], os.linesep.join(missing)
