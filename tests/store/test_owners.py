"""After kill -9, reads show what the runner left as ``interrupted`` — without writing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from envharness.store import ExperimentInfo, SessionInfo, open_store, read_store

from ._support import count_rows, plain

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import sys, anyio
from envharness.records import ExperimentCreated, ExperimentStatus, SegmentStarted
from envharness.records import SessionCreated, SessionStatus
from envharness.store import open_store
from envharness.store.owners import this_process
from tests.service._support import ExperimentWriter

sweep = ExperimentWriter(("first",), trials=1)
session = sweep.session("first", 0)

async def main():
    async with open_store(sys.argv[1]) as store:
        await store.append([
            sweep.chain.seal(ExperimentCreated(config=sweep.config)),
            sweep.chain.seal(ExperimentStatus(status="running", total=1, runner=this_process())),
        ])
        await store.append([
            session.chain.seal(SessionCreated(config=session.config)),
            session.chain.seal(SegmentStarted(segment=0, runner=this_process())),
            session.chain.seal(SessionStatus(status="running")),
        ])
        print(session.id, sweep.id, flush=True)
        await anyio.sleep(60)  # killed here

anyio.run(main)
"""


@pytest.mark.slow
def test_a_killed_runners_sessions_read_as_interrupted_without_a_write(tmp_path: Path) -> None:
    store = tmp_path / "store"
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(store)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    session_id, experiment_id = process.stdout.readline().split()
    try:
        alive = anyio.run(read_store, store)
        assert anyio.run(alive.session, session_id).status == "running"  # its runner lives
        assert anyio.run(alive.experiment, experiment_id).status == "running"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        process.stdout.close()
    records = count_rows(store)

    async def read() -> tuple[SessionInfo, list[str], list[SessionInfo], ExperimentInfo]:
        reader = await read_store(store)
        interrupted = [info.id for info in await reader.sessions(status="interrupted")]
        running = await reader.sessions(status="running")
        return (
            await reader.session(session_id),
            interrupted,
            running,
            (await reader.experiment(experiment_id)),
        )

    info, interrupted, running, experiment = anyio.run(read)
    assert info.status == "interrupted"
    assert info.reason == f"its runner (pid {process.pid} on {socket.gethostname()}) is gone"
    assert (interrupted, running) == ([session_id], [])
    assert experiment.status == "interrupted"
    assert (experiment.sessions.interrupted, experiment.sessions.running) == (1, 0)
    # Shown, not written: the store is as the runner left it.
    assert count_rows(store) == records
    with plain(store) as connection:
        assert connection.execute("SELECT status FROM sessions").fetchall() == [("running",)]

    async def write_then_read() -> SessionInfo:
        async with open_store(store, create=False):
            pass  # the next writer records what the readers showed
        return await (await read_store(store)).session(session_id)

    recorded = anyio.run(write_then_read)
    assert count_rows(store) == records + 3  # interrupted, segment ended; the experiment's
    assert (recorded.status, recorded.reason) == (info.status, info.reason)
