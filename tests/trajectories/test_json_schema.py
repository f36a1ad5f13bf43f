"""protocol/schema/trajectory.json is generated from the types; a stale copy fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envharness.trajectories import SCHEMA_VERSION, Trajectory
from envharness.trajectories.json_schema import render_trajectory_schemas
from tests.protocol.test_schema import ROOT, load_tool


def test_the_committed_trajectory_schema_is_current() -> None:
    for name, text in render_trajectory_schemas().items():
        path = ROOT / "protocol" / "schema" / name
        assert path.read_text("utf-8") == text, "run: python tools/gen_protocol_schema.py"


def test_a_stale_trajectory_schema_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = load_tool()
    shutil.copytree(ROOT / "protocol" / "schema", tmp_path, dirs_exist_ok=True)
    document = json.loads((tmp_path / "trajectory.json").read_text())
    del document["$defs"]["Trajectory"]["properties"]["collection"]
    (tmp_path / "trajectory.json").write_text(json.dumps(document))
    assert tool.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "trajectory.json" in capsys.readouterr().err


def test_the_schema_names_its_version_and_every_state() -> None:
    document = json.loads(render_trajectory_schemas()["trajectory.json"])
    assert f"schema version {SCHEMA_VERSION}" in document["title"]
    properties = document["$defs"]["Trajectory"]["properties"]
    assert {"collection", "execution", "termination", "outcome", "journal"} <= set(properties)
    assert set(Trajectory.__struct_fields__) == set(properties)
    export = json.loads(render_trajectory_schemas()["snapshot-export.json"])
    assert set(export["discriminator"]["mapping"]) == {"snapshot", "trajectory", "record"}
