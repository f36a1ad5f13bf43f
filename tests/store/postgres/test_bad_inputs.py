"""What the PostgreSQL store says when it cannot be used: a wrong password or a missing
database (named with user, host and database, never with the password), a newer schema, a
database that holds no store, an unparsable URL (a raw ``@`` in the password among them), a bad
connection option, and the ``postgres`` extra missing; and a kept read connection never
outlives the backend's close."""

from __future__ import annotations

import logging
import secrets
import sys
import traceback
from collections.abc import Iterator

import anyio
import psycopg
import pytest

from envharness.errors import StoreError, StoreLayoutError, StoreVersionError
from envharness.store.postgres import SCHEMA_VERSION, open_postgres_store
from envharness.store.postgres.backend import PostgresBackend
from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import INSTALL
from tests import _engines

from .._support import new_session
from ._support import password_role_on

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "pgbad") as url:
        yield url


@pytest.fixture(scope="module")
def password_role(postgres_server: _engines.PostgresServer) -> tuple[str, str]:
    return password_role_on(postgres_server)


def _url(server: _engines.PostgresServer, user: str, password: str, database: str) -> str:
    return f"postgresql://{user}:{password}@{server.host}:{server.port}/{database}"


async def test_a_wrong_password_names_user_host_and_database_but_never_the_password(
    postgres_server: _engines.PostgresServer,
    password_role: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    role, _ = password_role
    wrong = f"wrong-{secrets.token_hex(8)}"
    url = _url(postgres_server, role, wrong, "postgres")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError) as caught:
        async with open_postgres_store(url):
            pass
    message = str(caught.value)
    assert f"user {role!r}" in message
    assert f"host {postgres_server.host!r}" in message
    assert "database 'postgres'" in message
    assert "password authentication failed" in message
    assert "check the password" in message
    told = "".join(traceback.format_exception(caught.value)) + caplog.text + repr(caught.value)
    assert wrong not in told


async def test_a_missing_database_says_how_to_create_it(
    postgres_server: _engines.PostgresServer,
) -> None:
    name = f"missing_{secrets.token_hex(4)}"
    with pytest.raises(StoreError, match=f"database {name!r}.*createdb .*{name}"):
        async with open_postgres_store(postgres_server.url(name)):
            pass


async def test_a_url_that_does_not_parse_is_not_repeated() -> None:
    secret = secrets.token_hex(8)
    with pytest.raises(StoreError, match="cannot be parsed") as caught:
        async with open_postgres_store(f"postgresql://u:{secret}@[broken/db"):
            pass
    assert secret not in "".join(traceback.format_exception(caught.value))


async def test_a_raw_at_sign_in_the_password_is_refused_without_its_tail(
    postgres_server: _engines.PostgresServer,
) -> None:
    # libpq splits at the first '@': the rest of the password would be read as the host,
    # which every message names.
    head, tail = secrets.token_hex(4), secrets.token_hex(6)
    url = f"postgresql://u:{head}@{tail}@{postgres_server.host}:{postgres_server.port}/db"
    with pytest.raises(StoreError, match=r"cannot be parsed.*%40") as caught:
        async with open_postgres_store(url):
            pass
    told = "".join(traceback.format_exception(caught.value))
    assert head not in told
    assert tail not in told


async def test_a_bad_connection_option_is_a_store_error_naming_the_store(
    postgres_server: _engines.PostgresServer, password_role: tuple[str, str]
) -> None:
    role, password = password_role
    url = _url(postgres_server, role, password, "postgres") + "?connect_timeout=abc"
    with pytest.raises(StoreError, match="cannot connect to the PostgreSQL store") as caught:
        async with open_postgres_store(url):
            pass
    assert "connect_timeout" in str(caught.value)
    assert password not in "".join(traceback.format_exception(caught.value))


async def test_a_read_under_way_when_the_backend_closes_keeps_no_connection(
    database: str,
) -> None:
    backend = PostgresBackend(database, keep=True)
    started = anyio.Event()

    def slow(connection: SqliteStyle) -> None:
        anyio.from_thread.run_sync(started.set)
        connection.execute("SELECT pg_sleep(0.3)")

    async with anyio.create_task_group() as group:
        group.start_soon(backend.read, slow)
        await started.wait()
        await backend.aclose()
    assert backend.kept_connections() == 0
    await backend.read(lambda connection: connection.execute("SELECT 1"))  # opens again
    assert backend.kept_connections() == 1
    await backend.aclose()


async def test_a_newer_schema_is_refused_and_left_as_it_was(
    postgres_server: _engines.PostgresServer,
) -> None:
    with _engines.fresh_database(postgres_server, "pgnewer") as url:
        async with open_postgres_store(url):
            pass
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("UPDATE envharness_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(StoreVersionError, match=f"schema version {SCHEMA_VERSION + 1}"):
            async with open_postgres_store(url):
                pass
        with psycopg.connect(url, autocommit=True) as connection:
            (version,) = connection.execute("SELECT version FROM envharness_schema").fetchone()
    assert version == SCHEMA_VERSION + 1


async def test_a_database_without_a_store_is_refused_unless_created(
    postgres_server: _engines.PostgresServer,
) -> None:
    with _engines.fresh_database(postgres_server, "pgempty") as url:
        with pytest.raises(StoreLayoutError, match="holds no envharness store"):
            async with open_postgres_store(url, create=False):
                pass
        # Two runners opening a new database at once set it up once.
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(_open_and_append, url)
        with psycopg.connect(url, autocommit=True) as connection:
            rows = connection.execute("SELECT version FROM envharness_schema").fetchall()
            (count,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    assert rows == [(SCHEMA_VERSION,)]
    assert count == 2


async def _open_and_append(url: str) -> None:
    async with open_postgres_store(url) as store:
        await store.append([new_session()[1]])


async def test_without_the_extra_the_error_names_it(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(StoreError, match=INSTALL.replace("[", r"\[").replace("]", r"\]")):
        async with open_postgres_store(database):
            pass
