"""What the journal binds is what is stored, whatever form it binds it in.

The writer binds each NULL as a stand-in that SQL turns back into NULL, and payloads and blobs
as ``bytearray`` (both cheaper for ``sqlite3``): NULLs must stay NULL, no value that merely
resembles a stand-in (a turn 0, an empty or ``"0"`` participant) may become one, and bytes
must stay BLOBs; every number of rows, whatever statements carry them, in order.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from envharness.records import Branch, RecordRow
from envharness.store import open_store
from envharness.store.blobs import read_blob

from ._support import new_session, plain, status_row, stored_rows_and_blobs

pytestmark = pytest.mark.anyio

AT = "2026-01-01T00:00:00Z"


def log_row(
    seq: int, turn: int | None, participant: str | None, prev: str | None, payload: bytes = b"{}"
) -> RecordRow:
    return RecordRow("ses_values", seq, "log", turn, participant, AT, payload, prev, f"d{seq}")


async def test_nulls_stay_null_and_their_look_alikes_stay_values(store_path: Path) -> None:
    rows = [
        log_row(0, None, None, None),
        log_row(1, 0, "", "0"),
        log_row(2, 1, "0", ""),
        log_row(3, None, "alice", "d2", b""),
    ]
    async with open_store(store_path) as store:
        await store.append(rows)
    with plain(store_path) as connection:
        stored = connection.execute(
            "SELECT turn, typeof(turn), participant, typeof(participant), prev, typeof(prev),"
            " payload, typeof(payload) FROM records ORDER BY pos"
        ).fetchall()
    assert stored == [
        (None, "null", None, "null", None, "null", b"{}", "blob"),
        (0, "integer", "", "text", "0", "text", b"{}", "blob"),
        (1, "integer", "0", "text", "", "text", b"{}", "blob"),
        (None, "null", "alice", "text", "d2", "text", b"", "blob"),
    ]


async def test_blobs_stay_blobs_kept_raw_or_compressed(store_path: Path) -> None:
    kept = [b"", b"short", b'{"turn":1}' * 40]  # the last is compressed (pack)
    blobs = {hashlib.sha256(data).hexdigest(): data for data in kept}
    async with open_store(store_path) as store:
        await store.append([log_row(0, None, None, None)], blobs)
    with plain(store_path) as connection:
        types = connection.execute("SELECT DISTINCT typeof(data) FROM blobs").fetchall()
        assert types == [("blob",)]
        assert {digest: read_blob(connection, digest) for digest in blobs} == blobs


@pytest.mark.parametrize("count", [1, 63, 64, 127, 129])
async def test_any_number_of_rows_is_stored_in_order(store_path: Path, count: int) -> None:
    """Counts that take every statement size (64, then 32, 16, … 1) and none of them twice."""
    rows = [log_row(seq, seq % 3 or None, None if seq % 2 else "bob", None) for seq in range(count)]
    blobs = {hashlib.sha256(bytes([n])).hexdigest(): bytes([n]) for n in range(count)}
    async with open_store(store_path) as store:
        await store.append(rows, blobs)
    assert stored_rows_and_blobs(store_path) == (rows, blobs)


async def test_a_new_sessions_nulls_stay_null_and_their_look_alikes_stay_values(
    store_path: Path,
) -> None:
    """The index row of a session created in the commit binds its NULLs as stand-ins too."""
    plain_chain, plain_created = new_session("ses_plain")
    branch_chain, branch_created = new_session("ses_branch", experiment_id="0")
    rows = [
        plain_created,
        status_row(plain_chain, "running"),
        branch_created,
        branch_chain.seal(Branch(parent_session="0", checkpoint_seq=0, intervention=None)),
        status_row(branch_chain, "running", ""),
    ]
    async with open_store(store_path) as store:
        await store.append(rows)
    with plain(store_path) as connection:
        stored = connection.execute(
            "SELECT id, experiment_id, typeof(experiment_id), reason, typeof(reason), owner,"
            " typeof(owner), parent_id, typeof(parent_id), parent_seq, typeof(parent_seq)"
            " FROM sessions ORDER BY id"
        ).fetchall()
    assert stored == [
        ("ses_branch", "0", "text", "", "text", None, "null", "0", "text", 0, "integer"),
        ("ses_plain", None, "null", None, "null", None, "null", None, "null", None, "null"),
    ]
