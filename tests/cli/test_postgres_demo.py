"""``quickstart`` and ``selftest`` on a PostgreSQL store: the demo records into the database what
it records into a directory, its suggested commands run as printed with no password in them,
and a database or role that cannot take the demo is refused by name before anything runs."""

from __future__ import annotations

import json
import re
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner, Result

from envharness.cli import app
from envharness.store.locate import without_password
from tests import _engines
from tests.cli._support import Invoke

SECRET = f"secret-{secrets.token_hex(6)}"
TURNS = "2"
_IDS = re.compile(r"\b(ses_|exp_|snp_|quickstart-)[0-9a-f]+")
"""Ids are new in every run: the one thing two demos do not share."""


def _with_secret(server: _engines.PostgresServer, url: str, role: str | None = None) -> str:
    """``url`` with a password (which the trusting test server never checks) and ``role``."""
    return url.replace(f"://{server.user}@", f"://{role or server.user}:{SECRET}@", 1)


def _quickstart(store: str | Path) -> Result:
    result = CliRunner().invoke(app, ["--store", str(store), "quickstart", "--turns", TURNS])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def demos(
    postgres_server: _engines.PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Result, Path, Result]]:
    """The quickstart recorded into a new database (by a URL with a password) and into a new
    directory, with what each printed."""
    directory = tmp_path_factory.mktemp("pgdemo") / "store"
    with _engines.fresh_database(postgres_server, "pgdemo") as url:
        url = _with_secret(postgres_server, url)
        yield url, _quickstart(url), directory, _quickstart(directory)


def _anonymous(output: str, store: str) -> list[str]:
    return _IDS.sub(r"\1ID", output.replace(store, "STORE")).splitlines()


def test_quickstart_prints_for_a_database_what_it_prints_for_a_directory(
    demos: tuple[str, Result, Path, Result],
) -> None:
    url, on_postgres, directory, on_sqlite = demos
    shown, had_password = without_password(url)

    assert had_password
    assert SECRET not in on_postgres.output
    postgres_lines = _anonymous(on_postgres.stdout, shown)
    assert postgres_lines[-1] == (
        "the password in the URL is left out of these commands: they take it from "
        "~/.pgpass or $PGPASSWORD (docs/postgresql.md)"
    )
    assert postgres_lines[:-1] == _anonymous(on_sqlite.stdout, str(directory.resolve()))
    assert "the password" not in on_sqlite.stdout


def test_sessions_and_verify_say_the_same_of_both_demos(
    invoke: Invoke, demos: tuple[str, Result, Path, Result]
) -> None:
    url, _, directory, _ = demos

    def listed(store: str | Path) -> list[tuple[object, ...]]:
        result = invoke("--store", store, "sessions", "list", "--json")
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        return sorted(
            (row["experiment_id"] is None, row["scenario_id"], row["status"], row["reason"],
             row["turns_completed"], row["records"])
            for row in rows
        )  # fmt: skip

    on_postgres = invoke("--store", url, "verify")
    on_sqlite = invoke("--store", directory, "verify")

    assert len(listed(url)) == 14
    assert listed(url) == listed(directory)
    assert on_postgres.exit_code == on_sqlite.exit_code == 0, on_postgres.output
    assert on_postgres.stdout == on_sqlite.stdout
    assert on_postgres.stdout.rstrip().endswith(": OK")


def test_the_suggested_commands_run_as_printed(
    invoke: Invoke, demos: tuple[str, Result, Path, Result]
) -> None:
    _, on_postgres, _, _ = demos
    lines = on_postgres.stdout.splitlines()
    suggested = [shlex.split(line) for line in lines[lines.index("next:") + 1 : -1]]
    assert suggested[0][-2:] == ["serve", "--open"]  # not run: it serves until stopped
    assert [words[0] for words in suggested] == ["envharness"] * 6

    for words in suggested[1:]:
        if "|" in words:
            words = words[: words.index("|")]
        result = invoke(*words[1:])
        assert result.exit_code == 0, (words, result.output)
        assert result.stdout
        assert SECRET not in result.output


def test_selftest_passes_on_a_database(
    invoke: Invoke,
    postgres_server: _engines.PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # where runs recorded into a database keep their files
    with _engines.fresh_database(postgres_server, "pgselftest") as url:
        url = _with_secret(postgres_server, url)
        result = invoke("--store", url, "selftest", "--sandbox", "local")
        versions = invoke("--store", url, "harness", "list")

    assert result.exit_code == 0, result.output
    assert "selftest passed: baseline 0/8 -> patched 8/8, accepted as harness-v1" in result.stdout
    assert "(temporary)" not in result.stdout
    assert f"store {without_password(url)[0]}" in result.stdout
    assert "harness-v1" in versions.stdout
    assert [path.parent.name for path in tmp_path.glob("*/opt_*")] == ["envharness-optimizer"]
    assert SECRET not in result.output + versions.output


@pytest.mark.parametrize("command", [["quickstart", "--turns", TURNS], ["selftest"]])
def test_a_database_that_does_not_exist_is_refused_by_name(
    invoke: Invoke, postgres_server: _engines.PostgresServer, command: list[str]
) -> None:
    missing = _with_secret(postgres_server, postgres_server.url("no_such_demo"))

    result = invoke("--store", missing, *command)

    assert result.exit_code == 2
    assert 'database "no_such_demo" does not exist' in result.stderr
    assert "createdb" in result.stderr  # how to fix it
    assert SECRET not in result.output


@pytest.fixture(scope="module")
def role_without_grants(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A role that may log in and do nothing else."""
    role = f"envh_nogrants_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.parametrize("command", [["quickstart", "--turns", TURNS], ["selftest"]])
def test_a_role_without_grants_is_refused_by_name_and_the_store_is_kept(
    invoke: Invoke,
    postgres_server: _engines.PostgresServer,
    demos: tuple[str, Result, Path, Result],
    role_without_grants: str,
    command: list[str],
) -> None:
    recorded = without_password(demos[0])[0]
    before = invoke("--store", recorded, "verify").stdout
    with _engines.fresh_database(postgres_server, "pgnogrants") as empty:
        into_empty = invoke("--store", _with_secret(postgres_server, empty, role_without_grants),
                            *command)  # fmt: skip
    into_store = invoke(
        "--store", _with_secret(postgres_server, recorded, role_without_grants), *command
    )

    assert into_empty.exit_code == into_store.exit_code == 2
    assert f"the role {role_without_grants!r} needs CREATE" in into_empty.stderr
    assert f"refused role {role_without_grants!r}" in into_store.stderr
    assert "the grants docs/postgresql.md lists" in into_store.stderr
    assert "Traceback" not in into_empty.output + into_store.output
    assert SECRET not in into_empty.output + into_store.output
    assert invoke("--store", recorded, "verify").stdout == before
