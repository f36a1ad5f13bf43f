"""A damaged store is named as damaged: bytes flipped in copies of a real store are found by
``verify`` (as the break of the record they hit, or of the file as a whole) or refused at open
with the recovery advice — never silent, never a traceback. The full sweep (hundreds of flips,
the WAL, kill -9, disk full) is ``tools/faults.py``; this is its fast subset."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.errors import DamagedStoreError, StoreVersionError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.store import SCHEMA_VERSION, RecordFilter, VerifyReport, open_store, read_store
from envharness.store.database import DATABASE_NAME
from envharness.store.verify import STORE

from ._support import plain

pytestmark = pytest.mark.anyio

SESSIONS = 3
TURNS = 12
FLIPS = 20
INDEX_LEAF = 0x0A
TABLE_LEAF = 0x0D

Edit = Callable[[bytearray], None]
Readback = list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store of a few two-participant sessions, checkpointed: every byte of the evidence
    is in the main database file."""
    store = tmp_path_factory.mktemp("damage") / "store"
    harness = EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"alice": SyntheticAgent, "bob": SyntheticAgent},
    )
    for index in range(SESSIONS):
        scenario = Scenario(id=f"s{index}", input=SyntheticScenarioInput(starting_total=index))
        assert harness.run(scenario, turns=TURNS).status == "completed"
    assert not (store / f"{DATABASE_NAME}-wal").exists()
    return store


@pytest.fixture(scope="module")
def baseline(master: Path) -> Readback:
    return anyio.run(readback, master)


@pytest.fixture
def damaged(master: Path, tmp_path: Path) -> Callable[[Edit], Path]:
    """A copy of the master store with ``edit`` applied to its database file's bytes."""
    made = 0

    def make(edit: Edit) -> Path:
        nonlocal made
        made += 1
        store = tmp_path / f"store{made}"
        shutil.copytree(master, store)
        data = bytearray((store / DATABASE_NAME).read_bytes())
        edit(data)
        (store / DATABASE_NAME).write_bytes(bytes(data))
        return store

    return make


async def readback(store: Path) -> Readback:
    """What the reads a user relies on answer: each session, its records, and its records of
    one kind (the filter that goes through the records-by-kind index)."""
    reader = await read_store(store)
    answers = []
    for info in await reader.sessions():
        every = tuple([row.digest async for row in reader.rows(info.id)])
        executed = RecordFilter(kinds=("action.executed",))
        some = tuple([row.digest async for row in reader.rows(info.id, executed)])
        answers.append((info.id, info.status, every, some))
    return answers


async def verify(store: Path, *, full: bool = False) -> VerifyReport:
    return await (await read_store(store)).verify(full=full)


def pages(data: bytearray) -> list[tuple[int, bytes]]:
    size = int.from_bytes(data[16:18], "big")
    return [(start, bytes(data[start : start + size])) for start in range(0, len(data), size)]


def offset_in_page(data: bytearray, page_type: int, needle: bytes, also: bytes = b"") -> int:
    """The file offset of ``needle`` in a live cell (one that also holds ``also``) of the
    first b-tree page of this type that has one; a page's free space keeps stale bytes that
    nothing reads."""
    for start, page in pages(data):
        header = 100 if start == 0 else 0
        if page[header] != page_type or not any(page[header + 3 : header + 5]):
            continue
        cells = int.from_bytes(page[header + 3 : header + 5], "big")
        pointers = [header + 8 + 2 * cell for cell in range(cells)]
        begins = sorted(int.from_bytes(page[at : at + 2], "big") for at in pointers)
        for begin, end in zip(begins, [*begins[1:], len(page)], strict=True):
            found = page.find(needle, begin, end)
            if found >= 0 and also in page[begin:end]:
                return start + found
    raise AssertionError(f"no page of type {page_type:#x} holds {needle!r} in a cell")


# -- item 3: index damage ---------------------------------------------------------------------


async def test_a_damaged_records_by_kind_entry_is_named_by_session_and_seq(
    damaged: Callable[[Edit], Path], baseline: Readback
) -> None:
    def edit(data: bytearray) -> None:
        # "action.executed" -> "action.uxecuted" in one entry of the records-by-kind index.
        data[offset_in_page(data, INDEX_LEAF, b"action.executed") + len("action.")] = ord("u")

    store = damaged(edit)
    # The danger: reads filtered by kind now miss a record, and SQLite's quick_check is
    # satisfied (it does not compare indexes with their tables).
    assert await readback(store) != baseline

    report = await verify(store)

    [found] = report.breaks
    assert found.session_id.startswith("ses_")
    assert isinstance(found.seq, int)
    assert "records-by-kind index disagrees with the records" in found.problem
    assert f"seq {found.seq} (action.executed)" in found.problem
    assert "REINDEX records" in found.problem
    assert report.sessions == SESSIONS


async def test_full_verify_adds_sqlites_integrity_check_as_store_level_breaks(
    damaged: Callable[[Edit], Path],
) -> None:
    def edit(data: bytearray) -> None:
        data[offset_in_page(data, INDEX_LEAF, b"action.executed") + len("action.")] = ord("u")

    store = damaged(edit)

    quick, full = await verify(store), await verify(store, full=True)

    assert all(found.session_id != STORE for found in quick.breaks)
    store_level = [found for found in full.breaks if found.session_id == STORE]
    assert store_level
    assert all(found.seq is None for found in store_level)
    assert any("integrity_check found" in found.problem for found in store_level)


async def test_quick_check_findings_are_store_level_breaks(
    damaged: Callable[[Edit], Path],
) -> None:
    def edit(data: bytearray) -> None:
        # A records page's count of fragmented free bytes (page header byte 7): nothing reads
        # it, SQLite's quick_check recounts it.
        cell = offset_in_page(data, TABLE_LEAF, b"action.executed")
        data[cell - cell % len(pages(data)[1][1]) + 7] += 9

    report = await verify(damaged(edit))

    [found] = report.breaks
    assert (found.session_id, found.seq) == (STORE, None)
    assert "SQLite's quick_check found: Fragmentation of" in found.problem


async def test_a_clean_store_has_no_store_level_break_even_with_full(master: Path) -> None:
    report = await verify(master, full=True)
    assert (report.ok, report.sessions) == (True, SESSIONS)


# -- item 4: reported, never aborted ----------------------------------------------------------


async def test_text_that_is_not_utf8_is_that_records_break_and_the_rest_is_checked(
    damaged: Callable[[Edit], Path], baseline: Readback
) -> None:
    session_id, _, digests, _ = baseline[1]
    seq = 5  # its digest is stored twice: seq 5's digest column, seq 6's prev column

    def edit(data: bytearray) -> None:
        data[offset_in_page(data, TABLE_LEAF, digests[seq].encode()) + 10] = 0xFF

    report = await verify(damaged(edit))

    assert report.sessions == SESSIONS
    assert report.records == sum(len(every) for _, _, every, _ in baseline)
    named = [found for found in report.breaks if "not UTF-8" in found.problem]
    assert named
    assert {found.session_id for found in report.breaks} == {session_id}
    assert {found.seq for found in named} <= {seq, seq + 1}
    assert re.search(r"(digest|prev) column holds text that is not UTF-8 \(b'", named[0].problem)


async def test_a_session_id_that_is_not_utf8_is_reported_with_its_seq(
    damaged: Callable[[Edit], Path], baseline: Readback
) -> None:
    session_id = baseline[0][0]

    def edit(data: bytearray) -> None:
        data[offset_in_page(data, TABLE_LEAF, session_id.encode(), also=b'"kind":') + 6] = 0xFE

    report = await verify(damaged(edit))

    assert not report.ok
    assert any("session_id column holds text that is not UTF-8" in f.problem for f in report.breaks)
    assert report.sessions >= SESSIONS


async def test_damaged_schema_text_is_a_damaged_store_error_not_a_traceback(
    damaged: Callable[[Edit], Path],
) -> None:
    def edit(data: bytearray) -> None:
        where = bytes(data).index(b"CREATE TABLE snapshot_trajectories")
        data[where + bytes(data)[where:].index(b"position") + 2] = 0xFF

    store = damaged(edit)

    for opening in (read_store, _open_for_writing):
        with pytest.raises(DamagedStoreError) as raised:
            await opening(store)
        message = str(raised.value)
        assert f"{str(store / DATABASE_NAME)!r} is damaged" in message
        assert "backup" in message
        assert "envharness verify" in message


async def _open_for_writing(store: Path) -> None:
    async with open_store(store, create=False):
        pass


@pytest.mark.parametrize(
    ("offset", "value", "says"),
    [
        (18, 0xFD, "file format write version (byte 18) holds 253"),
        (19, 0xFD, "file format read version (byte 19) holds 253"),
        (16, 0x0F, "page size field holds"),
        (0, ord("s"), "magic string"),
        (56, 0x02, "text encoding"),
        (20, 0x20, "reserves 32 bytes at the end of every page"),
    ],
)
async def test_a_damaged_header_field_is_named_as_damage(
    damaged: Callable[[Edit], Path], offset: int, value: int, says: str
) -> None:
    def edit(data: bytearray) -> None:
        data[offset] = value

    store = damaged(edit)

    with pytest.raises(DamagedStoreError, match=re.escape(says)):
        await _open_for_writing(store)
    with pytest.raises(DamagedStoreError, match=re.escape(says)):
        await read_store(store)


async def test_a_damaged_schema_version_is_not_taken_for_a_newer_store(
    damaged: Callable[[Edit], Path],
) -> None:
    def edit(data: bytearray) -> None:
        data[63] ^= 0xFF  # user_version 9 -> 246

    with pytest.raises(DamagedStoreError, match="the version number itself is damaged"):
        await read_store(damaged(edit))


async def test_a_schema_version_below_the_tables_it_holds_is_damage_not_a_migration(
    damaged: Callable[[Edit], Path],
) -> None:
    def edit(data: bytearray) -> None:
        data[60:64] = (2).to_bytes(4, "big")

    with pytest.raises(
        DamagedStoreError, match=f"records schema version 2, but the file holds the tables of "
        f"version {SCHEMA_VERSION}",
    ):  # fmt: skip
        await _open_for_writing(damaged(edit))


async def test_a_genuinely_newer_store_is_still_a_version_error(
    damaged: Callable[[Edit], Path],
) -> None:
    store = damaged(lambda data: None)
    with plain(store) as connection:
        connection.execute("CREATE TABLE from_the_future (x)")
        connection.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")

    with pytest.raises(StoreVersionError, match="upgrade envharness"):
        await read_store(store)


# -- the fast subset of tools/faults.py -------------------------------------------------------


async def test_flipped_bytes_are_detected_or_harmless(
    damaged: Callable[[Edit], Path], master: Path, baseline: Readback
) -> None:
    size = (master / DATABASE_NAME).stat().st_size
    outcomes: dict[str, int] = {}
    for flip in range(FLIPS):
        offset = flip * size // FLIPS + 1237 * flip % (size // FLIPS)

        def edit(data: bytearray, offset: int = offset) -> None:
            data[offset] ^= 0xFF

        store = damaged(edit)
        try:
            report = await verify(store)
        except DamagedStoreError:  # any other error (or exception) fails the test
            outcome = "refused as damaged"
        else:
            if not report.ok:
                outcome = "detected"
            else:
                assert await readback(store) == baseline, f"silent damage at offset {offset}"
                outcome = "harmless"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("detected", 0) + outcomes.get("refused as damaged", 0) >= FLIPS // 4


def test_the_fault_harness_runs_and_passes() -> None:
    """``tools/faults.py``, in small: a few flips, counted, exit 0."""
    tool = Path(__file__).resolve().parents[2] / "tools" / "faults.py"
    done = subprocess.run(
        [sys.executable, str(tool), "--only", "flips", "--flips", "6"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    header, row = done.stdout.splitlines()[:2]
    assert header.split()[:3] == ["fault", "injected", "acked"]
    assert row.startswith("main-file byte flips")
    assert row.split()[3] == "6"
    assert done.stdout.splitlines()[-1].startswith("PASS")
