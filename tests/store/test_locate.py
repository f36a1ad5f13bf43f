"""Which engine a store name means: a ``postgresql://`` or ``postgres://`` string is a database,
anything else (a path object too) a store directory; a URL is named without its password."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envharness.errors import StoreLayoutError
from envharness.store.locate import (
    describe,
    opening_store,
    postgres_url,
    reading_store,
    without_password,
)
from envharness.store.postgres import PostgresStore
from envharness.store.store import Store
from tests import _engines


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("postgresql://envh@db/evidence", "postgresql://envh@db/evidence"),
        ("postgres://envh@db/evidence", "postgres://envh@db/evidence"),
        ("PostgreSQL://envh@db/evidence", "PostgreSQL://envh@db/evidence"),
        ("environment-sessions", None),
        ("./postgresql:/evidence", None),
        ("postgresql:/evidence", None),
        (Path("postgresql://envh@db/evidence"), None),  # a path: its // is already gone
    ],
)
def test_only_a_url_string_names_a_database(given: str | Path, url: str | None) -> None:
    assert postgres_url(given) == url


def test_a_url_is_described_without_its_password() -> None:
    named = describe("postgresql://envh:hunter2-secret@db.internal:6543/evidence")

    assert named == "postgresql://envh@db.internal:6543/evidence"
    assert describe(Path("some/store")) == "some/store"


@pytest.mark.parametrize(
    ("given", "shareable", "had_password"),
    [
        ("postgresql://envh:s3cret@db:6543/ev", "postgresql://envh@db:6543/ev", True),
        ("postgresql://:s3cret@db/ev", "postgresql://db/ev", True),
        ("postgresql://envh:p%40ss@db/ev?sslmode=require", "postgresql://envh@db/ev?sslmode=require",
         True),
        ("postgresql://envh@db/ev?password=s3cret&application_name=a+b",
         "postgresql://envh@db/ev?application_name=a+b", True),
        ("postgresql://envh@db/ev?pass%77ord=s3cret", "postgresql://envh@db/ev", True),
        ("postgresql://envh:s3cret@h1:5432,h2:5433/ev", "postgresql://envh@h1:5432,h2:5433/ev",
         True),
        ("postgresql:///ev?host=/run/postgresql", "postgresql:///ev?host=/run/postgresql", False),
        ("postgres://envh@[::1]:5432/ev", "postgres://envh@[::1]:5432/ev", False),
    ],
)  # fmt: skip
def test_a_url_to_print_in_a_command_keeps_all_but_its_password(
    given: str, shareable: str, had_password: bool
) -> None:
    # Unlike describe, the query (sslmode, a socket directory) is kept: the command must reach
    # the same database.
    assert without_password(given) == (shareable, had_password)


@pytest.mark.anyio
async def test_a_directory_opens_as_the_sqlite_store_and_reading_never_creates_one(
    tmp_path: Path,
) -> None:
    with pytest.raises(StoreLayoutError, match="no evidence store"):
        async with reading_store(tmp_path / "missing"):
            pass
    async with opening_store(str(tmp_path / "store")) as made:
        assert isinstance(made, Store)
    async with reading_store(tmp_path / "store") as read:
        assert isinstance(read, Store)
        assert await read.last_position() == -1
    assert not (tmp_path / "missing").exists()


@pytest.fixture
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "locate") as url:
        yield url


@pytest.mark.anyio
async def test_a_url_opens_the_postgresql_store_and_reading_never_creates_one(
    database: str,
) -> None:
    with pytest.raises(StoreLayoutError, match="holds no envharness store"):
        async with reading_store(database):
            pass
    async with opening_store(database) as made:
        assert isinstance(made, PostgresStore)
    async with reading_store(database) as read:
        assert isinstance(read, PostgresStore)
        assert await read.last_position() == -1
