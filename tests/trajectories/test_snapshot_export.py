"""The export reads the evidence once, holds the checked lines, and writes exactly the stored
bytes: the same lines as the header, the trajectories and each stored row's envelope."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

import anyio
import pytest

from envharness.records import RecordRow, encode_record
from envharness.store import read_store
from envharness.store.database import DATABASE_NAME
from envharness.trajectories import EvidenceMismatchError, export_snapshot, freeze
from envharness.trajectories import snapshots as snapshots_module
from envharness.trajectories.spool import LineSpool
from tests.trajectories._support import Journal, flip_payload_byte, write


def freeze_journals(store: Path, *journals: Journal) -> str:
    ids = write(store, *journals)

    async def main() -> str:
        return (await freeze(await read_store(store), ids, label="export")).metadata.id

    return anyio.run(main)


def exported(store: Path, snapshot_id: str, into: list[bytes] | None = None) -> list[bytes]:
    lines = [] if into is None else into

    async def main() -> None:
        async for line in export_snapshot(await read_store(store), snapshot_id):
            lines.append(line)

    anyio.run(main)
    return lines


def expected_lines(store: Path, snapshot_id: str) -> list[bytes]:
    """The export composed by hand from the stored columns."""
    with sqlite3.connect(store / DATABASE_NAME) as connection:
        header, created_at = connection.execute(
            "SELECT header, created_at FROM snapshots WHERE id = ?", (snapshot_id,)
        ).fetchone()
        members = connection.execute(
            "SELECT position, session_id, trajectory FROM snapshot_trajectories"
            " WHERE snapshot_id = ? ORDER BY position",
            (snapshot_id,),
        ).fetchall()
        lines = [
            b'{"type":"snapshot","id":"%s","created_at":"%s","content":%s}\n'
            % (snapshot_id.encode(), created_at.encode(), bytes(header))
        ]
        for position, session_id, trajectory in members:
            lines.append(
                b'{"type":"trajectory","position":%d,"trajectory":%s}\n'
                % (position, bytes(trajectory))
            )
            rows = connection.execute(
                "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
                " FROM records WHERE session_id = ? ORDER BY seq",
                (session_id,),
            )
            lines += [
                b'{"type":"record","record":' + encode_record(RecordRow(*row)) + b"}\n"
                for row in rows
            ]
    return lines


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("export")
    return store, freeze_journals(store, Journal().complete(turns=4), Journal().failed())


def test_the_export_is_the_stored_bytes(frozen: tuple[Path, str]) -> None:
    store, snapshot_id = frozen
    assert exported(store, snapshot_id) == expected_lines(store, snapshot_id)


def test_a_spool_larger_than_memory_exports_the_same_bytes(
    frozen: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, snapshot_id = frozen
    small = functools.partial(LineSpool, in_memory=256, batch=100)
    monkeypatch.setattr(snapshots_module, "LineSpool", small)
    assert exported(store, snapshot_id) == expected_lines(store, snapshot_id)


def test_evidence_altered_in_the_last_trajectory_writes_nothing(tmp_path: Path) -> None:
    # The first trajectory's lines are already held when the second one fails its check.
    first, last = Journal().complete(turns=3), Journal().complete(turns=3)
    snapshot_id = freeze_journals(tmp_path, first, last)
    altered = max(first.id, last.id)  # trajectories are ordered by session id
    flip_payload_byte(tmp_path, altered, 6)
    lines: list[bytes] = []
    with pytest.raises(EvidenceMismatchError) as caught:
        exported(tmp_path, snapshot_id, into=lines)
    assert (caught.value.session_id, caught.value.seq) == (altered, 6)
    assert lines == []
