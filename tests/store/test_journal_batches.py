"""How the journal writes a transaction: many rows to a statement, one index change per chain.

Each test compares against the plain meaning — every row stored as sealed and in the order
handed over; the index as appending the same records one by one leaves it — not against how
the writer goes about it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from envharness.records import RecordRow, RunnerRef, SegmentEnded, SegmentStarted, SessionChain
from envharness.store import open_store
from envharness.store.journal import ROWS_PER_INSERT, Journal

from ._support import logs, new_session, plain, status_row, stored_rows_and_blobs, turn_rows

pytestmark = pytest.mark.anyio

RUNNER = RunnerRef(host="here", pid=7)


def whole_life(session_id: str) -> tuple[list[RecordRow], dict[str, bytes]]:
    """A session from ``session.created`` to ``segment.ended``, with two turns."""
    chain, created = new_session(session_id, scenario_id="sc", experiment_id="exp_1")
    rows = [created, status_row(chain, "running")]
    rows.append(chain.seal(SegmentStarted(segment=0, runner=RUNNER)))
    blobs: dict[str, bytes] = {}
    for turn in (1, 2):
        more, state = turn_rows(chain, turn)
        rows += more
        blobs |= state
    rows.append(status_row(chain, "completed", "done"))
    rows.append(chain.seal(SegmentEnded(segment=0, status="completed")))
    return rows, blobs


def index_row(store: Path, session_id: str) -> tuple[object, ...]:
    with plain(store) as connection:
        row = connection.execute(
            "SELECT experiment_id, scenario_id, status, reason, created_at, updated_at,"
            " turns_completed, head_seq, head_digest, owner, parent_id, parent_seq"
            " FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
    assert row is not None
    return tuple(row)


async def test_a_session_in_one_commit_is_indexed_as_record_by_record(store_path: Path) -> None:
    at_once, blobs = whole_life("ses_at_once")
    one_by_one, _ = whole_life("ses_one_by_one")
    async with open_store(store_path) as store:
        await store.append(at_once, blobs)
        for row in one_by_one:
            await store.append([row], blobs)
    folded = index_row(store_path, "ses_at_once")
    stepwise = index_row(store_path, "ses_one_by_one")
    # The two differ only in their own times and digests, which the index copies.
    assert folded[:4] + folded[6:8] + folded[9:] == stepwise[:4] + stepwise[6:8] + stepwise[9:]
    assert folded[:4] == ("exp_1", "sc", "completed", "done")
    assert (folded[6], folded[7], folded[9]) == (2, len(at_once) - 1, None)
    assert (folded[4], folded[5], folded[8]) == (at_once[0].at, at_once[-1].at, at_once[-1].digest)


async def test_an_owner_is_kept_while_the_segment_runs(store_path: Path) -> None:
    rows, blobs = whole_life("ses_running")
    async with open_store(store_path) as store:
        await store.append(rows[:-2], blobs)  # still running: segment.ended not yet written
    assert index_row(store_path, "ses_running")[2:4] == ("running", None)
    assert index_row(store_path, "ses_running")[9] == '{"host":"here","pid":7,"started":null}'


async def test_rows_across_many_statements_are_stored_as_sealed_in_order(
    store_path: Path,
) -> None:
    chains = [SessionChain(f"ses_{index}") for index in range(3)]
    rows = [row for _ in range(ROWS_PER_INSERT) for chain in chains for row in logs(chain, 1)]
    rows += logs(chains[0], 5)  # and a remainder that fills no statement
    blobs = {hashlib.sha256(bytes([n])).hexdigest(): bytes([n]) for n in range(150)}
    async with open_store(store_path) as store:
        await store.append(rows, blobs)
    assert stored_rows_and_blobs(store_path) == (rows, blobs)


async def test_sessions_created_together_are_indexed_as_one_by_one(store_path: Path) -> None:
    """More new sessions than one statement carries, in one commit, and a session created in
    an earlier commit that the same commit moves on."""
    count = ROWS_PER_INSERT * 2 + 3
    lives = [whole_life(f"ses_{index:03d}") for index in range(count)]
    earlier, earlier_blobs = whole_life("ses_earlier")
    together = [row for rows, _ in lives for row in rows] + earlier[2:]
    blobs = {digest: data for _, kept in lives for digest, data in kept.items()}
    alone, alone_blobs = whole_life("ses_alone")
    async with open_store(store_path) as store:
        await store.append(earlier[:2], earlier_blobs)
        await store.append(together, blobs | earlier_blobs)
        await store.append(alone, alone_blobs)
    expected = index_row(store_path, "ses_alone")
    for index in range(count):
        row = index_row(store_path, f"ses_{index:03d}")
        assert row[:4] + row[6:8] + row[9:] == expected[:4] + expected[6:8] + expected[9:]
        rows = lives[index][0]
        assert (row[4], row[5], row[8]) == (rows[0].at, rows[-1].at, rows[-1].digest)
    moved = index_row(store_path, "ses_earlier")
    assert moved[:4] + moved[6:8] == expected[:4] + expected[6:8]
    with plain(store_path) as connection:
        (sessions,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    assert sessions == count + 2


async def test_batches_handed_over_back_to_back_share_one_commit_and_each_is_committed(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer with several batches at hand (a remote worker's driver, reading a worker's
    frames) hands them all over before the writer takes one: one transaction holds them."""
    transactions: list[int] = []
    write = Journal._transaction

    def counted(journal: Journal, batch: Sequence[Any]) -> None:
        transactions.append(len(batch))
        write(journal, batch)

    monkeypatch.setattr(Journal, "_transaction", counted)
    lives = [whole_life(f"ses_{n}") for n in range(3)]
    async with open_store(store_path) as store:
        pending = [await store.submit(rows, blobs) for rows, blobs in lives]
        for each in pending:
            await each.committed()
    assert transactions == [3]
    for n in range(3):
        assert index_row(store_path, f"ses_{n}")[2] == "completed"


async def test_a_submit_in_a_cancelled_scope_hands_nothing_over(store_path: Path) -> None:
    """Handing over takes no pass of the loop, but a cancelled producer is still stopped
    before it: a stop asked meanwhile is heard, and nothing half-decided is written."""
    rows, blobs = whole_life("ses_cancelled")
    async with open_store(store_path) as store:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.submit(rows, blobs)
        assert scope.cancelled_caught
        assert await store.sessions() == []
