"""A damaged or cut-short write-ahead log is found before SQLite's recovery drops what it holds.

Every fault is real: a store written by the journal while a reader keeps SQLite from
checkpointing (so its commits live only in the log), its files copied as a crash or a backup
would leave them, then a byte flipped or the log cut in the copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import anyio
import pytest

from envharness.errors import DamagedStoreError, WalDamageError
from envharness.records import SessionChain
from envharness.store import open_store, read_store
from envharness.store.database import DATABASE_NAME
from envharness.store.verify import STORE
from envharness.store.wal import MARK_SUFFIX, read_mark
from envharness.store.walscan import WAL_SUFFIX, scan_wal

from ._support import count_rows, new_session, plain, status_row, turn_rows

pytestmark = pytest.mark.anyio

SESSIONS = 3
TURNS = 12
WAL = DATABASE_NAME + WAL_SUFFIX
MARK = DATABASE_NAME + MARK_SUFFIX


def copy_store(source: Path, target: Path, *, mark: bytes | None = None) -> Path:
    """The store's files as a crash leaves them (no ``-shm``: its index is rebuilt on open)."""
    target.mkdir()
    for file in source.iterdir():
        if file.is_file() and not file.name.endswith("-shm"):
            shutil.copyfile(file, target / file.name)
    if mark is not None:
        (target / MARK).write_bytes(mark)
    return target


async def written(
    path: Path, copies: Path, *, last_blob: int = 0
) -> tuple[list[SessionChain], dict[str, Path], int]:
    """Sessions written with every commit kept in the log; returns the chains, copies of the
    store taken before (``"before"``) and after (``"after"``) a last commit of one more turn
    with a ``last_blob``-byte state, and the records acknowledged before that last commit."""
    chains: list[SessionChain] = []
    copy: dict[str, Path] = {}
    acknowledged = 0
    async with open_store(path) as store:
        with plain(path) as pin:
            pin.execute("BEGIN")  # a read transaction pins the log: nothing is checkpointed
            pin.execute("SELECT count(*) FROM sessions").fetchall()
            for index in range(SESSIONS):
                chain, created = new_session(f"ses_{index}")
                await store.append([created, status_row(chain, "running")])
                chains.append(chain)
            for turn in range(1, TURNS + 1):
                for chain in chains:
                    rows, blobs = turn_rows(chain, turn)
                    await store.append(rows, blobs)
            acknowledged = sum(chain.next_seq for chain in chains)
            copy["before"] = copy_store(path, copies / "before")
            rows, _ = turn_rows(chains[0], TURNS + 1)
            state = os.urandom(last_blob)
            await store.append(rows, {hashlib.sha256(state).hexdigest(): state})
            copy["after"] = copy_store(path, copies / "after")
            pin.execute("COMMIT")
    return chains, copy, acknowledged


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_flipped_byte_in_the_log_is_found_not_silently_dropped(tmp_path: Path) -> None:
    _, copy, acknowledged = await written(tmp_path / "store", tmp_path)
    damaged = copy["after"]
    wal = damaged / WAL
    data = bytearray(wal.read_bytes())
    data[len(data) // 4] ^= 0x01
    wal.write_bytes(bytes(data))
    before = digest(wal)

    with pytest.raises(WalDamageError) as raised:
        async with open_store(damaged, create=False):
            pass
    message = str(raised.value)
    assert f"{WAL}) is damaged at frame" in message
    assert "complete commits written after it" in message
    assert "ses_0 seq" in message  # which sessions lost what
    assert "ses_2 seq" in message
    assert "Nothing was changed" in message
    assert "backup" in message
    assert isinstance(raised.value, DamagedStoreError)
    assert digest(wal) == before  # the damaged frames are kept for whoever recovers them

    with pytest.raises(WalDamageError):
        await read_store(damaged)  # reads do not show the shortened store as if it were whole
    report = await (await read_store(damaged, damaged=True)).verify()
    store_level = [found.problem for found in report.breaks if found.session_id == STORE]
    assert any("write-ahead log" in problem for problem in store_level)
    assert any("acknowledged records missing" in problem for problem in store_level)
    assert {found.session_id for found in report.breaks} >= {"ses_0", "ses_1", "ses_2"}
    assert digest(wal) == before
    # What verify read is what SQLite's recovery keeps: fewer records than were acknowledged.
    assert report.records < acknowledged


async def test_a_log_cut_in_half_is_found_by_the_acknowledged_mark(tmp_path: Path) -> None:
    _, copy, _ = await written(tmp_path / "store", tmp_path)
    cut = copy["after"]
    wal = cut / WAL
    wal.write_bytes(wal.read_bytes()[: wal.stat().st_size // 2])
    with pytest.raises(WalDamageError) as raised:
        async with open_store(cut, create=False):
            pass
    message = str(raised.value)
    assert "acknowledged records missing" in message
    assert "ses_0 seq" in message
    assert f"delete {MARK}" in message  # how to go on with what survives, knowingly


async def test_a_damaged_log_header_is_found(tmp_path: Path) -> None:
    _, copy, _ = await written(tmp_path / "store", tmp_path)
    wal = copy["after"] / WAL
    data = bytearray(wal.read_bytes())
    data[12] ^= 0x01  # the checkpoint sequence: SQLite then ignores the whole log
    wal.write_bytes(bytes(data))
    with pytest.raises(WalDamageError, match=r"the header of its write-ahead log .* is damaged"):
        await read_store(copy["after"])


async def test_a_torn_unacknowledged_commit_is_not_damage(tmp_path: Path) -> None:
    """A crash in the middle of the last commit, before it was acknowledged: its frames are
    partly written, and the mark (updated only after a commit) does not count it."""
    chains, copy, acknowledged = await written(tmp_path / "store", tmp_path, last_blob=60_000)
    earlier = await anyio.to_thread.run_sync(scan_wal, copy["before"] / DATABASE_NAME)
    whole = await anyio.to_thread.run_sync(scan_wal, copy["after"] / DATABASE_NAME)
    assert earlier is not None
    assert whole is not None
    first, last = earlier.kept, whole.kept  # the last commit is frames first+1 .. last
    assert last - first >= 4
    frame = whole.page_size + 24
    unacknowledged = (copy["before"] / MARK).read_bytes()

    def tear(target: Path, mark: bytes) -> Path:
        """Power lost before the commit's sync: its commit frame reached the disk, one of its
        earlier frames did not."""
        torn = copy_store(copy["after"], target, mark=mark)
        data = bytearray((torn / WAL).read_bytes())
        at = 32 + (first + 1) * frame + 24
        data[at : at + 512] = bytes(512)
        (torn / WAL).write_bytes(bytes(data))
        return torn

    # Killed while writing it: the log ends in the middle of its frames.
    cut = copy_store(copy["after"], tmp_path / "cut", mark=unacknowledged)
    (cut / WAL).write_bytes((cut / WAL).read_bytes()[: 32 + (first + 2) * frame + 100])
    for store in (cut, tear(tmp_path / "torn", unacknowledged)):
        async with open_store(store, create=False) as opened:
            assert (await opened.session("ses_0")).records == chains[0].next_seq - 3
            assert (await opened.verify()).ok
        assert count_rows(store) == acknowledged

    # The same torn frames, with the mark that counted the commit: it was acknowledged.
    counted = tear(tmp_path / "counted", (copy["after"] / MARK).read_bytes())
    with pytest.raises(WalDamageError, match="ses_0 seq"):
        await read_store(counted)


async def test_verify_finds_a_damaged_log_in_a_store_that_is_open(tmp_path: Path) -> None:
    """A store open elsewhere is not scanned on open (its log is not recovered then: SQLite
    drops nothing); verify scans it whoever has it open."""
    path = tmp_path / "store"
    async with open_store(path) as store:
        with plain(path) as pin:
            pin.execute("BEGIN")
            pin.execute("SELECT count(*) FROM sessions").fetchall()
            chain, created = new_session("ses_open")
            await store.append([created, status_row(chain, "running")])
            for turn in range(1, 8):
                rows, blobs = turn_rows(chain, turn)
                await store.append(rows, blobs)
            assert (await store.verify()).ok
            wal = path / WAL
            data = bytearray(wal.read_bytes())
            data[len(data) // 3] ^= 0x01
            wal.write_bytes(bytes(data))
            await read_store(path)  # opened by others: nothing is recovered, nothing dropped
            found = [b for b in (await store.verify()).breaks if b.session_id == STORE]
            pin.execute("COMMIT")
    assert len(found) == 1
    assert f"{WAL}) is damaged at frame" in found[0].problem


async def test_the_mark_names_the_latest_chains_and_positions(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, created = new_session("ses_marked")
        await store.append([created, status_row(chain, "running")])
        rows, blobs = turn_rows(chain, 1)
        await store.append(rows, blobs)
    mark = read_mark(store_path / DATABASE_NAME)
    assert mark is not None
    assert mark.position == count_rows(store_path)
    assert mark.chains[0] == ("ses_marked", chain.next_seq - 1)
    assert (store_path / MARK).stat().st_mode & 0o777 == 0o600


async def test_a_store_whose_records_were_deleted_by_hand_still_opens(store_path: Path) -> None:
    """Records deleted behind an index that still holds their head are verify's to report
    (tests/store/test_verify.py), not a loss of the log."""
    async with open_store(store_path) as store:
        chain, created = new_session("ses_tampered")
        await store.append([created, status_row(chain, "running")])
    with plain(store_path) as connection:
        connection.execute("DROP TRIGGER records_are_append_only_delete")
        connection.execute("DELETE FROM records WHERE seq = 1")
    async with open_store(store_path, create=False) as store:
        report = await store.verify()
    assert [found.session_id for found in report.breaks] == ["ses_tampered"]
