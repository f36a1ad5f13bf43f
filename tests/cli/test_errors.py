"""Every mistake is one ``error:`` line and exit status 2; reading never creates a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness import __version__
from tests.cli._support import Invoke

READ_COMMANDS = [
    ("sessions", "list"),
    ("verify",),
    ("sessions", "show", "ses_x"),
    ("export", "ses_x"),
]


RUN = (
    "run", "envharness.fixtures:SyntheticEnvironment", "--agent",
    "alice=envharness.fixtures:SyntheticAgent", "--turns", "1", "--input", '{"starting_total": 0}',
)  # fmt: skip


@pytest.mark.parametrize("command", [*READ_COMMANDS, ("quickstart",), RUN])
def test_a_store_path_that_is_a_file(
    invoke: Invoke, tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = tmp_path / "evidence.txt"
    path.write_text("not a store")

    result = invoke("--store", path, *command)

    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: store path '{path}' is a file")
    assert len(result.stderr.splitlines()) == 1
    assert path.read_text() == "not a store"


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_a_missing_store_is_reported_and_not_created(
    invoke: Invoke, store_path: Path, command: tuple[str, ...]
) -> None:
    result = invoke("--store", store_path, *command)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: no evidence store at '{store_path}'")
    assert not store_path.exists()


def test_the_store_comes_from_the_environment_then_the_default(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    default = invoke("sessions")
    monkeypatch.setenv("ENVHARNESS_STORE", str(tmp_path / "from-env"))
    from_env = invoke("sessions")

    assert "no evidence store at 'environment-sessions'" in default.stderr
    assert f"no evidence store at '{tmp_path / 'from-env'}'" in from_env.stderr


def test_version(invoke: Invoke) -> None:
    result = invoke("--version")

    assert result.exit_code == 0
    assert result.stdout == f"envharness {__version__}\n"


def test_a_usage_mistake_exits_2(invoke: Invoke, store_path: Path) -> None:
    result = invoke("--store", store_path, "run", "x:y", "--turns", "1")  # no --agent

    assert result.exit_code == 2
    assert "--agent" in result.stderr
    assert not store_path.exists()
