"""The PostgreSQL writer moves a transaction's chains many to a statement; the index it leaves
is the SQLite store's for the same records, row for row."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import cast

import anyio
import pytest

from envharness.store import open_store
from envharness.store.postgres import open_postgres_store
from envharness.store.postgres.dialect import SqliteStyle

from .._index_mix import index_of, mixed
from .._support import plain
from ._support import database as database
from ._support import raw

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_one_transaction_of_every_kind_is_indexed_as_on_sqlite(
    database: str, tmp_path: Path
) -> None:
    mix = mixed()
    async with open_store(tmp_path / "store") as store:
        await store.append(mix.before, mix.blobs)
        await store.append(mix.together, mix.blobs)
        assert {found.session_id for found in (await store.verify()).breaks} == {mix.unindexed}
    with plain(tmp_path / "store") as connection:
        expected = index_of(connection, mix)
    async with open_postgres_store(database) as postgres:
        await postgres.append(mix.before, mix.blobs)
        await postgres.append(mix.together, mix.blobs)
        report = await postgres.verify()
    # The module's database holds the other backend's run too: only this mix's chains count.
    chains = {row.session_id for row in mix.before + mix.together}
    assert {found.session_id for found in report.breaks} & chains == {mix.unindexed}
    async with raw(database) as connection:
        look = cast(sqlite3.Connection, SqliteStyle(connection))
        found = await anyio.to_thread.run_sync(index_of, look, mix)
    assert found == expected
