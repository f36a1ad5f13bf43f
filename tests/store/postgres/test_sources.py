"""Imported sources on a PostgreSQL store (issue 14, scope 5): the same import file gives the
same receipts, health and trajectory bytes as on SQLite; refusals change nothing and are
counted as on SQLite; imports into one source from two tasks at once are serialized."""

from __future__ import annotations

import re
import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from envharness import AsyncEnvironmentHarness, ConfigurationError
from envharness.cli import app
from envharness.errors import NotFoundError, StoreError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
from envharness.service.app import create_app
from envharness.service.state import Address, Service
from envharness.store import open_store
from envharness.store.database import DATABASE_NAME
from envharness.store.locate import AnyStore, opening_store, reading_store
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.copy import CopyReport, copy_store
from envharness.store.sources import (
    CAPTURE_FAILED,
    SourceChainError,
    SourceConflictError,
    SourceRow,
)
from envharness.store.tokens import TokenStore
from envharness.trajectories import freeze, verify_snapshot
from envharness.trajectories.sources import SourceChain
from tests import _engines
from tests.trajectories.sources._support import AT, OTEL_FIXTURE, SOURCE, episode, write_lines

SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its user, so it is only carried — and must
never be shown."""


async def _create(url: str) -> None:
    async with open_postgres_store(url):
        pass


@pytest.fixture
def postgres(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A new PostgreSQL store (a database of its own: ~0.1 s), its URL carrying a password."""
    with _engines.fresh_database(postgres_server, "pgsrc") as url:
        user = postgres_server.user
        url = url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)
        anyio.run(_create, url)
        yield url


@pytest.fixture(scope="module")
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[SourceRow]]:
    """Two import files of one source: episodes run-1 and run-2, then run-3 (which also ends
    with a capture failure); and every record of both."""
    chain = SourceChain(SOURCE)
    first = [*episode(chain, "run-1"), *episode(chain, "run-2", passed=False)]
    second = [
        *episode(chain, "run-3", passed=None),
        chain.seal("run-3", CAPTURE_FAILED, {"detail": "exporter lost 3 spans"}, at=AT),
    ]
    where = tmp_path_factory.mktemp("pgsrc")
    return (
        write_lines(where / "a.jsonl", first),
        write_lines(where / "b.jsonl", second),
        [
            *first,
            *second,
        ],
    )


def _harness(store: Path | str) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )


async def _import_all(store: Path | str, files: tuple[Path, Path]) -> list[dict[str, Any]]:
    """The same imports on either engine: both files, a retry, the OTel fixture, and the
    receipts without their (random) import ids."""
    sources = _harness(store).sources()
    receipts = [
        await sources.import_file(SOURCE, files[0], training=True),
        await sources.import_file(SOURCE, files[1]),
        await sources.import_file(SOURCE, files[0]),  # an identical retry: nothing stored
        await sources.import_file("acme/otel", OTEL_FIXTURE, format="otel-genai"),
    ]
    return [{**msgspec.to_builtins(receipt), "import_id": None} for receipt in receipts]


def _health(found: list[Any]) -> list[dict[str, Any]]:
    return [{**msgspec.to_builtins(health), "updated_at": None} for health in found]


@pytest.mark.anyio
async def test_an_import_reads_back_from_postgres_as_from_sqlite(
    postgres: str, chain_file: tuple[Path, Path, list[SourceRow]], tmp_path: Path
) -> None:
    sqlite = tmp_path / "store"
    files = chain_file[:2]

    receipts = await _import_all(postgres, files)

    assert receipts == await _import_all(sqlite, files)
    assert [(r["stored"], r["duplicates"]) for r in receipts[:3]] == [(10, 0), (5, 0), (0, 10)]
    on_postgres, on_sqlite = _harness(postgres).sources(), _harness(sqlite).sources()
    assert _health(await on_postgres.health()) == _health(await on_sqlite.health())
    assert await on_postgres.problems() == await on_sqlite.problems() == {}
    listed = await on_postgres.trajectories()
    assert msgspec.json.encode(listed) == msgspec.json.encode(await on_sqlite.trajectories())
    assert [t.session_id for t in listed][:3] == [f"{SOURCE}:run-{n}" for n in (1, 2, 3)]
    one = await _harness(postgres).trajectory(f"{SOURCE}:run-2")
    assert msgspec.json.encode(one) == msgspec.json.encode(
        await _harness(sqlite).trajectory(f"{SOURCE}:run-2")
    )
    # An imported trajectory is evidence on PostgreSQL too: frozen, then checked record by record.
    async with reading_store(postgres) as store:
        snapshot = await freeze(store, [f"{SOURCE}:run-1"], label="imported")
        assert await verify_snapshot(store, snapshot.metadata.id) == snapshot.metadata
    with pytest.raises(NotFoundError, match=f"source {SOURCE!r} has no episode 'run-9'"):
        await _harness(postgres).trajectory(f"{SOURCE}:run-9")


def _records(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as connection:
        return connection.execute(
            "SELECT source, position, hash FROM source_records ORDER BY source, position"
        ).fetchall()


@pytest.mark.anyio
async def test_a_refused_import_changes_nothing_and_counts_as_on_sqlite(
    postgres_server: _engines.PostgresServer,
    chain_file: tuple[Path, Path, list[SourceRow]],
    tmp_path: Path,
) -> None:
    rows = chain_file[2]
    stores: list[Path | str] = [tmp_path / "store"]
    with _engines.fresh_database(postgres_server, "pgsrcbad") as url:
        await _create(url)
        stores.append(url)
        healths = []
        for store in stores:
            sources = _harness(store).sources()
            with pytest.raises(ConfigurationError, match="nothing to import into 'acme/new'"):
                await sources.import_records("acme/new", [])
            await sources.import_records(SOURCE, rows[:5])
            with pytest.raises(NotFoundError, match="no source 'acme/new'"):
                await sources.health("acme/new")
            before = await _held(store)
            with pytest.raises(
                SourceChainError, match=r"position 7: position\(s\) 5\.\.6 were never"
            ):
                await sources.import_records(SOURCE, rows[7:9])
            with pytest.raises(SourceConflictError, match="position 1 is already imported"):
                await sources.import_records(SOURCE, [rows[0], _conflicting(rows[1])])
            assert await _held(store) == before
            healths.append(_health(await sources.health()))
            assert list(await sources.problems()) == [SOURCE]
        assert healths[0] == healths[1]
        assert healths[1][0]["refused"] == 2
        assert healths[1][0]["gaps"] == ({"first": 5, "last": 6},)


async def _held(store: Path | str) -> tuple[bytes, int, str | None]:
    """What a refused import must leave alone: every imported trajectory and the head."""
    sources = _harness(store).sources()
    health = (await sources.health(SOURCE))[0]
    return msgspec.json.encode(await sources.trajectories()), health.head_position, health.head_hash


def _conflicting(row: SourceRow) -> SourceRow:
    """``row`` with other content, resealed so that only the stored record contradicts it."""
    chain = SourceChain(row.source, next_position=row.position, prev=row.prev)
    return chain.seal(
        row.episode, row.kind, {"cells": [9]}, at=row.at, turn=row.turn, participant=row.participant
    )


@pytest.mark.anyio
async def test_imports_into_one_source_at_once_are_serialized(
    postgres_server: _engines.PostgresServer, chain_file: tuple[Path, Path, list[SourceRow]]
) -> None:
    rows = chain_file[2]
    receipts: list[tuple[int, int]] = []
    with _engines.fresh_database(postgres_server, "pgsrcrace") as url:
        await _create(url)
        sources = _harness(url).sources()

        async def one() -> None:
            receipt = await sources.import_records(SOURCE, rows)
            receipts.append((receipt.stored, receipt.duplicates))

        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(one)
        stored = _records(url)
    assert sorted(receipts) == [(0, len(rows))] * 3 + [(len(rows), 0)]
    assert [position for _, position, _ in stored] == list(range(len(rows)))


def test_the_command_line_imports_into_postgres_and_lists_its_sources(
    postgres_server: _engines.PostgresServer,
    chain_file: tuple[Path, Path, list[SourceRow]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENVHARNESS_STORE", raising=False)
    runner = CliRunner()
    with _engines.fresh_database(postgres_server, "pgsrccli") as url:
        anyio.run(_create, url)
        url = url.replace(f"://{postgres_server.user}@", f"://{postgres_server.user}:{SECRET}@")

        def run(*args: str) -> Any:
            return runner.invoke(app, ["--store", url, *args], catch_exceptions=False)

        imported = run("import", SOURCE, str(chain_file[0]), "--json")
        listed = run("sources", "--json")
        trajectories = run("trajectories", "--origin", "imported", "--source", SOURCE)
        one = run("trajectories", f"{SOURCE}:run-1", "--json")
        gap = run("import", "acme/other", str(chain_file[1]))
    assert imported.exit_code == 0, imported.output
    assert msgspec.json.decode(imported.stdout)["stored"] == 10
    assert listed.exit_code == 0, listed.output
    assert msgspec.json.decode(listed.stdout)["head_position"] == 9
    assert trajectories.exit_code == 0, trajectories.output
    assert [line.split()[0] for line in trajectories.stdout.splitlines()[1:]] == [
        f"{SOURCE}:run-1",
        f"{SOURCE}:run-2",
    ]
    assert msgspec.json.decode(one.stdout)["session_id"] == f"{SOURCE}:run-1"
    assert gap.exit_code == 2
    for result in (imported, listed, trajectories, one, gap):
        assert SECRET not in result.output


@asynccontextmanager
async def _serving(store: AnyStore) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """The app over ``store``, as ``serve`` builds it, a client, and an admin's header."""
    service = Service(
        store=store, address=Address("127.0.0.1", 8765), tokens=TokenStore(store.backend)
    )
    admin = await service.tokens.issue("admin")
    transport = httpx.ASGITransport(create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
        yield client, {"Authorization": f"Bearer {admin.secret}"}


async def _viewed(store: AnyStore, body: bytes) -> list[Any]:
    """What the viewer answers after importing ``body`` and a bad body into ``store``."""
    async with _serving(store) as (client, admin):
        ndjson = {**admin, "Content-Type": "application/x-ndjson"}
        imported = await client.post("/api/imports", params={"source": SOURCE}, content=body,
                                     headers=ndjson)  # fmt: skip
        retried = await client.post("/api/imports", params={"source": SOURCE}, content=body,
                                    headers=ndjson)  # fmt: skip
        bad = await client.post("/api/imports", params={"source": SOURCE}, content=b"{}\n",
                                headers=ndjson)  # fmt: skip
        answers = [
            await client.get(path, headers=admin)
            for path in (
                "/api/trajectories?origin=imported",
                f"/api/trajectories/{SOURCE}:run-2?check=true",
                f"/api/sources?source={SOURCE}",
                f"/api/trajectories/{SOURCE}:run-9",
                "/sources",
            )
        ]
    assert imported.status_code == 201, imported.text
    assert (retried.status_code, retried.json()["duplicates"]) == (201, 10)
    assert bad.status_code == 422, bad.text
    assert [answer.status_code for answer in answers] == [200, 200, 200, 404, 200]
    assert SOURCE in answers[4].text
    health = answers[2].json()["sources"]
    return [
        answers[0].json(),
        answers[1].json(),
        [{**one, "updated_at": None} for one in health],
        {key: value for key, value in imported.json().items() if key != "import_id"},
    ]


@pytest.mark.anyio
async def test_the_viewer_imports_into_postgres_and_shows_it_as_on_sqlite(
    postgres: str, chain_file: tuple[Path, Path, list[SourceRow]], tmp_path: Path
) -> None:
    body = chain_file[0].read_bytes()
    sqlite = tmp_path / "store"
    async with open_store(sqlite):
        pass

    async with reading_store(postgres) as on_postgres:
        from_postgres = await _viewed(on_postgres, body)
    async with reading_store(sqlite) as on_sqlite:
        from_sqlite = await _viewed(on_sqlite, body)

    assert from_postgres == from_sqlite
    assert [one["id"] for one in from_postgres[0]["trajectories"]] == [
        f"{SOURCE}:run-1",
        f"{SOURCE}:run-2",
    ]
    assert from_postgres[1]["check"]["ok"] is True
    assert from_postgres[2][0]["head_position"] == 9


async def _copied(source: Path | str, destination: Path | str) -> CopyReport:
    async with reading_store(source) as reader, opening_store(destination) as writer:
        return await copy_store(reader, writer)


async def _read_back(store: Path | str) -> tuple[bytes, list[dict[str, Any]]]:
    sources = _harness(store).sources()
    return msgspec.json.encode(await sources.trajectories()), _health(await sources.health())


@pytest.mark.anyio
async def test_copy_store_moves_sources_to_postgres_and_back_unchanged(
    postgres: str, chain_file: tuple[Path, Path, list[SourceRow]], tmp_path: Path
) -> None:
    sqlite, back = tmp_path / "store", tmp_path / "back"
    rows = chain_file[2]
    await _import_all(sqlite, chain_file[:2])
    with pytest.raises(SourceConflictError):  # a refusal: in the import log, copied with it
        await _harness(sqlite).sources().import_records(SOURCE, [rows[0], _conflicting(rows[1])])
    async with open_postgres_store(postgres) as emptied:  # the fixture's store holds nothing
        assert await emptied.last_position() == -1

    there = await _copied(sqlite, postgres)
    again = await _copied(postgres, back)

    assert (there.sources, there.imported) == (again.sources, again.imported)
    original = await _read_back(sqlite)
    assert there.sources == 2
    assert there.imported == sum(health["records"] for health in original[1])
    assert await _read_back(postgres) == original
    assert await _read_back(back) == original
    assert original[1][0]["refused"] == 1
    assert (await _harness(back).verify()).ok
    other = tmp_path / "other"  # no records, one source
    await _harness(other).sources().import_records(SOURCE, rows[:1])
    with pytest.raises(StoreError, match="already holds imported sources"):
        await _copied(sqlite, other)


@pytest.mark.anyio
async def test_copy_store_refuses_an_altered_imported_record(
    postgres: str, chain_file: tuple[Path, Path, list[SourceRow]], tmp_path: Path
) -> None:
    sqlite = tmp_path / "store"
    await _import_all(sqlite, chain_file[:2])
    with sqlite3.connect(sqlite / DATABASE_NAME) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET episode = 'run-x' WHERE source = ? AND position = 4",
            (SOURCE,),
        )
    connection.close()

    with pytest.raises(StoreError, match=r"'acme/nightly-evals' breaks at position 4: .*altered"):
        await _copied(sqlite, postgres)
    assert _records(postgres) == []  # the page that held it was checked before it was written


def test_an_import_into_a_database_without_a_store_is_refused(
    postgres_server: _engines.PostgresServer, chain_file: tuple[Path, Path, list[SourceRow]]
) -> None:
    with _engines.fresh_database(postgres_server, "pgsrcnone") as url:
        refused = CliRunner().invoke(app, ["--store", url, "import", SOURCE, str(chain_file[0])])
        with psycopg.connect(url) as connection:
            tables = connection.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchone()
    assert refused.exit_code == 2
    assert "holds no envharness store" in refused.stderr
    assert tables == (0,)  # nothing set up to refuse it in


def _grants(block: str) -> str:
    page = (Path(__file__).resolve().parents[3] / "docs" / "postgresql.md").read_text()
    found = re.search(rf"<!-- {block} -->\n```sql\n(.*?)```", page, flags=re.DOTALL)
    assert found, f"docs/postgresql.md lost its {block} block"
    return found.group(1)


@pytest.mark.anyio
async def test_a_role_with_the_documented_grants_imports_and_a_viewer_may_not(
    postgres: str,
    postgres_server: _engines.PostgresServer,
    chain_file: tuple[Path, Path, list[SourceRow]],
) -> None:
    suffix = secrets.token_hex(3)
    importer, viewer = f"envh_importer_{suffix}", f"envh_viewer_{suffix}"
    grants = _grants("grants").replace("envh_viewer", viewer).replace("envh_runner", importer)
    with psycopg.connect(postgres, autocommit=True) as admin:
        for role in (importer, viewer):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(grants)
        admin.execute(_grants("import grants").replace("envh_runner", importer))
    as_role = postgres.replace(f"{postgres_server.user}:{SECRET}@", "{}@")

    with pytest.raises(StoreError, match=f"refused role '{viewer}'.*docs/postgresql.md"):
        await _harness(as_role.format(viewer)).sources().import_file(SOURCE, chain_file[0])
    receipt = await _harness(as_role.format(importer)).sources().import_file(SOURCE, chain_file[0])
    listed = await _harness(as_role.format(viewer)).sources().trajectories()

    assert receipt.stored == 10
    assert [trajectory.session_id for trajectory in listed] == [
        f"{SOURCE}:run-1",
        f"{SOURCE}:run-2",
    ]


@pytest.mark.anyio
async def test_verify_on_postgres_rechecks_imported_chains_and_names_an_altered_record(
    postgres: str, chain_file: tuple[Path, Path, list[SourceRow]], tmp_path: Path
) -> None:
    harness = _harness(postgres)
    await harness.sources().import_file(SOURCE, chain_file[0])
    sound = await harness.verify()
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute("ALTER TABLE source_records DISABLE TRIGGER source_records_append_only")
        admin.execute(
            "UPDATE source_records SET episode = 'run-x' WHERE source = %s AND position = 2",
            (SOURCE,),
        )

    broken = await harness.verify()
    problems = await harness.sources().problems()
    with pytest.raises(StoreError, match=f"{SOURCE!r} breaks at position 2"):
        await _copied(postgres, tmp_path / "copy")

    assert (sound.ok, sound.sessions, sound.records) == (True, 1, 10)
    assert [(b.session_id, b.seq) for b in broken.breaks] == [(SOURCE, 2)]
    assert "stored chain is broken at position 2" in problems[SOURCE][-1]
