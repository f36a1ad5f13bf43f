"""Manifests naming adapted environments: ``environment = "pettingzoo:..."``, an adapter as
``factory`` with ``options``, and a program as ``command`` — and their mistakes, by line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from envharness.manifest import ManifestError, load_manifest
from envharness.records import Outcome

ROOT = Path(__file__).resolve().parent.parent
NIM = ROOT / "environments" / "python" / "nim.py"

POKER = """\
environment = "pettingzoo:classic.leduc_holdem_v4"

[experiment]
name = "poker"
turns = 20

[agents.player_0]
factory = "tests.test_manifest_environments:Folder"

[agents.player_1]
factory = "tests.test_manifest_environments:Folder"

[[scenarios.items]]
id = "hand"
input = { seed = 1 }
"""

LAKE = """\
[experiment]
name = "lake"
turns = 50

[environment]
factory = "gymnasium:FrozenLake-v1"
options = { max_episode_steps = 2, is_slippery = false }

[agents.walker]
factory = "tests.test_manifest_environments:Folder"

[[scenarios.items]]
id = "seed-1"
input = { seed = 1 }
"""

PROGRAM = """\
[experiment]
name = "nim"
turns = 30

[environment]
command = ["{python}", "nim.py"]
cwd = "programs"

[agents.first]
factory = "tests.test_manifest_environments:Taker"

[agents.second]
factory = "tests.test_manifest_environments:Taker"

[[scenarios.items]]
id = "small"
input = { heaps = [2, 1] }
"""


class Folder:
    """The first legal action, or 0 (FrozenLake's left: never into a hole from the start)."""

    implementation = "folder@1"

    def act(self, observation: Any) -> dict[str, int]:
        legal = observation.get("legal_actions") or [0]
        return {"action": legal[0]}


class Taker:
    implementation = "taker@1"

    def act(self, observation: dict[str, Any]) -> dict[str, int]:
        heap = next(i for i, stones in enumerate(observation["heaps"]) if stones)
        return {"heap": heap, "take": 1}


def write(folder: Path, text: str) -> Path:
    path = folder / "experiment.toml"
    path.write_text(text)
    return path


def test_a_pettingzoo_game_named_alone_runs(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, POKER))

    assert manifest.environment == "pettingzoo:classic.leduc_holdem_v4"
    result = manifest.experiment(tmp_path / "store").run()
    assert (result.completed, result.total) == (1, 1)


def test_an_adapter_takes_its_options(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, LAKE))
    result = manifest.experiment(tmp_path / "store").run()

    [session] = result.sessions
    assert session.result.status == "completed"
    assert session.result.turns_completed == 2  # the time limit the options set
    assert "truncated" in (session.result.reason or "")


def test_an_environment_program_runs_in_its_folder(tmp_path: Path) -> None:
    (tmp_path / "programs").mkdir()
    (tmp_path / "programs" / "nim.py").write_text(NIM.read_text())
    manifest = load_manifest(write(tmp_path, PROGRAM))

    assert manifest.environment_program is not None
    assert manifest.environment_program.command == (sys.executable, "nim.py")
    assert manifest.environment == f"{sys.executable} nim.py"
    harness = manifest.harness(tmp_path / "store")
    result = manifest.experiment(tmp_path / "store").run()
    [session] = result.sessions
    assert session.result.status == "completed"
    records = list(harness.records(session.result.id))
    assert sum(isinstance(record.payload, Outcome) for record in records) == 3


BAD = [
    pytest.param(POKER, 'environment = "pettingzoo:classic.leduc_holdem_v4"',
                 'environment = "pettingzoo:"', 1, "environment",
                 "names no pettingzoo environment after the colon", id="empty-target"),
    pytest.param(POKER, 'environment = "pettingzoo:classic.leduc_holdem_v4"',
                 'environment = "leduc"', 1, "environment", "'leduc' is not module:attribute",
                 id="not-a-reference"),
    pytest.param(LAKE, 'factory = "gymnasium:FrozenLake-v1"',
                 'factory = "gymnasium:FrozenLake-v1"\ncommand = ["x"]', 7, "environment.command",
                 "not both", id="both"),
    pytest.param(PROGRAM, 'cwd = "programs"', 'cwd = "programs"\noptions = { a = 1 }', 8,
                 "environment.options", "options apply to a factory or an adapter", id="options"),
    pytest.param(LAKE, "options = {", 'env = { A = "1" }\noptions = {', 7, "environment.env",
                 "env applies to an environment program only", id="env-with-factory"),
    pytest.param(PROGRAM, 'cwd = "programs"', 'cwd = "elsewhere"', 7, "environment.cwd",
                 "does not exist", id="cwd"),
    pytest.param(PROGRAM, 'command = ["{python}", "nim.py"]', "command = []", 6,
                 "environment.command", "is empty", id="empty-command"),
    pytest.param(LAKE, 'factory = "gymnasium:FrozenLake-v1"', "", 5, "environment",
                 'factory = "gymnasium:FrozenLake-v1"', id="neither"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "old", "new", "line", "key", "message"), BAD)
def test_a_bad_environment_is_named_by_line_and_key(
    tmp_path: Path, text: str, old: str, new: str, line: int, key: str, message: str
) -> None:
    (tmp_path / "programs").mkdir()
    assert text.count(old) == 1
    with pytest.raises(ManifestError) as raised:
        load_manifest(write(tmp_path, text.replace(old, new)))

    assert (raised.value.line, raised.value.key) == (line, key)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "message"),
    [
        ('"gymnasium:FrozenLake-v1"', '"gymnasium:FrozenLak-v1"', 6, "environment.factory",
         "unknown Gymnasium environment id 'FrozenLak-v1'; did you mean FrozenLake-v1"),
        ("max_episode_steps = 2", "max_episode_steps = 0", 6, "environment.factory",
         "max_episode_steps must be a positive integer"),
        ('"gymnasium:FrozenLake-v1"', '"textworld:games/none.z8"', 6, "environment.factory",
         "(relative to the manifest's folder)"),
    ],
)  # fmt: skip
def test_an_adapter_that_cannot_be_made_is_named_when_building(
    tmp_path: Path, old: str, new: str, line: int, key: str, message: str
) -> None:
    manifest = load_manifest(write(tmp_path, LAKE.replace(old, new)))

    with pytest.raises(ManifestError) as raised:
        manifest.async_harness(tmp_path / "store")

    assert (raised.value.line, raised.value.key) == (line, key)
    assert message in str(raised.value)
    assert not (tmp_path / "store").exists()


def test_a_missing_environment_mentions_the_short_form(tmp_path: Path) -> None:
    text = POKER.replace('environment = "pettingzoo:classic.leduc_holdem_v4"\n', "")

    with pytest.raises(ManifestError, match=r'or environment = "gymnasium:FrozenLake-v1" before'):
        load_manifest(write(tmp_path, text))
