"""``tools/dev.py`` says what its first install fetches and roughly how long it takes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

DEV = Path(__file__).resolve().parent.parent / "tools" / "dev.py"


@pytest.fixture(scope="module")
def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("envharness_dev_tool", DEV)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines functions only: main() runs under __main__
    return module


def test_the_demo_install_names_its_packages_and_time(dev: ModuleType) -> None:
    said = dev.describe_install("server")
    assert said.startswith("installing envharness[server] into .venv/ (6 packages: ")
    for name in ("anyio", "msgspec", "typer", "httpx", "starlette", "uvicorn"):
        assert name in said
    assert "about a minute the first time" in said


def test_nested_extras_are_followed_and_the_slowest_time_is_given(dev: ModuleType) -> None:
    said = dev.describe_install("dev,research", again=True)
    assert said.startswith("pyproject.toml changed: updating envharness[dev,research]")
    for name in ("torch", "trl", "trio", "pyarrow", "gymnasium", "textworld", "starlette"):
        assert name in said  # research pulls server and datasets; dev pulls the adapters
    assert "envharness" not in said.partition("packages: ")[2]
    assert "several minutes" in said


def test_the_dev_install_says_it_brings_the_real_engines_and_why(dev: ModuleType) -> None:
    said = dev.describe_install("dev")
    assert "psycopg" in said
    assert "ray" in said
    assert "the postgres and ray extras" in said
    assert "real PostgreSQL" in said
    assert "ray" not in dev.describe_install("server")
