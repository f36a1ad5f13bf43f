"""Several runners on one PostgreSQL store: different sessions written at once, one session never
driven by two, a dead runner's sessions found by its owner lock (and a live one's never), and a
connection that drops mid-batch — the batch retried once, never half-written nor duplicated."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from envharness.errors import ChainConflictError, StoreError
from envharness.records import SegmentStarted, SessionChain
from envharness.store.owners import this_process
from envharness.store.postgres import PostgresStore, open_postgres_store, read_postgres_store
from envharness.store.postgres.driver import connect
from envharness.store.postgres.ownership import owner_key
from envharness.store.postgres.schema import LOCKS
from envharness.store.postgres.writer import PostgresJournal, _Dropped
from tests import _engines

from .._support import logs, new_session, status_row
from ._support import raw as raw_connection

pytestmark = pytest.mark.anyio

GONE_WAIT_S = 30
"""How long a terminated server process may take to exit (a wait, not a speed check)."""


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "pgrunners") as url:
        yield url


def _terminate(url: str, pid: int) -> None:
    """What a crash or a network cut does to a runner's connection: the server ends it (and
    frees its locks) — waited for until the server process has gone."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + GONE_WAIT_S
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall():
            if time.monotonic() > deadline:
                pytest.fail(f"server process {pid} outlived pg_terminate_backend")
            time.sleep(0.01)


async def _kill_writer(url: str, store: PostgresStore) -> None:
    await anyio.to_thread.run_sync(_terminate, url, await store.journal.backend_pid())


def _count(url: str, session_id: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        query = "SELECT count(*) FROM records WHERE session_id = %s"
        return int(connection.execute(query, (session_id,)).fetchone()[0])


def _started(chain: SessionChain, segment: int = 0) -> Any:
    return chain.seal(SegmentStarted(segment=segment, runner=this_process()))


async def test_two_runners_write_different_sessions_at_once(database: str) -> None:
    chains = [new_session() for _ in range(8)]

    async def run(store: PostgresStore, chain: SessionChain, created: Any) -> None:
        await store.append([created, _started(chain)])
        for _ in range(3):
            await store.append(logs(chain, 4))
        await store.append([status_row(chain, "completed")])

    async with open_postgres_store(database) as one, open_postgres_store(database) as two:
        async with anyio.create_task_group() as group:
            for index, (chain, created) in enumerate(chains):
                group.start_soon(run, one if index % 2 else two, chain, created)
        infos = [await one.session(chain.session_id) for chain, _ in chains]
        followed = [
            row
            for chain, _ in chains
            async for row in two.rows(chain.session_id)  # read by the other runner
        ]
        report = await two.verify()
    assert {(info.status, info.records) for info in infos} == {("completed", 15)}
    assert len(followed) == 8 * 15
    assert report.ok, report.breaks


async def test_a_second_runner_cannot_drive_a_running_session(database: str) -> None:
    chain, created = new_session()
    async with open_postgres_store(database) as first, open_postgres_store(database) as second:
        await first.append([created, status_row(chain, "interrupted")])
        rival = SessionChain(chain.session_id, next_seq=chain.next_seq, prev=chain.head)
        await first.append([_started(chain, 1)])
        with pytest.raises(ChainConflictError):  # the same position: taken
            await second.append([_started(rival, 1)])
        # The next position, as if it had read the new head: its owner lock is refused.
        later = SessionChain(chain.session_id, next_seq=chain.next_seq, prev=chain.head)
        with pytest.raises(ChainConflictError, match="run by another runner"):
            await second.append([later.seal(SegmentStarted(segment=2, runner=this_process()))])
        await first.append(logs(chain, 2))  # the owner goes on
    assert await anyio.to_thread.run_sync(_count, database, chain.session_id) == 5


async def test_a_runner_whose_connection_died_is_recovered_and_a_live_one_is_not(
    database: str,
) -> None:
    dead, dead_created = new_session()
    live, live_created = new_session()
    async with open_postgres_store(database) as doomed, open_postgres_store(database) as alive:
        await doomed.append([dead_created, _started(dead), *logs(dead, 2)])
        await alive.append([live_created, _started(live)])
        await _kill_writer(database, doomed)
        async with open_postgres_store(database) as third:  # its recovery runs on open
            dead_info = await third.session(dead.session_id)
            live_info = await third.session(live.session_id)
        await alive.append(logs(live, 1))  # untouched, still its own
    assert dead_info.status == "interrupted"
    assert dead_info.records == 6
    assert live_info.status == "created"
    assert live_info.records == 2


async def test_a_batch_whose_connection_dropped_is_sent_again_once(database: str) -> None:
    chain, created = new_session()
    async with open_postgres_store(database) as store:
        await store.append([created, _started(chain)])
        await _kill_writer(database, store)
        await store.append(logs(chain, 3))  # the drop is met here, and the batch retried
        with psycopg.connect(database, autocommit=True) as other:
            # Its owner lock was taken again before the retry: another runner is refused.
            key = owner_key(chain.session_id)
            (taken,) = other.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    assert taken is False
    assert await anyio.to_thread.run_sync(_count, database, chain.session_id) == 5


async def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain, created = new_session()
    real = PostgresJournal._transaction
    lost: list[int] = []

    def commit_then_drop(journal: PostgresJournal, batch: Any) -> None:
        real(journal, batch)
        if not lost:  # committed; the connection dies before the answer reaches the writer
            lost.append(journal._ensure().info.backend_pid)
            _terminate(database, lost[0])
            raise _Dropped("the answer to the commit was lost")

    async with open_postgres_store(database) as store:
        await store.append([created])
        monkeypatch.setattr(PostgresJournal, "_transaction", commit_then_drop)
        await store.append(logs(chain, 2))
        monkeypatch.setattr(PostgresJournal, "_transaction", real)
        await store.append(logs(chain, 1))
        report = await store.verify()
    assert lost
    assert await anyio.to_thread.run_sync(_count, database, chain.session_id) == 4
    assert report.ok, report.breaks


async def test_a_connection_that_drops_twice_fails_the_batch_whole(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain, created = new_session()
    real = PostgresJournal._transaction

    def drop_first(journal: PostgresJournal, batch: Any) -> None:
        _terminate(database, journal._ensure().info.backend_pid)
        real(journal, batch)

    async with open_postgres_store(database) as store:
        await store.append([created])
        monkeypatch.setattr(PostgresJournal, "_transaction", drop_first)
        with pytest.raises(StoreError, match=r"dropped twice.*whole or not at all"):
            await store.append(logs(chain, 3))
        monkeypatch.setattr(PostgresJournal, "_transaction", real)
        with pytest.raises(StoreError, match="nothing more is written"):
            await store.append(logs(chain, 1))  # its chain has a gap: it stops
    assert await anyio.to_thread.run_sync(_count, database, chain.session_id) == 1


async def test_a_session_taken_over_while_the_connection_was_down_stops(database: str) -> None:
    taken, taken_created = new_session()
    kept, kept_created = new_session()
    async with open_postgres_store(database) as store:
        await store.append([taken_created, _started(taken), kept_created, _started(kept)])
        pid = await store.journal.backend_pid()
        with psycopg.connect(database, autocommit=True) as thief:
            await anyio.to_thread.run_sync(_terminate, database, pid)
            thief.execute("SELECT pg_advisory_lock(%s)", (owner_key(taken.session_id),))
            with pytest.raises(StoreError, match="taken over by another runner"):
                await store.append(logs(taken, 1))
            await store.append(logs(kept, 1))  # its lock was taken again: it goes on
    assert await anyio.to_thread.run_sync(_count, database, taken.session_id) == 2
    assert await anyio.to_thread.run_sync(_count, database, kept.session_id) == 3


async def test_positions_wait_for_the_positions_lock_so_they_follow_commit_order(
    database: str,
) -> None:
    """A transaction takes its positions only once it holds the positions lock, which it keeps
    to its commit: while another holds it, nothing new becomes visible, so no reader can see a
    later position before an earlier one."""
    chain, created = new_session()
    async with open_postgres_store(database) as store, raw_connection(database) as holder:
        before = await store.last_position()
        lock = (LOCKS.NAMESPACE, LOCKS.POSITIONS)
        await anyio.to_thread.run_sync(
            lambda: holder.execute("SELECT pg_advisory_lock(%s, %s)", lock)
        )
        writer = await store.journal.backend_pid()
        async with anyio.create_task_group() as group:
            group.start_soon(store.append, [created, *logs(chain, 2)])
            await anyio.to_thread.run_sync(_wait_for_lock_wait, holder, writer)
            held_back = await store.last_position()
            await anyio.to_thread.run_sync(
                lambda: holder.execute("SELECT pg_advisory_unlock(%s, %s)", lock)
            )
        after = await store.last_position()
    assert held_back == before
    assert after > before


def _wait_for_lock_wait(connection: psycopg.Connection[Any], pid: int) -> None:
    """Until the server process ``pid`` waits for an advisory lock."""
    query = "SELECT 1 FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted"
    deadline = time.monotonic() + GONE_WAIT_S
    while not connection.execute(query, (pid,)).fetchall():
        if time.monotonic() > deadline:
            pytest.fail(f"server process {pid} never waited for the positions lock")
        time.sleep(0.01)


async def test_a_reader_shows_a_dead_runners_session_interrupted_without_writing(
    database: str,
) -> None:
    """On any host: the owner lock, not the pid, tells a reader the runner is gone."""
    dead, dead_created = new_session()
    live, live_created = new_session()
    async with open_postgres_store(database) as doomed, open_postgres_store(database) as alive:
        await doomed.append([dead_created, _started(dead)])
        await alive.append([live_created, _started(live)])
        async with read_postgres_store(database) as reader:
            before = await reader.session(dead.session_id)
            await _kill_writer(database, doomed)
            shown = await reader.session(dead.session_id)
            listed = {info.id: info for info in await reader.sessions(status="interrupted")}
            still = await reader.session(live.session_id)
    assert before.status == "created"
    assert shown.status == "interrupted"
    assert shown.reason == f"its runner (pid {this_process().pid} on {this_process().host}) is gone"
    assert shown.records == 2  # shown, not written
    assert dead.session_id in listed
    assert live.session_id not in listed
    assert still.status == "created"


async def test_a_read_on_a_connection_the_server_ended_is_made_again(database: str) -> None:
    chain, created = new_session()
    async with open_postgres_store(database) as store:
        await store.append([created])
        await store.session(chain.session_id)  # a read connection, now kept idle
        writer = await store.journal.backend_pid()

        def end_readers() -> None:
            with psycopg.connect(database, autocommit=True) as admin:
                query = (
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'envharness' AND pid <> %s"
                )
                for (pid,) in admin.execute(query, (writer,)).fetchall():
                    _terminate(database, pid)

        await anyio.to_thread.run_sync(end_readers)
        info = await store.session(chain.session_id)
    assert info.records == 1


async def test_a_database_that_cannot_be_reached_again_fails_the_batch_cleanly(
    database: str, postgres_server: _engines.PostgresServer
) -> None:
    chain, created = new_session()
    nowhere = f"postgresql://{postgres_server.user}@127.0.0.1:{_engines.free_port()}/x"
    async with open_postgres_store(database) as store:
        await store.append([created])
        await _kill_writer(database, store)
        store.journal._connect = lambda: connect(nowhere)  # the server is gone for good
        with pytest.raises(StoreError, match=r"could not be made again.*whole or not at all"):
            await store.append(logs(chain, 2))
        with pytest.raises(StoreError, match="nothing more is written"):
            await store.append(logs(chain, 1))
    assert await anyio.to_thread.run_sync(_count, database, chain.session_id) == 1
