"""The root options reach each command as a ``CliState`` on the context, so a module's app runs
on its own, given the state, and ``--store`` given or not is told apart from the default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from envharness.cli import app, sessions, tokens
from envharness.cli.state import DEFAULT_STORE, STORE_ENV, CliState
from envharness.errors import ConfigurationError


def test_a_module_app_runs_alone_given_the_state(quickstart_store: Path) -> None:
    state = CliState(location=quickstart_store, store_given=True)

    alone = CliRunner().invoke(sessions.app, ["sessions", "--json"], obj=state)
    whole = CliRunner().invoke(app, ["--store", str(quickstart_store), "sessions", "--json"])

    assert alone.exit_code == 0, alone.output
    assert alone.stdout == whole.stdout
    assert [json.loads(line)["id"] for line in alone.stdout.splitlines()]


def test_a_group_app_runs_alone_given_the_state(quickstart_store: Path) -> None:
    result = CliRunner().invoke(tokens.app, ["list"], obj=CliState(location=quickstart_store))

    assert result.exit_code == 0, result.output
    assert "no tokens" in result.stderr


def _probe() -> typer.Typer:
    """A root with the same ``--store`` as the real one and a command that shows the state."""
    probe = typer.Typer()

    @probe.callback()
    def root(
        ctx: typer.Context,
        store: Annotated[str, typer.Option("--store", envvar=STORE_ENV)] = str(DEFAULT_STORE),
    ) -> None:
        ctx.obj = CliState.parsed(ctx, store)

    @probe.command()
    def state(ctx: typer.Context) -> None:
        found = CliState.of(ctx, postgres=True)
        typer.echo(f"{found.location} {found.store_given}")

    @probe.command()
    def directory(ctx: typer.Context) -> None:
        typer.echo(CliState.of(ctx).store)

    return probe


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, f"{DEFAULT_STORE} False"),
        (["--store", "~/evidence"], {}, f"{Path('~/evidence').expanduser()} True"),
        ([], {STORE_ENV: "from-env"}, "from-env True"),
        (["--store", "postgresql://envh@db/ev"], {}, "postgresql://envh@db/ev True"),
        ([], {STORE_ENV: "postgres://envh@db/ev"}, "postgres://envh@db/ev True"),
    ],
)
def test_the_state_tells_a_named_store_from_the_default(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    result = CliRunner().invoke(_probe(), [*args, "state"], env=env)

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == expected


def test_a_command_without_the_root_gets_the_defaults() -> None:
    ctx = typer.Context(typer.main.get_command(sessions.app))

    assert CliState.of(ctx) == CliState(location=DEFAULT_STORE, store_given=False)


def test_a_command_that_reads_a_directory_refuses_a_url_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    result = CliRunner().invoke(_probe(), ["--store", "postgresql://envh@db/ev", "directory"])

    assert result.exit_code == 1  # the probe has no error edge: the error itself comes out
    assert isinstance(result.exception, ConfigurationError)
    assert "directory` does not work on a PostgreSQL store yet" in str(result.exception)
