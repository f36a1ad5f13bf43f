"""Snapshots: content-addressed, immutable, verifiable; the export streams checked lines."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import anyio
import msgspec
import pytest

from envharness import ConfigurationError, NotFoundError, StoreError
from envharness.records import digest_of
from envharness.store import read_store
from envharness.store.database import DATABASE_NAME
from envharness.store.snapshots import SnapshotStore
from envharness.trajectories import (
    Entitlement,
    EvidenceMismatchError,
    SchemaVersionError,
    SnapshotMetadata,
    TrajectoryError,
    decode_trajectory,
    export_snapshot,
    load_snapshot,
    verify_snapshot,
)
from envharness.trajectories.snapshots import ExportedRecord
from tests.trajectories._support import (
    MISS,
    REACH,
    Journal,
    flip_payload_byte,
    harness,
    tampering,
    write,
)


def export_lines(store: Path, snapshot_id: str) -> list[bytes]:
    async def main() -> list[bytes]:
        reader = await read_store(store)
        return [line async for line in export_snapshot(reader, snapshot_id)]

    return anyio.run(main)


def test_the_same_content_gets_the_same_id(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    first, second = runner.run(REACH, turns=5), runner.run(MISS, turns=2)
    snapshot = runner.snapshot([first, second])
    again = runner.snapshot([second.id, first.id, first])  # another order, a repeat
    assert snapshot.metadata.id == again.metadata.id
    assert snapshot.metadata.id.startswith("snp_")
    assert again.metadata.created_at == snapshot.metadata.created_at  # found, not re-made
    assert [t.session_id for t in snapshot.trajectories] == sorted([first.id, second.id])
    assert (snapshot.metadata.trajectories, snapshot.metadata.records) == (
        2,
        sum(t.journal.records for t in snapshot.trajectories),
    )
    assert [m.id for m in runner.snapshots()] == [snapshot.metadata.id]
    # Other content, other id: a label, an entitlement, another selection.
    others = {
        runner.snapshot([first], label="x").metadata.id,
        runner.snapshot([first], entitlement="own data").metadata.id,
        runner.snapshot([first]).metadata.id,
    }
    assert len(others | {snapshot.metadata.id}) == 4


def test_a_session_that_goes_on_gets_a_new_snapshot_and_the_old_one_stays(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    parent = runner.run(MISS, turns=2)
    child = runner.branch(runner.checkpoint(parent.id), intervention={"kind": "reset-total"})
    before = runner.snapshot([child])
    runner.continue_(child.id, turns=1)
    after = runner.snapshot([child])
    assert before.metadata.id != after.metadata.id
    assert before.trajectories[0].journal.last_seq < after.trajectories[0].journal.last_seq
    # The old snapshot still exports exactly the range it froze.
    lines = export_lines(tmp_path, before.metadata.id)
    assert len(lines) == 2 + before.metadata.records


def test_snapshots_are_immutable_in_the_database(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)])
    connection = sqlite3.connect(tmp_path / DATABASE_NAME)
    try:
        for statement in (
            "UPDATE snapshots SET created_at = 'x'",
            "DELETE FROM snapshots",
            "UPDATE snapshot_trajectories SET trajectory = x'00'",
            "DELETE FROM snapshot_trajectories",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="immutable"):
                connection.execute(statement)
    finally:
        connection.close()
    assert verify_in(tmp_path, snapshot.metadata.id).id == snapshot.metadata.id


def verify_in(store: Path, snapshot_id: str) -> SnapshotMetadata:
    async def main() -> SnapshotMetadata:
        return await verify_snapshot(await read_store(store), snapshot_id)

    return anyio.run(main)


def test_the_export_is_verifiable_from_the_file_alone(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    sessions = [runner.run(REACH, turns=5), runner.run(MISS, turns=3)]
    snapshot = runner.snapshot(sessions, label="two", entitlement="own data")
    lines = export_lines(tmp_path, snapshot.metadata.id)
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    header = msgspec.json.decode(lines[0])
    assert header["type"] == "snapshot"
    assert header["id"] == snapshot.metadata.id
    assert header["content"]["entitlement"] == {"basis": "own data", "declared_by": ""}

    class Line(msgspec.Struct):
        type: str
        content: msgspec.Raw = msgspec.Raw()
        trajectory: msgspec.Raw = msgspec.Raw()
        record: ExportedRecord | None = None

    decoded = [msgspec.json.decode(line, type=Line) for line in lines]
    # The snapshot id: sha256 of the header bytes, then each trajectory's bytes after a newline.
    hasher = hashlib.sha256(bytes(decoded[0].content))
    trajectories = 0
    for line in decoded[1:]:
        if line.type == "trajectory":
            trajectories += 1
            hasher.update(b"\n" + bytes(line.trajectory))
            trajectory = decode_trajectory(bytes(line.trajectory))
            prev = None
        else:
            record = line.record
            assert record is not None
            assert record.prev == prev
            assert record.digest == digest_of(
                record.session_id, record.seq, record.kind, record.turn, record.participant,
                record.at, bytes(record.payload), record.prev,
            )  # fmt: skip
            prev = record.digest
            if record.seq == trajectory.journal.last_seq:
                assert record.digest == trajectory.journal.head_digest
    assert "snp_" + hasher.hexdigest() == snapshot.metadata.id
    assert trajectories == 2
    assert len(lines) == 1 + 2 + snapshot.metadata.records


def test_one_changed_byte_of_evidence_fails_the_digest_check_naming_the_record(
    tmp_path: Path,
) -> None:
    journal = Journal().complete(turns=3)
    write(tmp_path, journal)
    snapshot = harness(tmp_path).snapshot([journal.id])
    flip_payload_byte(tmp_path, journal.id, 5)
    with pytest.raises(EvidenceMismatchError) as caught:
        export_lines(tmp_path, snapshot.metadata.id)
    assert (caught.value.session_id, caught.value.seq) == (journal.id, 5)
    assert f"trajectory {journal.id}: record seq 5" in str(caught.value)
    assert "altered" in str(caught.value)
    # Nothing was written before the refusal: the whole snapshot is checked first.
    lines: list[str] = []
    with pytest.raises(EvidenceMismatchError):
        lines.extend(harness(tmp_path).sources().export_snapshot(snapshot.metadata.id))
    assert lines == []


def test_altered_evidence_is_not_frozen(tmp_path: Path) -> None:
    # A snapshot of altered records was kept (exit 0) though no reader could ever use it.
    journal = Journal().complete(turns=3)
    write(tmp_path, journal)
    flip_payload_byte(tmp_path, journal.id, 5)
    with pytest.raises(EvidenceMismatchError) as caught:
        harness(tmp_path).snapshot([journal.id], label="after the flip")
    assert (caught.value.session_id, caught.value.seq) == (journal.id, 5)
    assert str(caught.value).startswith(f"nothing was frozen: trajectory {journal.id}")
    with sqlite3.connect(tmp_path / DATABASE_NAME) as connection:
        counts = [
            connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("snapshots", "snapshot_trajectories")
        ]
    assert counts == [0, 0]


def test_a_chain_rewritten_with_fresh_digests_fails_at_the_bound_head(tmp_path: Path) -> None:
    journal = Journal().complete(turns=2)
    write(tmp_path, journal)
    snapshot = harness(tmp_path).snapshot([journal.id])
    # Rewrite every record (another implementation string) and re-seal the whole chain.
    with tampering(tmp_path) as connection:
        rows = connection.execute(
            "SELECT seq, payload FROM records WHERE session_id = ? ORDER BY seq", (journal.id,)
        ).fetchall()
        prev = None
        for seq, payload in rows:
            original = journal.rows[seq]
            changed = payload.replace(b'"p@1"', b'"p@2"')
            digest = digest_of(
                original.session_id, seq, original.kind, original.turn, original.participant,
                original.at, changed, prev,
            )  # fmt: skip
            connection.execute(
                "UPDATE records SET payload = ?, prev = ?, digest = ? WHERE session_id = ?"
                " AND seq = ?",
                (changed, prev, digest, journal.id, seq),
            )
            prev = digest
    with pytest.raises(EvidenceMismatchError) as caught:
        export_lines(tmp_path, snapshot.metadata.id)
    last = journal.rows[-1].seq
    assert caught.value.seq == last
    assert "rewritten" in str(caught.value)


def test_deleted_records_are_named(tmp_path: Path) -> None:
    journal = Journal().complete(turns=2)
    write(tmp_path, journal)
    snapshot = harness(tmp_path).snapshot([journal.id])
    with tampering(tmp_path) as connection:
        connection.execute("DELETE FROM records WHERE session_id = ? AND seq = 3", (journal.id,))
    with pytest.raises(EvidenceMismatchError, match="record seq 3: record seq 3 is missing"):
        export_lines(tmp_path, snapshot.metadata.id)
    with tampering(tmp_path) as connection:
        connection.execute("DELETE FROM records WHERE session_id = ? AND seq > 3", (journal.id,))
    with pytest.raises(EvidenceMismatchError, match="ends before the bound head"):
        export_lines(tmp_path, snapshot.metadata.id)


def test_an_altered_snapshot_no_longer_has_its_id(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)])
    with tampering(tmp_path) as connection:
        (data,) = connection.execute("SELECT trajectory FROM snapshot_trajectories").fetchone()
        connection.execute(
            "UPDATE snapshot_trajectories SET trajectory = ?",
            (data.replace(b'"passed":true', b'"passed":false'),),
        )
    with pytest.raises(EvidenceMismatchError, match="no longer has its id"):
        export_lines(tmp_path, snapshot.metadata.id)


def test_an_unknown_schema_version_is_refused_on_read(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)])
    stored = msgspec.json.encode(snapshot.trajectories[0])
    newer = stored.replace(b'"schema_version":1', b'"schema_version":2')
    with pytest.raises(SchemaVersionError, match=r"schema version 2.*upgrade envharness"):
        decode_trajectory(newer)
    with pytest.raises(SchemaVersionError, match=r"schema version 0.*re-create"):
        decode_trajectory(stored.replace(b'"schema_version":1', b'"schema_version":0'))
    with pytest.raises(TrajectoryError, match="not valid trajectory JSON"):
        decode_trajectory(b"{nope")
    with pytest.raises(TrajectoryError, match="does not match the trajectory schema"):
        decode_trajectory(b'{"schema_version":1,"session_id":3}')
    with tampering(tmp_path) as connection:
        connection.execute(
            "UPDATE snapshots SET header = replace(header, '\"schema_version\":1',"
            " '\"schema_version\":9')"
        )

    async def load() -> object:
        return await load_snapshot(await read_store(tmp_path), snapshot.metadata.id)

    with pytest.raises(SchemaVersionError, match=rf"snapshot {snapshot.metadata.id}.*version 9"):
        anyio.run(load)


def test_bad_snapshot_requests_are_named(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    session = runner.run(REACH, turns=5)
    with pytest.raises(ConfigurationError, match="not a snapshot id"):
        export_lines(tmp_path, session.id)
    with pytest.raises(NotFoundError, match="no snapshot 'snp_0000'"):
        export_lines(tmp_path, "snp_0000")
    with pytest.raises(NotFoundError, match="no session 'ses_nope'"):
        runner.snapshot(["ses_nope"])
    with pytest.raises(ConfigurationError, match="at least one session"):
        runner.snapshot([])
    with pytest.raises(ConfigurationError, match="label"):
        runner.snapshot([session], label="bad\nlabel")
    forged = SnapshotStore(tmp_path).put_snapshot
    with pytest.raises(StoreError, match="not the sha256 of its content"):
        anyio.run(lambda: forged("snp_forged", b"{}", [], "2026-01-01"))


@pytest.mark.parametrize(
    ("entitlement", "expected"),
    [
        ("", "must say, in printable text, why"),
        (" ", "must say, in printable text, why"),
        ("own\x1b[31m data", "must say, in printable text, why"),
        (Entitlement(basis="own data", declared_by="me\n"), "declared_by 'me.* must be printable"),
        ("x" * 1001, "at most 1000 characters"),
    ],
)
def test_a_training_entitlement_must_say_why(
    tmp_path: Path, entitlement: Entitlement | str, expected: str
) -> None:
    # The command line and the API refused a blank basis; the Python API declared training
    # rights with no reason at all.
    session = harness(tmp_path).run(REACH, turns=5)
    with pytest.raises(ConfigurationError, match=expected):
        session.snapshot(entitlement=entitlement)


def test_session_snapshot_freezes_one_session(tmp_path: Path) -> None:
    session = harness(tmp_path).run(REACH, turns=5)
    snapshot = session.snapshot(entitlement=Entitlement(basis="own data", declared_by="me"))
    assert [t.session_id for t in snapshot.trajectories] == [session.id]
    assert snapshot.metadata.entitlement == Entitlement(basis="own data", declared_by="me")
    assert snapshot.trajectories[0] == session.trajectory()


@pytest.mark.anyio
async def test_sources_stream_the_export_on_both_backends(tmp_path: Path) -> None:
    from tests.trajectories._support import async_harness

    runner = async_harness(tmp_path)
    session = await runner.run(REACH, turns=5)
    snapshot = await runner.snapshot([session.id])
    lines = [line async for line in runner.sources().export_snapshot(snapshot.metadata.id)]
    assert msgspec.json.decode(lines[0])["id"] == snapshot.metadata.id
    assert len(lines) == 2 + snapshot.metadata.records
    with pytest.raises(ConfigurationError, match="list of session ids"):
        await runner.snapshot(session.id)


def test_the_blocking_stream_can_stop_early_and_runs_in_an_open_harness(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    snapshot = runner.snapshot([runner.run(REACH, turns=5)])
    lines = runner.sources().export_snapshot(snapshot.metadata.id)
    first = next(lines)
    lines.close()  # stops the producer in the portal; nothing hangs or leaks
    assert msgspec.json.decode(first)["id"] == snapshot.metadata.id
    with harness(tmp_path) as open_runner:
        streamed = list(open_runner.sources().export_snapshot(snapshot.metadata.id))
        assert len(streamed) == 2 + snapshot.metadata.records
        rows = open_runner.sources().export_snapshot(snapshot.metadata.id)
        for _ in rows:
            break
        rows.close()
        assert (
            open_runner.trajectory(snapshot.trajectories[0].session_id)
            == (snapshot.trajectories[0])
        )
