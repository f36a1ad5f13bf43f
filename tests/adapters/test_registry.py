"""Environment references: ``gymnasium:ID``, ``pettingzoo:MODULE``, ``textworld:PATH``,
``module:attribute`` and programs, each mistake named with what was meant."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envharness import ConfigurationError
from envharness.adapters.registry import (
    EnvironmentReference,
    command_environment,
    has_scheme,
    load_environment,
    parse_environment,
)
from envharness.fixtures import SyntheticEnvironment

ROOT = Path(__file__).resolve().parents[2]
NIM = [sys.executable, str(ROOT / "environments" / "python" / "nim.py")]


@pytest.mark.parametrize(
    ("text", "kind", "target"),
    [
        ("gymnasium:FrozenLake-v1", "gymnasium", "FrozenLake-v1"),
        ("Gymnasium: Taxi-v4 ", "gymnasium", "Taxi-v4"),
        ("gymnasium:my_pkg.envs:Maze-v0", "gymnasium", "my_pkg.envs:Maze-v0"),
        ("pettingzoo:classic.leduc_holdem_v4", "pettingzoo", "classic.leduc_holdem_v4"),
        ("pettingzoo:pettingzoo.classic.rps_v2", "pettingzoo", "pettingzoo.classic.rps_v2"),
        ("textworld:games/a b.z8", "textworld", "games/a b.z8"),
        ("my_pkg.envs:Maze.factory", "python", "my_pkg.envs:Maze.factory"),
    ],
)
def test_references_parse_into_a_kind_and_a_target(text: str, kind: str, target: str) -> None:
    parsed = parse_environment(text)

    assert parsed == EnvironmentReference(kind, target)  # type: ignore[arg-type]
    assert has_scheme(text) == (kind != "python")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "environment is empty; give e.g. gymnasium:FrozenLake-v1"),
        ("gymnasium:", "names no gymnasium environment after the colon; e.g. gymnasium:Frozen"),
        ("node my_env.js", "looks like a command line: run a program that speaks the environment"),
        ("my_module", "is not an environment reference: give gymnasium:FrozenLake-v1"),
        ("gymnasiun:Taxi-v4", "did you mean gymnasium:Taxi-v4?"),
        ("a:b:c", "is not an environment reference"),
    ],
)
def test_a_malformed_reference_says_what_a_reference_looks_like(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_environment(text, what="--environment")
    assert message in str(raised.value)


def test_a_gymnasium_id_loads_an_adapter_that_makes_fresh_copies() -> None:
    factory = load_environment("gymnasium:FrozenLake-v1", options={"max_episode_steps": 5})

    first, second = factory(), factory()
    assert first is not second
    assert first.spec == second.spec
    assert first.spec.name == "gymnasium:FrozenLake-v1"


def test_an_unknown_gymnasium_id_names_the_closest() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_environment("gymnasium:FrozenLak-v1", what="--environment")
    text = str(raised.value)
    assert text.startswith("--environment 'gymnasium:FrozenLak-v1': ")
    assert "FrozenLake-v1" in text


def test_an_option_the_adapter_does_not_take_is_named() -> None:
    with pytest.raises(ConfigurationError, match="max_episode_steps must be a positive integer"):
        load_environment("gymnasium:Taxi-v4", options={"max_episode_steps": 0})


def test_a_pettingzoo_module_loads_with_or_without_its_prefix() -> None:
    short = load_environment("pettingzoo:classic.leduc_holdem_v4")
    full = load_environment("pettingzoo:pettingzoo.classic.leduc_holdem_v4")

    assert (short().spec.name, short().spec.version) == (full().spec.name, full().spec.version)
    assert short().spec.turn_order == "environment"


def test_an_unknown_pettingzoo_module_names_the_closest() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_environment("pettingzoo:classic.leduc_holdem_v9")
    assert "leduc_holdem_v4" in str(raised.value)


def test_a_missing_game_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_environment("textworld:games/none.z8", base=tmp_path, what="environment")
    text = str(raised.value)
    assert f"no game file at {str(tmp_path / 'games' / 'none.z8')!r}" in text
    assert "relative to the manifest's folder" in text
    assert "tw-make" in text


@pytest.mark.parametrize(
    ("scheme", "extra"),
    [("gymnasium:Taxi-v4", "gymnasium"), ("pettingzoo:classic.rps_v2", "pettingzoo")],
)
def test_a_missing_package_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, scheme: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # importing it now raises ImportError

    with pytest.raises(ConfigurationError) as raised:
        load_environment(scheme)
    assert f'pip install "envharness[{extra}]"' in str(raised.value)


def test_a_python_reference_loads_the_factory_itself_or_with_options() -> None:
    plain = load_environment("envharness.fixtures:SyntheticEnvironment")
    bound = load_environment("tests.adapters.test_registry:Sized", options={"size": 3})

    assert plain is SyntheticEnvironment
    made = bound()
    assert isinstance(made, Sized)
    assert made.size == 3
    assert "size=3" in repr(bound)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("envharness.fixtures:SynthEnvironment",
         "envharness.fixtures has no attribute 'SynthEnvironment'; the closest names there: "
         "SyntheticEnvironment"),
        ("no_such_module_4c1e:Env", "no module named 'no_such_module_4c1e'"),
        ("envharness.fixtures:__name__", "is a str, not an environment class or factory"),
    ],
)  # fmt: skip
def test_a_bad_python_reference_is_named(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_environment(text, what="ENVIRONMENT")
    assert str(raised.value).startswith(f"ENVIRONMENT {text!r}")
    assert message in str(raised.value)


def test_a_command_loads_a_program_environment() -> None:
    from envharness.adapters.process import ProcessEnvironment

    factory = command_environment(NIM)

    assert isinstance(factory, ProcessEnvironment)
    assert factory.spec.name == "nim"
    assert factory() is not factory


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "--environment-command is empty"),
        ("node 'open", 'cannot split "node \'open" into words'),
        ("no-such-program-4c1e", "no-such-program-4c1e"),
    ],
)
def test_a_bad_command_is_named(command: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        command_environment(command)
    assert message in str(raised.value)


class Sized:
    """A factory that takes options (a manifest's ``[environment] options``)."""

    def __init__(self, size: int) -> None:
        self.size = size
