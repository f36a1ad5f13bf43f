"""The roles docs/postgresql.md sets up: a runner that may append but never change or delete a
record, and a viewer that only reads (``read_postgres_store``), on a store an owner created."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg import sql

from envharness.errors import StoreError, StoreLayoutError
from envharness.store.postgres import open_postgres_store, read_postgres_store
from tests import _engines

from .._support import logs, new_session, turn_rows

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).resolve().parents[3] / "docs" / "postgresql.md"


def _page_grants() -> str:
    """The page's grants (its ``sql`` block after "Roles"), with its role names."""
    text = PAGE.read_text()
    found = re.search(r"<!-- grants -->\n```sql\n(.*?)```", text, flags=re.DOTALL)
    assert found, "docs/postgresql.md lost its grants block"
    return found.group(1)


@pytest.fixture(scope="module")
def roles(postgres_server: _engines.PostgresServer) -> Iterator[tuple[str, str, str]]:
    """The store made by its owner, then the page's roles and grants: (owner, runner, viewer)
    URLs. The roles get names of this module's own (the server is shared by other tests)."""
    suffix = secrets.token_hex(3)
    runner, viewer = f"envh_runner_{suffix}", f"envh_viewer_{suffix}"
    grants = _page_grants().replace("envh_runner", runner).replace("envh_viewer", viewer)
    with _engines.fresh_database(postgres_server, "pgroles") as url:
        anyio.run(_create, url)
        with psycopg.connect(url, autocommit=True) as admin:
            for role in (runner, viewer):
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            admin.execute(grants)
        as_role = url.replace(f"{postgres_server.user}@", "{}@")
        yield url, as_role.format(runner), as_role.format(viewer)


async def _create(url: str) -> None:
    async with open_postgres_store(url):
        pass


async def test_a_runner_appends_and_a_viewer_reads(roles: tuple[str, str, str]) -> None:
    _, runner, viewer = roles
    chain, created = new_session()
    turn, blobs = turn_rows(chain, 1)
    async with open_postgres_store(runner, create=False) as store:
        await store.append([created, *turn, *logs(chain, 2)], blobs)
        await store.put_artifact(b"kept")
    async with read_postgres_store(viewer) as reader:
        info = await reader.session(chain.session_id)
        report = await reader.verify()
        with pytest.raises(StoreError, match="opened for reading"):
            await reader.append(logs(chain, 1))
    assert info.records == 6
    assert report.ok, report.breaks


async def test_a_runner_may_neither_change_nor_delete_records(
    roles: tuple[str, str, str],
) -> None:
    _, runner, _ = roles
    with psycopg.connect(runner, autocommit=True) as connection:
        for statement in ("UPDATE records SET kind = 'x'", "DELETE FROM records"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await anyio.to_thread.run_sync(connection.execute, statement)


async def test_reading_a_database_without_a_store_is_refused(
    postgres_server: _engines.PostgresServer,
) -> None:
    with (
        _engines.fresh_database(postgres_server, "pgnostore") as url,
        pytest.raises(StoreLayoutError, match="holds no envharness store"),
    ):
        async with read_postgres_store(url):
            pass
