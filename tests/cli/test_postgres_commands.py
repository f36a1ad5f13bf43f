"""``--store postgresql://...``: the commands that only read evidence give, on a PostgreSQL store,
what they give on the SQLite store it was copied from; every other command refuses the URL by
name before it touches anything; and no URL's password is ever printed."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from typer.testing import CliRunner

from envharness.cli import app
from envharness.records import Artifact
from envharness.store import RecordFilter, open_store
from envharness.store.locate import reading_store
from tests import _engines
from tests.cli._support import Invoke
from tests.store.postgres._support import optimizer_rows, password_role_on


@pytest.fixture(scope="module")
def stores(
    quickstart_master: Path,
    postgres_server: _engines.PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, str]]:
    """A quickstart store with an optimizer run added, and a database it was copied into."""
    sqlite = Path(shutil.copytree(quickstart_master, tmp_path_factory.mktemp("pgcli") / "store"))

    async def add_a_run() -> None:
        async with open_store(sqlite) as store:
            await store.append(optimizer_rows("tune", "harness-v1", patch={"ops": []}))

    anyio.run(add_a_run)
    with _engines.fresh_database(postgres_server, "clipg") as url:
        copied = CliRunner().invoke(app, ["copy-store", str(sqlite), url])
        assert copied.exit_code == 0, copied.output
        yield sqlite, url


def _ids(location: str | Path) -> tuple[str, str, str, str]:
    """A session's id, the experiment's id, and a session that kept an artifact with its name."""

    async def read() -> tuple[str, str, str, str]:
        async with reading_store(location) as store:
            sessions = await store.sessions()
            experiment = (await store.experiments())[0].id
            for info in sessions:
                kept = RecordFilter(kinds=("artifact",), limit=1)
                async for record in store.records(info.id, kept):
                    assert isinstance(record.payload, Artifact)
                    return sessions[0].id, experiment, info.id, record.payload.name
        raise AssertionError("the quickstart kept no artifact")

    return anyio.run(read)


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "list"],
        ["sessions", "list", "--json", "--status", "failed"],
        ["sessions", "show", "{session}", "--turn", "1"],
        ["export", "{session}"],
        ["compare", "{session}", "{session}"],
        ["artifact", "{keeper}"],
        ["artifact", "{keeper}", "{artifact}"],
        ["experiments", "list", "--json"],
        ["experiments", "show", "{experiment}"],
        ["harness", "list"],
        ["harness", "show", "harness-v1"],
        ["harness", "diff", "harness-v1", "harness-v1"],
        ["harness", "runs", "--json"],
    ],
    ids=" ".join,
)
def test_a_reading_command_says_the_same_of_both_stores(
    invoke: Invoke, stores: tuple[Path, str], command: list[str]
) -> None:
    sqlite, url = stores
    session, experiment, keeper, artifact = _ids(sqlite)
    names = {"session": session, "experiment": experiment, "keeper": keeper, "artifact": artifact}
    args = [word.format(**names) for word in command]

    on_sqlite = invoke("--store", sqlite, *args)
    on_postgres = invoke("--store", url, *args)

    assert on_sqlite.exit_code == 0, on_sqlite.output
    assert on_postgres.exit_code == 0, on_postgres.output
    assert on_postgres.stdout == on_sqlite.stdout
    assert on_postgres.stdout.strip()


def test_verify_checks_every_chain_and_names_an_altered_record(
    invoke: Invoke,
    stores: tuple[Path, str],
    postgres_server: _engines.PostgresServer,
) -> None:
    sqlite, url = stores
    session, *_ = _ids(sqlite)
    whole = invoke("--store", url, "verify")
    with _engines.fresh_database(postgres_server, "clipgbad") as altered:
        assert invoke("copy-store", sqlite, altered).exit_code == 0
        with psycopg.connect(altered, autocommit=True) as connection:
            connection.execute("ALTER TABLE records DISABLE TRIGGER USER")
            connection.execute(
                "UPDATE records SET participant = 'mallory' WHERE session_id = %s AND seq = 3",
                (session,),
            )
        broken = invoke("--store", altered, "verify")

    assert whole.exit_code == 0, whole.output
    # 14 sessions, the experiment, the optimizer run and the source imported beside them
    assert whole.stdout.startswith("verified 17 chains, ")
    assert whole.stdout.rstrip().endswith(": OK")
    assert broken.exit_code == 1
    assert session in broken.stdout


def test_the_store_can_be_named_by_the_environment(
    stores: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = stores
    monkeypatch.setenv("ENVHARNESS_STORE", url)

    result = CliRunner().invoke(app, ["sessions", "list", "--json"])

    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 14


def test_an_empty_database_and_a_wrong_password_are_told_without_the_password(
    invoke: Invoke, postgres_server: _engines.PostgresServer
) -> None:
    role, _ = password_role_on(postgres_server)
    wrong = f"wrong-{secrets.token_hex(8)}"
    url = f"postgresql://{role}:{wrong}@{postgres_server.host}:{postgres_server.port}/postgres"

    refused = invoke("--store", url, "sessions", "list")
    empty = invoke("--store", postgres_server.url(), "experiments", "list")

    assert refused.exit_code == 2
    assert "password authentication failed" in refused.stderr
    assert wrong not in refused.output
    assert empty.exit_code == 2
    assert "holds no envharness store" in empty.stderr
