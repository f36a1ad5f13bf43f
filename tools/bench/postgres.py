"""PostgreSQL store throughput against raw ``COPY`` of the same rows, and against the SQLite
store, in the same run (issue 14: acknowledged appends at least 0.5x a raw ``COPY``).

What it measures, in records per second:

(a) raw ``COPY``: the sealed rows written by binary ``COPY`` into the store's own ``records``
    table, 500 rows a transaction, from one connection: no acknowledgement to anyone, no
    session index, no blobs, no event loop.
(b) the PostgreSQL store: ``--sessions`` concurrent producer tasks, each awaiting
    ``append`` of ``--batch`` records at a time — it returns only after the transaction that
    holds them committed (group commit, binary ``COPY``, positions in commit order, the
    session index kept).
(c) the SQLite store, with the same producers and rows.

It prints b/a (the target is at least 0.5) and c/b. The chains are logs that no index holds
(the worst case for the index: each chain's head is sought among the sessions, then the
experiments, then the optimizer runs); with ``--indexed`` each opens with ``session.created``,
as a session's does, and its head moves in the sessions' index.

The server is a fresh PostgreSQL started for the run the way the tests start theirs
(``tests/_engines.py``: Debian's ``initdb`` and ``pg_ctl``, loopback only, ``fsync=off`` — so
the ratio compares the work, not the disk), or the one ``--url`` names (a database it may
create databases on).

Run it from the repository root::

    .venv/bin/python tools/bench/postgres.py                   # 100,000 records
    .venv/bin/python tools/bench/postgres.py --records 20000   # quicker
    .venv/bin/python tools/bench/postgres.py --indexed         # chains that are sessions
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests/_engines.py starts the server

from envharness.records import Log, RecordRow, SessionChain, SessionCreated, new_id  # noqa: E402
from envharness.store import open_store  # noqa: E402
from envharness.store.postgres import open_postgres_store  # noqa: E402
from tests import _engines  # noqa: E402
from tests.store._support import config  # noqa: E402

COPY_ROWS = 500
"""Rows per transaction of the raw ``COPY``."""
COPY = (
    "COPY records (session_id, seq, kind, turn, participant, at, payload, prev, digest) "
    "FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = ["text", "int8", "text", "int8", "text", "text", "bytea", "text", "text"]


def sessions(count: int, per_session: int, indexed: bool = False) -> list[list[RecordRow]]:
    """``count`` fresh chains of ``per_session`` sealed records each (the first a log opening
    the chain, as the journal benchmark's are; with ``indexed``, a ``session.created``)."""
    made = []
    for _ in range(count):
        chain = SessionChain(new_id("ses"))
        rows = [chain.seal(SessionCreated(config=config()))] if indexed else []
        rows += [chain.seal(Log(message=f"record {n}")) for n in range(len(rows), per_session)]
        made.append(rows)
    return made


async def appended(store: Any, chains: list[list[RecordRow]], batch: int) -> float:
    """Seconds for every producer to append its chain, ``batch`` records a call."""

    async def produce(rows: list[RecordRow]) -> None:
        for start in range(0, len(rows), batch):
            await store.append(rows[start : start + batch])

    started = time.perf_counter()
    async with anyio.create_task_group() as producers:
        for rows in chains:
            producers.start_soon(produce, rows)
    return time.perf_counter() - started


def copied(url: str, rows: list[RecordRow]) -> float:
    """Seconds to ``COPY`` ``rows`` into ``url``'s records table, 500 a transaction."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        for start in range(0, len(rows), COPY_ROWS):
            with connection.transaction(), connection.cursor().copy(COPY) as copy:
                copy.set_types(COPY_TYPES)
                for row in rows[start : start + COPY_ROWS]:
                    copy.write_row(row)
        return time.perf_counter() - started


@contextlib.contextmanager
def databases(url: str | None) -> Iterator[Any]:
    """A factory of fresh databases on the named server, or on one started for the run."""
    if url is not None:
        yield lambda: _created(url)
        return
    with _engines.running_postgres() as server:
        yield lambda: _created(server.url())


def _created(url: str) -> str:
    import psycopg
    from psycopg import sql

    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return url.rsplit("/", 1)[0] + "/" + name


async def main(records: int, producers: int, batch: int, url: str | None, indexed: bool) -> None:
    per_session = max(1, records // producers)
    total = per_session * producers
    with databases(url) as fresh:
        async with open_postgres_store(fresh()) as store:
            postgres = await appended(store, sessions(producers, per_session, indexed), batch)
        target = fresh()
        async with open_postgres_store(target):
            pass  # the schema, for the raw COPY to write into
        rows = [row for chain in sessions(producers, per_session, indexed) for row in chain]
        raw = await anyio.to_thread.run_sync(copied, target, rows)
    with tempfile.TemporaryDirectory() as directory:
        async with open_store(Path(directory) / "store") as store:
            sqlite = await appended(store, sessions(producers, per_session, indexed), batch)
    chains = "sessions" if indexed else "log chains no index holds"
    print(f"{total:,} records, {producers} producers appending {batch} at a time ({chains})")
    print(f"  (a) raw binary COPY, {COPY_ROWS}-row transactions: {total / raw:>10,.0f} rec/s")
    print(f"  (b) PostgreSQL store, acknowledged:            {total / postgres:>10,.0f} rec/s")
    print(f"  (c) SQLite store, acknowledged:                {total / sqlite:>10,.0f} rec/s")
    print(f"  b/a = {raw / postgres:.2f} (target >= 0.5)   c/b = {postgres / sqlite:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100, help="concurrent producers")
    parser.add_argument("--batch", type=int, default=50, help="records per append")
    parser.add_argument("--url", help="a server to use instead of starting one")
    parser.add_argument(
        "--indexed", action="store_true", help="chains open with session.created (sessions)"
    )
    arguments = parser.parse_args()
    anyio.run(
        main,
        arguments.records,
        arguments.sessions,
        arguments.batch,
        arguments.url,
        arguments.indexed,
    )
