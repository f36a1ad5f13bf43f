"""The public JSON of an accepted harness version stays readable: a change may add, never take.

One optimizer run (``_harness_store``: harness-v1, then harness-v2) is shown everywhere a user
or a program reads a version — the run directory's files (``report.json``, which is also
``envharness optimize --json``, ``accepted_patch.json``, ``versions/harness-vN.json``), the
command line (``harness list/runs/show --json``), the API (the version list and each version)
and the OpenAPI schemas of those answers. ``version_shapes.json`` holds that JSON as it was;
every key it holds must still be there with the same value and JSON type, at the same place.
New keys are allowed (schema evolution: fields are added with defaults, never retyped).

Values that differ from run to run are replaced before the comparison: ids by their prefix,
times by ``<time>``, wall seconds by ``<seconds>``, bootstrap intervals (seeded by the run's id)
by ``<bound>``s; descriptions in the schemas are prose, not wire. After an additive change,
regenerate the file with ``python -m tests.service.test_version_shapes`` and read its diff:
only additions belong in it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envharness.cli import app
from tests.service._support import World

PINNED = Path(__file__).with_name("version_shapes.json")

CLI = (
    ("harness", "list", "--json"),
    ("harness", "runs", "--json"),
    ("harness", "show", "harness-v1", "--json"),
    ("harness", "show", "harness-v2", "--json"),
)
API = (
    "/api/harness/versions",
    "/api/harness/versions/harness-v1",
    "/api/harness/versions/harness-v2",
)
SCHEMAS = (
    "CodeHook",
    "HarnessDiff",
    "HarnessVersion",
    "HarnessVersionDetail",
    "HarnessVersionPage",
    "HarnessVersionSummary",
    "LedgerEntry",
    "MeasurementFigure",
    "MeasurementSummary",
    "OptimizerRunSummary",
    "VersionRecord",
)

_ID = re.compile(r"(exp|opt|ses)_[0-9a-f]{22}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_VARIES = {"seconds": "<seconds>", "directory": "<directory>", "head_digest": "<digest>"}


def steady(value: Any, key: str | None = None) -> Any:
    """``value`` with what differs from one run to the next replaced by a placeholder."""
    if key == "interval" and isinstance(value, list):  # the bootstrap's seed is keyed by the run
        return ["<bound>" for _ in value]
    if isinstance(value, dict):
        return {k: steady(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [steady(v) for v in value]
    if key in _VARIES and value is not None:
        return _VARIES[key]
    if isinstance(value, str) and _ID.fullmatch(value):
        return f"{value[:3]}_…"
    if isinstance(value, str) and _TIME.fullmatch(value):
        return "<time>"
    return value


def wire_only(schema: Any) -> Any:
    """A schema without its prose (``description`` text), which may change freely."""
    if isinstance(schema, dict):
        return {
            k: wire_only(v)
            for k, v in schema.items()
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [wire_only(v) for v in schema]
    return schema


def lost(old: Any, new: Any, where: str = "$") -> list[str]:
    """Where ``new`` no longer holds what ``old`` held: a missing key, another value or JSON
    type, a list of another length. Keys only ``new`` has are additions, which are fine; a
    schema's ``required`` list may grow (an answer gaining a field)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{where}: was an object, now {type(new).__name__}"]
        found = []
        for key, value in old.items():
            if key not in new:
                found.append(f"{where}.{key}: gone")
            elif key == "required" and isinstance(value, list):
                found += [
                    f"{where}.required: {name} gone" for name in value if name not in new[key]
                ]
            else:
                found += lost(value, new[key], f"{where}.{key}")
        return found
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{where}: was a list of {len(old)}, now {new!r:.80}"]
        return [
            problem
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for problem in lost(a, b, f"{where}[{i}]")
        ]
    if type(old) is not type(new) or old != new:
        return [f"{where}: was {old!r:.80}, now {new!r:.80}"]
    return []


def files_and_cli(store: Path) -> dict[str, Any]:
    """The run directory's JSON files and the command line's ``--json`` answers."""
    [directory] = (store / "optimizer").iterdir()
    files = {
        path.relative_to(directory).as_posix(): json.loads(path.read_text())
        for path in sorted(directory.rglob("*.json"))
    }
    runner, cli = CliRunner(), {}
    for args in CLI:
        result = runner.invoke(app, ["--store", str(store), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        cli[" ".join(args)] = [json.loads(line) for line in result.stdout.splitlines()]
    return {"files": steady(files), "cli": steady(cli)}


async def api_and_schemas(world: World) -> dict[str, Any]:
    """The API's answers about versions, and the OpenAPI schemas they follow."""
    answers = {}
    async with world.client("viewer") as client:
        for path in API:
            response = await client.get(path)
            assert response.status_code == 200, response.text
            answers[path] = response.json()
        schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    return {"api": steady(answers), "openapi": wire_only({name: schemas[name] for name in SCHEMAS})}


def pinned() -> dict[str, Any]:
    value: dict[str, Any] = json.loads(PINNED.read_text())
    return value


def test_the_files_and_the_command_line_keep_their_json(harness_world: World) -> None:
    now = files_and_cli(harness_world.store)
    before = pinned()
    assert lost({k: before[k] for k in ("files", "cli")}, now) == []


@pytest.mark.anyio
async def test_the_api_and_its_schemas_keep_their_json(harness_world: World) -> None:
    now = await api_and_schemas(harness_world)
    before = pinned()
    assert lost({k: before[k] for k in ("api", "openapi")}, now) == []


def test_a_changed_value_a_lost_key_or_a_new_type_is_caught() -> None:
    old = {"a": 1, "b": [1.0, {"c": "x"}], "required": ["a", "b"]}
    assert lost(old, {**old, "d": 2, "required": ["a", "b", "d"]}) == []
    assert lost(old, {"b": old["b"], "required": ["a", "b"]}) == ["$.a: gone"]
    assert lost(old, {**old, "a": 1.0}) == ["$.a: was 1, now 1.0"]
    assert lost(old, {**old, "b": [1.0]}) == ["$.b: was a list of 2, now [1.0]"]
    assert lost(old, {**old, "required": ["b"]}) == ["$.required: a gone"]
    varying = {"id": "opt_01a2338e3e2220726409f7", "at": "2026-12-01T21:41:29.984184Z"}
    assert steady({**varying, "seconds": 0.2, "interval": [0.1, 0.3], "p_value": 0.5}) == {
        "id": "opt_…", "at": "<time>", "seconds": "<seconds>", "interval": ["<bound>"] * 2,
        "p_value": 0.5,
    }  # fmt: skip


if __name__ == "__main__":  # python -m tests.service.test_version_shapes: pin what is there now
    import shutil
    import tempfile

    import anyio

    from tests.service._harness_store import write_harness_versions
    from tests.service._support import make_world

    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "store"
        write_harness_versions(store)
        world = make_world(Path(shutil.copytree(store, Path(scratch) / "served")))
        found = {**files_and_cli(store), **anyio.run(api_and_schemas, world)}
    PINNED.write_text(json.dumps(found, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"pinned {PINNED}", file=sys.stderr)
