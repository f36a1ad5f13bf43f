"""Verification: a clean store passes; every kind of tampering is named by session and seq."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from envharness.records import Artifact, Outcome, SessionChain, digest_of
from envharness.store import ChainBreak, VerifyReport, open_store
from envharness.store.artifacts import ArtifactFiles
from envharness.store.reader import database_uri, open_reader
from envharness.store.verify import verify_store

from ._support import logs, new_session, plain, status_row, turn_rows

pytestmark = pytest.mark.anyio

TURNS = 4


async def build(store_path: Path) -> tuple[SessionChain, SessionChain, str]:
    """Two sessions; the first has state blobs and an artifact. Returns both and the sha256."""
    async with open_store(store_path) as store:
        first, created = new_session("ses_first")
        await store.append([created, status_row(first, "running")])
        for turn in range(1, TURNS + 1):
            rows, blobs = turn_rows(first, turn)
            await store.append(rows, blobs)
        data = b"an artifact's bytes"
        sha256 = await store.put_artifact(data)
        artifact = first.seal(Artifact(name="notes.txt", sha256=sha256, size=len(data)))
        await store.append([artifact, status_row(first, "completed")])
        second, created = new_session("ses_second")
        rows, blobs = turn_rows(second, 1)
        await store.append([created, *rows], blobs)
    return first, second, sha256


async def verify(store_path: Path) -> VerifyReport:
    async with open_store(store_path, create=False) as store:
        return await store.verify()


def tamper(store_path: Path, *statements: str, parameters: tuple[object, ...] = ()) -> None:
    with plain(store_path) as connection:
        connection.execute("DROP TRIGGER IF EXISTS records_are_append_only_update")
        connection.execute("DROP TRIGGER IF EXISTS records_are_append_only_delete")
        for statement in statements:
            connection.execute(statement, parameters if "?" in statement else ())


def only_break(report: VerifyReport) -> ChainBreak:
    assert not report.ok
    assert len(report.breaks) == 1, report.breaks
    return report.breaks[0]


async def test_a_clean_store_verifies(store_path: Path) -> None:
    first, second, _ = await build(store_path)
    seen: list[str] = []
    async with open_store(store_path, create=False) as store:
        report = await store.verify(on_session=seen.append)
    assert report.ok
    assert report.breaks == ()
    assert report.sessions == 2
    assert report.records == first.next_seq + second.next_seq
    assert sorted(seen) == ["ses_first", "ses_second"]


async def test_an_empty_store_verifies(store_path: Path) -> None:
    async with open_store(store_path) as store:
        report = await store.verify()
    assert (report.ok, report.sessions, report.records) == (True, 0, 0)


async def test_an_edited_payload_is_named_by_session_and_seq(store_path: Path) -> None:
    await build(store_path)
    forged = b'{"kind":"log","level":"info","message":"forged","stream":null}'
    tamper(
        store_path,
        "UPDATE records SET payload = ? WHERE session_id = 'ses_first' AND seq = 3",
        parameters=(forged,),
    )
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", 3)
    assert "digest mismatch" in found.problem


@pytest.mark.parametrize(
    ("column", "value"),
    [("turn", 99), ("participant", "mallory"), ("at", "2000-01-01T00:00:00.000000Z")],
)
async def test_an_edited_envelope_field_is_detected(
    store_path: Path, column: str, value: object
) -> None:
    await build(store_path)
    tamper(
        store_path,
        f"UPDATE records SET {column} = ? WHERE session_id = 'ses_second' AND seq = 1",
        parameters=(value,),
    )
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_second", 1)


async def test_a_rewritten_record_with_a_fresh_digest_breaks_the_next_link(
    store_path: Path,
) -> None:
    await build(store_path)
    with plain(store_path) as connection:
        row = connection.execute(
            "SELECT session_id, seq, kind, turn, participant, at, payload, prev"
            " FROM records WHERE session_id = 'ses_first' AND seq = 5"
        ).fetchone()
    payload = row[6].replace(b"turn", b"TURN")
    digest = digest_of(*row[:6], payload, row[7])
    tamper(
        store_path,
        "UPDATE records SET payload = ?, digest = ? WHERE session_id = 'ses_first' AND seq = 5",
        parameters=(payload, digest),
    )
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", 6)
    assert "prev does not match" in found.problem


async def test_a_deleted_middle_record_is_reported_missing(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "DELETE FROM records WHERE session_id = 'ses_first' AND seq = 4")
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", 4)
    assert "missing" in found.problem
    assert "seq 4" in found.problem


async def test_a_deleted_run_of_records_is_reported_as_a_range(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "DELETE FROM records WHERE session_id = 'ses_first' AND seq IN (4, 5, 6)")
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", 4)
    assert "4..6 missing" in found.problem


async def test_deleted_last_records_are_caught_by_the_session_head(store_path: Path) -> None:
    first, _, _ = await build(store_path)
    last = first.next_seq - 1
    tamper(store_path, f"DELETE FROM records WHERE session_id = 'ses_first' AND seq >= {last - 1}")
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", last - 1)
    assert f"{last - 1}..{last} are missing" in found.problem


async def test_a_session_emptied_of_records_is_caught(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "DELETE FROM records WHERE session_id = 'ses_second'")
    found = only_break(await verify(store_path))
    assert found.session_id == "ses_second"
    assert "missing" in found.problem


async def test_a_replaced_last_record_differs_from_the_committed_head(store_path: Path) -> None:
    first, _, _ = await build(store_path)
    last = first.next_seq - 1
    tamper(
        store_path,
        "UPDATE sessions SET head_digest = ? WHERE id = 'ses_first'",
        parameters=("00" * 32,),
    )
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", last)
    assert "committed head" in found.problem


async def test_records_without_an_index_entry_are_reported(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "DELETE FROM sessions WHERE id = 'ses_second'")
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_second", None)


async def test_a_modified_state_blob_is_detected(store_path: Path) -> None:
    await build(store_path)
    with plain(store_path) as connection:
        digest = connection.execute(
            "SELECT digest FROM blobs WHERE data = ?", (b'{"turn":2}',)
        ).fetchone()[0]
    tamper(store_path, "UPDATE blobs SET data = ? WHERE digest = ?", parameters=(b"{}", digest))
    found = only_break(await verify(store_path))
    assert found.session_id == "ses_first"
    assert found.problem == f"state blob {digest} was modified"
    # The outcome of turn 2 cites it: seq 2 (running) + 3 records per turn.
    assert found.seq == 1 + 3 * 2


async def test_a_missing_state_blob_is_detected(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "DELETE FROM blobs WHERE data = ?", parameters=(b'{"turn":1}',))
    report = await verify(store_path)
    # Both sessions' turn 1 left the same state: one blob, two citations.
    assert {(b.session_id, b.seq) for b in report.breaks} == {("ses_first", 4), ("ses_second", 3)}
    assert all("is missing" in b.problem for b in report.breaks)


async def test_a_missing_artifact_file_is_detected(store_path: Path) -> None:
    first, _, sha256 = await build(store_path)
    (store_path / "artifacts" / sha256[:2] / sha256).unlink()
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", first.next_seq - 2)
    assert "missing" in found.problem
    assert sha256 in found.problem


async def test_a_modified_artifact_file_is_detected(store_path: Path) -> None:
    first, _, sha256 = await build(store_path)
    (store_path / "artifacts" / sha256[:2] / sha256).write_bytes(b"something else")
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", first.next_seq - 2)
    assert "modified" in found.problem


async def test_a_payload_that_no_longer_decodes_is_reported(store_path: Path) -> None:
    await build(store_path)
    with plain(store_path) as connection:
        row = connection.execute(
            "SELECT session_id, seq, kind, turn, participant, at, prev"
            " FROM records WHERE session_id = 'ses_second' AND seq = 1"
        ).fetchone()
    payload = b'{"kind":"log"}'
    digest = digest_of(*row[:6], payload, row[6])
    # A forger who re-digests everything after the edit keeps the chain intact, but the
    # payload itself is still checked.
    tamper(
        store_path,
        "UPDATE records SET payload = ?, digest = ? WHERE session_id = 'ses_second' AND seq = 1",
        parameters=(payload, digest),
    )
    report = await verify(store_path)
    assert ChainBreak("ses_second", 1, report.breaks[0].problem) in report.breaks
    assert "does not decode" in report.breaks[0].problem


async def test_verify_runs_while_the_journal_is_writing(store_path: Path) -> None:
    async with open_store(store_path) as store:
        chain, created = new_session()
        await store.append([created])
        for turn in range(1, 4):
            rows, blobs = turn_rows(chain, turn)
            await store.append(rows, blobs)
            report = await store.verify()
            assert report.ok
            assert report.records == chain.next_seq


def test_tamper_needs_the_triggers_dropped(store_path: Path) -> None:
    """Guard for the tests above: without dropping them, the triggers refuse edits."""
    anyio.run(build, store_path)
    with plain(store_path) as connection, pytest.raises(sqlite3.IntegrityError):
        connection.execute("DELETE FROM records WHERE seq = 0")


# -- verify while sessions are being written ---------------------------------------------------


class _HookedConnection(sqlite3.Connection):
    """Runs ``hook`` (once) right after the first SELECT starts: a write lands mid-verify."""

    hook: Callable[[], None] | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor = super().execute(sql, parameters)
        if self.hook is not None and sql.lstrip().upper().startswith("SELECT"):
            hook, self.hook = self.hook, None
            hook()
        return cursor


async def test_writes_landing_mid_verify_are_not_breaks(store_path: Path) -> None:
    async with open_store(store_path) as store:
        existing, created = new_session("ses_b_existing")
        rows, blobs = turn_rows(existing, 1)
        await store.append([created, *rows], blobs)
        before = existing.next_seq

        async def write_meanwhile() -> None:
            # A session that sorts first, committed after verify read the index...
            fresh, fresh_created = new_session("ses_a_fresh")
            await store.append([fresh_created, *logs(fresh, 3)])
            # ...and more records for a session whose head verify already read.
            more, more_blobs = turn_rows(existing, 2)
            await store.append(more, more_blobs)

        def verify_with_a_write_in_between() -> VerifyReport:
            connection = sqlite3.connect(
                database_uri(store_path),
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                factory=_HookedConnection,
            )
            connection.hook = lambda: anyio.from_thread.run(write_meanwhile)
            try:
                return verify_store(connection, store.artifacts)
            finally:
                connection.close()

        report = await anyio.to_thread.run_sync(verify_with_a_write_in_between)
        # Exactly what was committed when verify began, and no false alarm about the rest.
        assert report.breaks == ()
        assert (report.sessions, report.records) == (1, before)
        again = await store.verify()
        assert again.breaks == ()
        assert (again.sessions, again.records) == (2, 4 + existing.next_seq)


async def test_verify_repeatedly_while_sessions_are_written_finds_nothing(
    store_path: Path,
) -> None:
    async with open_store(store_path) as store:
        done = anyio.Event()
        written = 0
        reports: list[VerifyReport] = []

        async def writer() -> None:
            """Writes until three passes of verify have run beside it (and 20 sessions at
            least): what the test needs, however fast either side is on this machine."""
            nonlocal written
            try:
                while written < 20 or len(reports) < 3:
                    chain, created = new_session()
                    await store.append([created])
                    for turn in range(1, 3):
                        rows, blobs = turn_rows(chain, turn)
                        await store.append(rows, blobs)
                    written += 1
            finally:
                done.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(writer)
                while not done.is_set():
                    reports.append(await store.verify())
        reports.append(await store.verify())
    assert [b for report in reports for b in report.breaks] == []
    assert len(reports) > 3
    assert reports[-1].sessions == written >= 20


# -- values of the wrong type are reported, never raised ---------------------------------------


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (
            "UPDATE records SET payload = CAST(payload AS TEXT)"
            " WHERE session_id = 'ses_second' AND seq = 1",
            {("ses_second", 1, "payload column holds text, not bytes")},
        ),
        (
            "UPDATE records SET seq = 'x' WHERE session_id = 'ses_second' AND seq = 1",
            {
                ("ses_second", 1, "record(s) seq 1 missing before seq 2"),
                ("ses_second", None, "seq column holds text 'x', not an integer"),
            },
        ),
        (
            "UPDATE records SET turn = 'x' WHERE session_id = 'ses_second' AND seq = 2",
            {("ses_second", 2, "turn column holds text 'x', not an integer")},
        ),
        (
            "UPDATE records SET at = CAST(at AS BLOB) WHERE session_id = 'ses_second' AND seq = 2",
            {("ses_second", 2, "at column holds bytes, not text")},
        ),
        (
            "UPDATE records SET prev = x'00' WHERE session_id = 'ses_second' AND seq = 2",
            {("ses_second", 2, "prev column holds bytes, not text")},
        ),
        (
            "UPDATE sessions SET head_seq = 'x' WHERE id = 'ses_first'",
            {("ses_first", None, "the session index's head_seq holds text 'x', not an integer")},
        ),
        (
            "UPDATE sessions SET head_digest = x'00' WHERE id = 'ses_first'",
            {("ses_first", None, "the session index's head_digest holds bytes, not text")},
        ),
    ],
    ids=["payload-text", "seq-text", "turn-text", "at-blob", "prev-blob", "head-seq", "head-dg"],
)
async def test_a_value_of_the_wrong_type_is_a_break_not_a_crash(
    store_path: Path, statement: str, expected: set[tuple[str, int | None, str]]
) -> None:
    await build(store_path)
    tamper(store_path, statement)
    report = await verify(store_path)
    assert {(b.session_id, b.seq, b.problem) for b in report.breaks} == expected


async def test_every_payload_turned_to_text_is_reported(store_path: Path) -> None:
    first, second, _ = await build(store_path)
    tamper(store_path, "UPDATE records SET payload = CAST(payload AS TEXT)")
    report = await verify(store_path)
    assert report.records == first.next_seq + second.next_seq
    assert len(report.breaks) == report.records
    assert {b.problem for b in report.breaks} == {"payload column holds text, not bytes"}
    assert {(b.session_id, b.seq) for b in report.breaks} == {
        *(("ses_first", seq) for seq in range(first.next_seq)),
        *(("ses_second", seq) for seq in range(second.next_seq)),
    }


async def test_a_state_blob_turned_to_text_is_reported(store_path: Path) -> None:
    await build(store_path)
    tamper(store_path, "UPDATE blobs SET data = 'abc'")
    report = await verify(store_path)
    # Every outcome cites a blob: one per turn of the first session, one in the second.
    assert len(report.breaks) == TURNS + 1
    assert all(b.problem.endswith(" holds text, not bytes") for b in report.breaks)
    assert all(b.problem.startswith("state blob ") for b in report.breaks)
    assert {b.session_id for b in report.breaks} == {"ses_first", "ses_second"}
    assert all(b.seq is not None for b in report.breaks)


async def test_a_session_id_of_the_wrong_type_is_reported(store_path: Path) -> None:
    await build(store_path)
    # TEXT affinity turns a number into text, but a blob stays a blob.
    tamper(
        store_path,
        "UPDATE records SET session_id = CAST(session_id AS BLOB) WHERE session_id = 'ses_second'",
    )
    report = await verify(store_path)
    problems = {(b.session_id, b.seq, b.problem) for b in report.breaks}
    shown = str(b"ses_second")
    assert (shown, None, "records exist but the session index has no entry for this session") in (
        problems
    )
    assert (shown, 0, "session_id column holds bytes, not text") in problems
    assert any(b.session_id == "ses_second" and "missing" in b.problem for b in report.breaks)


async def test_records_beyond_the_committed_head_are_reported(store_path: Path) -> None:
    first, _, _ = await build(store_path)
    last = first.next_seq - 1
    with plain(store_path) as connection:
        digest = connection.execute(
            "SELECT digest FROM records WHERE session_id = 'ses_first' AND seq = ?", (last - 2,)
        ).fetchone()[0]
    tamper(
        store_path,
        "UPDATE sessions SET head_seq = ?, head_digest = ? WHERE id = 'ses_first'",
        parameters=(last - 2, digest),
    )
    found = only_break(await verify(store_path))
    assert (found.session_id, found.seq) == ("ses_first", last - 1)
    assert f"records seq {last - 1}..{last} lie beyond the committed head" in found.problem


async def test_each_state_blob_is_read_and_hashed_once(store_path: Path) -> None:
    state = b'{"same":"state"}'
    digest = hashlib.sha256(state).hexdigest()
    async with open_store(store_path) as store:
        for session_id in ("ses_one", "ses_two"):
            chain, created = new_session(session_id)
            outcomes = [chain.seal(Outcome(state=digest), turn=turn) for turn in range(1, 51)]
            await store.append([created, *outcomes], {digest: state})
    blob_reads: list[str] = []
    hashed: list[bytes] = []
    real_sha256 = hashlib.sha256

    def counting_sha256(data: bytes = b"") -> Any:
        hashed.append(data)
        return real_sha256(data)

    def verified() -> Any:  # opening and verifying block: off the event loop, as envharness does
        connection = open_reader(store_path)
        connection.set_trace_callback(
            lambda sql: blob_reads.append(sql) if "FROM blobs" in sql else None
        )
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(hashlib, "sha256", counting_sha256)
                return verify_store(connection, ArtifactFiles(store_path / "artifacts"))
        finally:
            connection.close()

    report = await anyio.to_thread.run_sync(verified)
    assert report.ok, report.breaks
    assert report.records == 102
    assert len(blob_reads) == 1
    assert hashed.count(state) == 1
