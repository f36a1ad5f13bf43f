"""Single-query reads on a held connection: the same rows as the paged reader, exact ids only."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest

from envharness.records import RecordRow
from envharness.store import RecordFilter, open_store
from envharness.store.connections import borrowed_reader
from envharness.store.raw_rows import page_rows, session_by_id
from envharness.store.reader import iterate_rows

from ._support import new_session, status_row, turn_rows

pytestmark = pytest.mark.anyio

SELECTIONS = [
    RecordFilter(),
    RecordFilter(after=3, limit=4),
    RecordFilter(kinds=("outcome",)),
    RecordFilter(kinds=("log", "outcome"), after=2, limit=5),
    RecordFilter(participant="bob"),
    RecordFilter(participant="bob", turn=2),
    RecordFilter(turn=3, until=10),
    RecordFilter(participant="nobody"),
    RecordFilter(limit=1),
]


@pytest.fixture
async def written(tmp_path: Path) -> tuple[Path, str]:
    async with open_store(tmp_path / "store") as store:
        chain, created = new_session()
        await store.append([created, status_row(chain, "running")])
        for turn in range(1, 5):
            rows, blobs = turn_rows(chain, turn)
            await store.append(rows, blobs)
        other, other_created = new_session()  # a second session's rows never leak in
        await store.append([other_created, *turn_rows(other, 1)[0]], turn_rows(other, 1)[1])
    return tmp_path / "store", chain.session_id


@pytest.mark.parametrize("selection", SELECTIONS)
async def test_a_page_is_the_rows_the_paged_reader_yields(
    written: tuple[Path, str], selection: RecordFilter
) -> None:
    directory, session_id = written
    async with aclosing(iterate_rows(directory, session_id, selection, page_size=2)) as rows:
        expected: list[RecordRow] = [row async for row in rows]
    with borrowed_reader(directory) as connection:
        assert page_rows(connection, session_id, selection) == expected


async def test_a_session_is_found_by_its_exact_id_only(written: tuple[Path, str]) -> None:
    directory, session_id = written
    with borrowed_reader(directory) as connection:
        info = session_by_id(connection, session_id)
        assert info is not None
        assert (info.id, info.status, info.records) == (session_id, "running", 14)
        assert session_by_id(connection, session_id[:-1]) is None  # a prefix names nothing
        assert session_by_id(connection, "") is None
