"""Reading: paged records with filters, the session index, blobs, and readers that never
block the writer."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from envharness.errors import NotFoundError, StoreError
from envharness.records import RecordRow, SessionChain, decode_record
from envharness.store import RecordFilter, Store, connections, open_store
from envharness.store import reader as reader_module
from envharness.store.database import DATABASE_NAME
from envharness.store.reader import iterate_rows

from ._support import logs, new_session, plain, status_row, turn_rows

pytestmark = pytest.mark.anyio


async def collect(
    store: Store, session_id: str, selection: RecordFilter | None = None, page_size: int = 4
) -> list[RecordRow]:
    rows = iterate_rows(store.directory, session_id, selection or RecordFilter(), page_size)
    async with aclosing(rows):
        return [row async for row in rows]


async def seed(store: Store, turns: int = 5) -> tuple[SessionChain, list[RecordRow]]:
    """A session of ``turns`` turns by alice and bob: 1 + 3 * ``turns`` records."""
    chain, created = new_session()
    await store.append([created])
    written = [created]
    for turn in range(1, turns + 1):
        rows, blobs = turn_rows(chain, turn)
        await store.append(rows, blobs)
        written.extend(rows)
    return chain, written


# -- paging and filters ------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 3, 4, 16, 500])
async def test_paging_yields_every_record_in_order(
    store_path: Path, page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = 0
    fetch = reader_module._fetch

    def counting(*args: object) -> list[RecordRow]:
        nonlocal pages
        pages += 1
        return fetch(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(reader_module, "_fetch", counting)
    async with open_store(store_path) as store:
        chain, written = await seed(store, turns=7)  # 22 records
        await seed(store, turns=2)
        assert await collect(store, chain.session_id, page_size=page_size) == written
    # A full last page costs one more (empty) query to learn that it was the last.
    assert pages == len(written) // page_size + 1


async def test_store_records_decodes_in_order(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, written = await seed(store, turns=3)
        records = [record async for record in store.records(chain.session_id)]
    assert records == [decode_record(row) for row in written]
    rows_again = [row async for row in store.rows(chain.session_id)]
    assert rows_again == written


async def test_filters_narrow_the_selection(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, written = await seed(store, turns=6)
        sid = chain.session_id

        async def seqs(page_size: int = 4, **fields: object) -> list[int]:
            selection = RecordFilter(**fields)  # type: ignore[arg-type]
            return [row.seq for row in await collect(store, sid, selection, page_size)]

        def expected(keep: object) -> list[int]:
            return [row.seq for row in written if keep(row)]  # type: ignore[operator]

        assert await seqs(kinds=("outcome",)) == expected(lambda r: r.kind == "outcome")
        assert await seqs(kinds=["outcome", "session.created"]) == expected(
            lambda r: r.kind in ("outcome", "session.created")
        )
        assert await seqs(participant="bob") == expected(lambda r: r.participant == "bob")
        assert await seqs(turn=4) == expected(lambda r: r.turn == 4)
        assert await seqs(after=10) == expected(lambda r: r.seq > 10)
        assert await seqs(limit=5) == [0, 1, 2, 3, 4]
        assert await seqs(limit=0) == []
        assert await seqs(limit=7, page_size=3) == list(range(7))
        assert await seqs(after=3, limit=4, page_size=2) == [4, 5, 6, 7]
        both = await seqs(participant="alice", turn=2, kinds=("log",))
        assert both == expected(
            lambda r: r.participant == "alice" and r.turn == 2 and r.kind == "log"
        )
        assert len(both) == 1
        assert await seqs(after=len(written)) == []
        assert await seqs(kinds=("no.such.kind",)) == []
        assert await seqs(participant="carol") == []


async def test_an_unknown_session_has_no_records(store_path: Path) -> None:
    async with open_store(store_path) as store:
        await seed(store, turns=1)
        assert await collect(store, "ses_nope") == []


async def test_a_record_filter_read_through_the_store(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, written = await seed(store, turns=3)
        selection = RecordFilter(kinds=("outcome",), after=4)
        records = [r async for r in store.records(chain.session_id, selection)]
    assert [r.seq for r in records] == [r.seq for r in written if r.kind == "outcome" and r.seq > 4]


# -- a slow reader never holds up the writer ---------------------------------------------------


async def test_a_paused_reader_does_not_block_writers(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, written = await seed(store, turns=10)  # 31 records
        rows = iterate_rows(store.directory, chain.session_id, RecordFilter(), page_size=5)
        async with aclosing(rows):
            seen = [await anext(rows) for _ in range(7)]  # into the second page
            # Paused mid-iteration, holding the iterator. Meanwhile: thousands of appends, to
            # this session and to others, through the journal.
            appended = 0
            with anyio.fail_after(10):
                async with anyio.create_task_group() as group:

                    async def other_session() -> None:
                        other, created = new_session()
                        await store.append([created])
                        for _ in range(10):
                            await store.append(logs(other, 50))

                    for _ in range(4):
                        group.start_soon(other_session)
                    for _ in range(20):
                        await store.append(logs(chain, 100))
                        appended += 100
            # The paused reader pins no WAL snapshot: a full checkpoint completes right now.
            with plain(store_path) as connection:
                connection.execute("PRAGMA busy_timeout=0")
                busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0
            # Resume: the rest of the session, including what was appended meanwhile.
            seen.extend([row async for row in rows])
    assert seen[: len(written)] == written
    assert [row.seq for row in seen] == list(range(len(written) + appended))


async def test_abandoning_a_read_hands_its_idle_reader_on(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page is read whole, so between pages the reader holds no statement and no
    snapshot: a read stopped early gives it back for the next read."""
    opened: list[sqlite3.Connection] = []
    open_reader = connections.open_reader

    def tracking(directory: Path) -> sqlite3.Connection:
        opened.append(open_reader(directory))
        return opened[-1]

    connections._close_idle()  # no idle reader to reuse: the read opens its own
    monkeypatch.setattr(connections, "open_reader", tracking)
    async with open_store(store_path) as store:
        chain, _ = await seed(store, turns=4)
        rows = iterate_rows(store.directory, chain.session_id, RecordFilter(), page_size=2)
        async with aclosing(rows):
            await anext(rows)
            [connection] = opened
        assert not connection.in_transaction
        assert connection in [c for free in connections._idle.values() for c in free]
        assert len(await collect(store, chain.session_id)) == 1 + 3 * 4
        assert opened == [connection]  # the next read reused it


ABANDONED_AT_EXIT = """
import sys, threading
import anyio
from envharness.store import read_store

async def main():
    store = await read_store(sys.argv[1])
    [info] = await store.sessions()
    async for record in store.records(info.id):
        break  # no aclosing: the generator is finalised when the event loop shuts down

anyio.run(main, backend=sys.argv[2])
for thread in threading.enumerate():  # a worker on its way out gets a moment (a busy machine)
    if thread is not threading.main_thread() and not thread.daemon:
        thread.join(timeout=10)
print(sorted(t.name for t in threading.enumerate() if not t.daemon and t.is_alive()))
"""


def test_a_read_left_unclosed_leaves_no_thread_behind(tmp_path: Path, anyio_backend: str) -> None:
    """A worker thread started while the event loop shuts down is never stopped, and Python
    waits for it at exit forever: the finalised read must not need one."""

    async def write() -> None:
        async with open_store(tmp_path) as store:
            await seed(store, turns=2)

    anyio.run(write)
    found = subprocess.run(
        [sys.executable, "-c", ABANDONED_AT_EXIT, str(tmp_path), anyio_backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert found.stdout.strip() == "['MainThread']"


async def test_readers_cannot_write(store_path: Path) -> None:
    async with open_store(store_path) as store:
        await seed(store, turns=1)
    connection = reader_module.open_reader(store_path)
    try:
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
            connection.execute("DELETE FROM blobs")
    finally:
        connection.close()


# -- the session index -------------------------------------------------------------------------


async def test_sessions_are_listed_and_filtered(store_path: Path) -> None:
    async with open_store(store_path) as store:
        one, created_one = new_session("ses_aaa1", scenario_id="a", experiment_id="exp_1")
        two, created_two = new_session("ses_aaa2", scenario_id="b", experiment_id="exp_1")
        _, created_three = new_session("ses_bbb3", scenario_id="c")
        await store.append([created_one, status_row(one, "running")])
        await store.append([created_two, status_row(two, "completed", "finished")])
        await store.append([created_three])
        listed = await store.sessions()
        assert [info.id for info in listed] == ["ses_aaa1", "ses_aaa2", "ses_bbb3"]
        assert [info.id for info in await store.sessions(status="completed")] == ["ses_aaa2"]
        in_experiment = await store.sessions(experiment_id="exp_1")
        assert [info.id for info in in_experiment] == ["ses_aaa1", "ses_aaa2"]
        assert await store.sessions(status="running", experiment_id="exp_2") == []
        info = await store.session("ses_aaa2")
        assert (info.scenario_id, info.status, info.reason, info.records) == (
            "b",
            "completed",
            "finished",
            2,
        )
        assert info.created_at == created_two.at


async def test_a_session_is_found_by_unique_prefix(store_path: Path) -> None:
    async with open_store(store_path) as store:
        for session_id in ("ses_aaa1", "ses_aaa2", "ses_bbb3", "ses_bbb"):
            await store.append([new_session(session_id)[1]])
        assert (await store.session("ses_aaa1")).id == "ses_aaa1"
        assert (await store.session("ses_bbb3")).id == "ses_bbb3"
        # An exact id wins over being a prefix of another.
        assert (await store.session("ses_bbb")).id == "ses_bbb"
        with pytest.raises(NotFoundError, match="ambiguous"):
            await store.session("ses_aa")
        with pytest.raises(NotFoundError, match="no session 'ses_zzz'"):
            await store.session("ses_zzz")


async def test_an_empty_id_never_picks_the_only_session(store_path: Path) -> None:
    """An empty string is a prefix of every id: with one session in the store it used to be
    that session, so resume("") or lineage("") acted on it."""
    async with open_store(store_path) as store:
        await store.append([new_session("ses_only")[1]])
        for empty in ("", "  "):
            with pytest.raises(NotFoundError, match="an empty session id names no session"):
                await store.session(empty)
            with pytest.raises(NotFoundError, match="an empty experiment id"):
                await store.experiment(empty)
            with pytest.raises(NotFoundError, match="an empty optimizer run id"):
                await store.optimizer_run(empty)


# -- state blobs -------------------------------------------------------------------------------


async def test_blobs_are_read_back_and_checked(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, created = new_session()
        rows, blobs = turn_rows(chain, 1)
        await store.append([created, *rows], blobs)
        [(digest, data)] = blobs.items()
        assert await store.blob(digest) == data
        with pytest.raises(NotFoundError, match="no state blob"):
            await store.blob(hashlib.sha256(b"other").hexdigest())
        with plain(store_path) as connection:
            connection.execute("UPDATE blobs SET data = ? WHERE digest = ?", (b"forged", digest))
        with pytest.raises(StoreError, match="corrupt"):
            await store.blob(digest)


async def test_reading_a_damaged_database_is_a_store_error(store_path: Path) -> None:
    async with open_store(store_path) as store:
        await seed(store, turns=1)
        with plain(store_path) as connection:
            connection.execute("DROP TABLE sessions")
        with pytest.raises(StoreError, match="no such table"):
            await store.sessions()
    assert (store_path / DATABASE_NAME).exists()
