"""protocol/schema/ is generated from the message types; a stale file fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from envharness.protocol import AGENT_MESSAGE_TYPES, HOST_MESSAGE_TYPES, render_schemas

ROOT = Path(__file__).resolve().parents[2]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_protocol_schema", ROOT / "tools" / "gen_protocol_schema.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_schema_is_current() -> None:
    tool = load_tool()
    assert tool.stale_files() == [], "run: python tools/gen_protocol_schema.py"
    assert tool.main(["--check"]) == 0


def test_check_reports_stale_and_leftover_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = load_tool()
    shutil.copytree(ROOT / "protocol" / "schema", tmp_path, dirs_exist_ok=True)
    (tmp_path / "host-to-agent.json").write_text("{}\n")
    (tmp_path / "retired.json").write_text("{}\n")
    assert tool.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "host-to-agent.json" in capsys.readouterr().err
    assert tool.main(["--dir", str(tmp_path)]) == 0
    assert tool.main(["--check", "--dir", str(tmp_path)]) == 0
    assert not (tmp_path / "retired.json").exists()


def test_output_is_deterministic_and_names_every_type() -> None:
    first, second = render_schemas(), render_schemas()
    assert first == second
    for name, text in first.items():
        assert text.endswith("}\n")
        document = json.loads(text)
        assert document["$schema"].endswith("2020-12/schema")
        expected = HOST_MESSAGE_TYPES if name.startswith("host") else AGENT_MESSAGE_TYPES
        assert set(document["discriminator"]["mapping"]) == expected
