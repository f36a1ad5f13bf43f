"""Helpers shared by the store tests: sealed rows for a session, and a plain SQLite look."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envharness.records import (
    EnvironmentRef,
    Log,
    Outcome,
    ParticipantRef,
    RecordRow,
    ScenarioRef,
    SessionChain,
    SessionConfig,
    SessionCreated,
    SessionStatus,
    new_id,
)
from envharness.store.database import DATABASE_NAME
from envharness.store.journal import Journal


def config(scenario_id: str = "scenario-1", experiment_id: str | None = None) -> SessionConfig:
    return SessionConfig(
        environment=EnvironmentRef(
            name="test-env",
            version="1",
            turn_order="simultaneous",
            roles=("agent",),
            input_type="tests.Input",
        ),
        participants={"alice": ParticipantRef(role="agent", implementation="a@1")},
        scenario=ScenarioRef(id=scenario_id, input={}),
        seed=0,
        turns=1,
        envharness_version="test",
        experiment_id=experiment_id,
    )


def new_session(
    session_id: str | None = None,
    *,
    scenario_id: str = "scenario-1",
    experiment_id: str | None = None,
) -> tuple[SessionChain, RecordRow]:
    """A fresh chain and its sealed ``session.created`` row."""
    chain = SessionChain(session_id or new_id("ses"))
    row = chain.seal(SessionCreated(config=config(scenario_id, experiment_id)))
    return chain, row


def logs(chain: SessionChain, count: int, **options: Any) -> list[RecordRow]:
    return [
        chain.seal(Log(message=f"{chain.session_id} #{chain.next_seq}"), **options)
        for _ in range(count)
    ]


def session_rows(count: int, session_id: str | None = None) -> list[RecordRow]:
    """``session.created`` followed by ``count - 1`` log rows."""
    chain, created = new_session(session_id)
    return [created, *logs(chain, count - 1)]


def turn_rows(
    chain: SessionChain, turn: int, participants: tuple[str, ...] = ("alice", "bob")
) -> tuple[list[RecordRow], dict[str, bytes]]:
    """A turn's worth of rows (a log per participant, then an outcome) and its state blob."""
    state = f'{{"turn":{turn}}}'.encode()
    digest = hashlib.sha256(state).hexdigest()
    rows = [chain.seal(Log(message=f"turn {turn}"), turn=turn, participant=p) for p in participants]
    rows.append(chain.seal(Outcome(state=digest, signals={"turn": float(turn)}), turn=turn))
    return rows, {digest: state}


def status_row(chain: SessionChain, status: Any, reason: str | None = None) -> RecordRow:
    return chain.seal(SessionStatus(status=status, reason=reason))


@contextlib.contextmanager
def plain(store: Path) -> Iterator[sqlite3.Connection]:
    """A separate, plain sqlite3 connection to the store's database (no envharness code)."""
    connection = sqlite3.connect(store / DATABASE_NAME, isolation_level=None, timeout=10)
    try:
        yield connection
    finally:
        connection.close()


def stored_rows_and_blobs(store: Path) -> tuple[list[RecordRow], dict[str, bytes]]:
    """Every record in the order it was stored, and every blob, read with plain sqlite3."""
    with plain(store) as connection:
        stored = connection.execute(
            "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
            " FROM records ORDER BY pos"
        ).fetchall()
        kept = dict(connection.execute("SELECT digest, data FROM blobs").fetchall())
    return [RecordRow(*row) for row in stored], kept


def count_rows(store: Path, session_id: str | None = None) -> int:
    with plain(store) as connection:
        if session_id is None:
            return int(connection.execute("SELECT count(*) FROM records").fetchone()[0])
        query = "SELECT count(*) FROM records WHERE session_id = ?"
        return int(connection.execute(query, (session_id,)).fetchone()[0])


class Transactions:
    """Wraps :meth:`Journal._transaction` to count transactions and, optionally, hold them.

    ``hold()`` makes the next transactions wait (in the writer's worker thread) until
    ``release()``: the way to stall the writer, or to let requests pile up into one batch.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.batches: list[int] = []
        """Requests in each transaction attempted, in order."""
        self.rows: list[int] = []
        self.failed: list[BaseException] = []
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        original: Callable[[Journal, Any], None] = Journal._transaction

        def wrapped(journal: Journal, batch: Any) -> None:
            batch = list(batch)
            self.entered.set()
            if not self._gate.wait(timeout=30):
                raise AssertionError("the test never released the held writer")
            self.batches.append(len(batch))
            self.rows.append(sum(len(request.rows) for request in batch))
            try:
                original(journal, batch)
            except BaseException as exc:
                self.failed.append(exc)
                raise

        monkeypatch.setattr(Journal, "_transaction", wrapped)

    def hold(self) -> None:
        self.entered.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    @property
    def count(self) -> int:
        return len(self.batches)


@contextlib.contextmanager
def small_disk(mountpoint: Path, size: str = "1m") -> Iterator[Path]:
    """A real, small filesystem (tmpfs) at ``mountpoint``, to fill up; skips the test where
    this process may not mount one (not root, no CAP_SYS_ADMIN)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def resize(mountpoint: Path, size: str) -> None:
    """Make the disk of :func:`small_disk` bigger: space freed."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mountpoint)], check=True)


def fill(directory: Path) -> None:
    """Take every free byte of the filesystem holding ``directory``."""
    with (directory / "filler").open("wb", buffering=0) as stream:
        for size in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while stream.write(bytes(size)):
                    pass
