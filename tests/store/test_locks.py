"""Checking a store's file never drops this process's SQLite locks on it.

POSIX advisory locks belong to a process: closing *any* descriptor of a file drops every lock
the process holds on it, SQLite's own included (https://www.sqlite.org/howtocorrupt.html,
section 2.2). A WAL connection holds a shared lock on the database file for as long as it is
open; without it, another process's last connection takes itself for the only one, checkpoints
and deletes the write-ahead log on closing, and every commit this process makes after that goes
to a deleted file. Here process A keeps a writer and a pooled reader open, then checks the store
again (a second ``connect``, or ``verify``), process B (the test) opens and closes the store,
and A commits more before it dies: every acknowledged commit must be in the store.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envharness.store.damage import header_problem
from envharness.store.database import DATABASE_NAME, connect
from envharness.store.handles import lock_holders
from envharness.store.walscan import WAL_SUFFIX

from ._support import plain

PROCESS_A = """
import os, sys
from pathlib import Path
from envharness.store.artifacts import ArtifactFiles
from envharness.store.connections import open_reader, release_reader, take_reader
from envharness.store.database import connect
from envharness.store.verify import verify_store

directory, again = Path(sys.argv[1]), sys.argv[2]
writer = connect(directory, create=True)
writer.execute("CREATE TABLE probe (n INTEGER NOT NULL)")
key, reader = take_reader(directory)  # a pooled reader, idle (and holding its locks) after
reader.execute("SELECT count(*) FROM probe").fetchone()
release_reader(key, reader)
for n in range(5):
    writer.execute("INSERT INTO probe VALUES (?)", (n,))
if again == "connect":
    connect(directory, create=False).close()  # the header is checked on every open
else:
    checker = open_reader(directory)
    report = verify_store(checker, ArtifactFiles(directory / "artifacts"))
    assert report.ok, report.breaks
    checker.close()
print("acknowledged 5", flush=True)
sys.stdin.readline()  # process B opens and closes the store meanwhile
for n in range(5, 10):
    writer.execute("INSERT INTO probe VALUES (?)", (n,))  # autocommit, synchronous=FULL
print("acknowledged 10", flush=True)
os._exit(0)  # killed: no clean close, nothing checkpointed on the way out
"""


@pytest.mark.parametrize("again", ["connect", "verify"])
def test_checking_the_store_again_keeps_the_locks_of_connections_already_open(
    tmp_path: Path, again: str
) -> None:
    store = tmp_path / "store"
    with subprocess.Popen(
        [sys.executable, "-c", PROCESS_A, str(store), again],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            said = process.stdout.readline().strip()
            assert said == "acknowledged 5", process.communicate()[1]
            # Process B: sees A's commits, and closes what it takes for the last connection.
            with plain(store) as connection:
                assert connection.execute("SELECT count(*) FROM probe").fetchone() == (5,)
            log_kept = (store / f"{DATABASE_NAME}{WAL_SUFFIX}").exists()
            process.stdin.write("\n")
            process.stdin.flush()
            assert process.stdout.readline().strip() == "acknowledged 10"
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
    with plain(store) as connection:
        found = [n for (n,) in connection.execute("SELECT n FROM probe ORDER BY n")]
    assert found == list(range(10)), "acknowledged commits were lost"
    # Had A lost its locks, B's close would have checkpointed and deleted the log.
    assert log_kept


def _descriptors_of(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    wanted = os.stat(path)
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            status = os.stat(f"/proc/self/fd/{name}")
            count += (status.st_dev, status.st_ino) == (wanted.st_dev, wanted.st_ino)
    return count


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc/locks (Linux)")
def test_a_plain_connection_of_this_process_keeps_its_locks_too(tmp_path: Path) -> None:
    """A connection opened outside envharness is not counted; the descriptor envharness keeps
    for the file stays open while this process holds a lock on it, and closes after."""
    store = tmp_path / "store"
    database = store / DATABASE_NAME
    connect(store, create=True).close()
    with plain(store) as connection:
        connection.execute("SELECT count(*) FROM sessions").fetchone()
        assert os.getpid() in (lock_holders(os.stat(database)) or ())
        connect(store, create=False).close()  # the last handle envharness counts
        assert header_problem(database) is None  # read with none open
        assert os.getpid() in (lock_holders(os.stat(database)) or ()), "the locks were dropped"
    assert _descriptors_of(database) == 1  # kept while the plain connection was open
    connect(store, create=False).close()
    assert _descriptors_of(database) == 0
