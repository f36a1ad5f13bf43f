"""``envharness copy-store SRC DST``: a quickstart store to PostgreSQL and back, byte for byte,
against a real server, its snapshot and dataset commands saying the same on all three; and
every input it refuses — a destination with evidence, a snapshot or other files, a missing
source, an altered source record, a wrong password (never shown), the ``postgres``
extra missing, and SRC the same store as DST — with exit status 2 and nothing changed."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from envharness.cli.copy_store import LEFT_BEHIND
from envharness.records import RecordRow
from envharness.store import open_store
from envharness.store.locate import reading_store
from envharness.store.postgres.driver import INSTALL
from envharness.store.snapshots import SNAPSHOT_PREFIX, SnapshotStore, content_address
from tests import _engines
from tests.cli._support import Invoke
from tests.store._support import plain
from tests.store.postgres._support import password_role_on

Evidence = dict[str, list[RecordRow]]


@pytest.fixture
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """An empty database per test: a copy needs an empty destination."""
    with _engines.fresh_database(postgres_server, "clicopy") as url:
        yield url


def evidence(location: str | Path) -> Evidence:
    """Every chain's stored rows, read through the store's own readers."""

    async def read() -> Evidence:
        async with reading_store(location) as store:
            chains = [info.id for info in await store.sessions()]
            chains += [info.id for info in await store.experiments()]
            chains += [info.id for info in await store.optimizer_runs()]
            return {chain: [row async for row in store.rows(chain)] for chain in sorted(chains)}

    return anyio.run(read)


def snapshots_and_datasets(invoke: Invoke, store: str | Path) -> list[bytes]:
    """What the snapshot and dataset commands print of ``store``: the listings, each snapshot
    exported (checked whole first), each dataset's rows."""
    listed = invoke("--store", store, "snapshot", "list")
    datasets = invoke("--store", store, "dataset", "list")
    said = [listed, datasets]
    snapshot_ids = [line.split()[0] for line in listed.stdout.splitlines()]
    for snapshot_id in snapshot_ids:
        said.append(invoke("--store", store, "export", "snapshot", snapshot_id))
    names = [line.split("  ")[0] for line in datasets.stdout.splitlines()]
    said += [invoke("--store", store, "dataset", "export", name) for name in names]
    for result in said:
        assert result.exit_code == 0, result.output
    assert (len(snapshot_ids), len(names)) == (1, 1)  # the quickstart's
    return [result.stdout_bytes for result in said]


def test_a_store_goes_to_postgresql_and_back_byte_for_byte(
    invoke: Invoke, quickstart_master: Path, database: str, tmp_path: Path
) -> None:
    original = evidence(quickstart_master)
    records = sum(len(rows) for rows in original.values())

    there = invoke("copy-store", quickstart_master, database)
    back = invoke("copy-store", database, tmp_path / "back")
    checked = invoke("--store", tmp_path / "back", "verify")

    assert there.exit_code == 0, there.output
    assert there.stdout.startswith(f"{len(original)} chains, {records} records, ")
    assert there.stdout.rstrip().endswith("1 snapshots, 1 datasets copied")
    assert LEFT_BEHIND in there.stderr  # tokens and stop requests stay behind, both ways
    assert back.exit_code == 0, back.output
    assert back.stdout == there.stdout
    assert LEFT_BEHIND in back.stderr
    assert evidence(database) == original
    assert evidence(tmp_path / "back") == original  # every byte, every digest
    assert evidence(quickstart_master) == original  # the source was only read
    assert checked.exit_code == 0, checked.output
    said = [snapshots_and_datasets(invoke, store) for store in (quickstart_master, database)]
    assert said[1] == said[0]  # listings, checks, exports: byte for byte, times of making too
    assert snapshots_and_datasets(invoke, tmp_path / "back") == said[0]


def test_a_destination_database_with_evidence_is_refused_unchanged(
    invoke: Invoke, quickstart_master: Path, database: str
) -> None:
    assert invoke("copy-store", quickstart_master, database).exit_code == 0
    before = evidence(database)

    again = invoke("copy-store", quickstart_master, database)

    assert again.exit_code == 2
    assert "already holds records, imported sources, 1 snapshots and 1 datasets" in again.stderr
    assert "nothing was written" in again.stderr
    assert evidence(database) == before


def test_a_destination_directory_with_evidence_or_other_files_is_refused(
    invoke: Invoke, quickstart_master: Path, quickstart_store: Path, tmp_path: Path
) -> None:
    before = evidence(quickstart_store)
    cluttered = tmp_path / "cluttered"
    cluttered.mkdir()
    (cluttered / "notes.txt").write_text("mine")

    into_store = invoke("copy-store", quickstart_master, quickstart_store)
    into_files = invoke("copy-store", quickstart_master, cluttered)

    assert into_store.exit_code == 2
    assert "already holds records" in into_store.stderr
    assert evidence(quickstart_store) == before
    assert into_files.exit_code == 2
    assert "files in it but no store" in into_files.stderr
    assert sorted(path.name for path in cluttered.iterdir()) == ["notes.txt"]


def test_a_destination_with_a_snapshot_but_no_records_is_refused_unchanged(
    invoke: Invoke, quickstart_master: Path, tmp_path: Path
) -> None:
    frozen = tmp_path / "frozen"
    header, members = b"{}", [("ses_elsewhere", b'{"session_id":"ses_elsewhere"}')]
    snapshot_id = content_address(SNAPSHOT_PREFIX, header, [members[0][1]])

    async def freeze_by_hand() -> None:
        async with open_store(frozen) as store:
            await SnapshotStore(store.backend).put_snapshot(snapshot_id, header, members, "now")

    anyio.run(freeze_by_hand)
    listed = invoke("--store", frozen, "snapshot", "list").stdout

    result = invoke("copy-store", quickstart_master, frozen)

    assert result.exit_code == 2
    assert "already holds 1 snapshots and 0 datasets" in result.stderr
    assert "nothing was written" in result.stderr
    assert "remove it" not in result.stderr  # nothing was copied: nothing to clean up
    assert evidence(frozen) == {}
    assert invoke("--store", frozen, "snapshot", "list").stdout == listed


def test_a_source_that_does_not_exist_is_refused_and_nothing_is_created(
    invoke: Invoke, database: str, tmp_path: Path
) -> None:
    missing = invoke("copy-store", tmp_path / "nowhere", tmp_path / "out")
    empty_database = invoke("copy-store", database, tmp_path / "out")

    assert missing.exit_code == 2
    assert "no evidence store at" in missing.stderr
    assert empty_database.exit_code == 2
    assert "holds no envharness store" in empty_database.stderr
    assert not (tmp_path / "nowhere").exists()


def test_an_altered_source_record_stops_the_copy_and_says_what_was_copied(
    invoke: Invoke, quickstart_store: Path, database: str
) -> None:
    session_id = next(chain for chain in evidence(quickstart_store) if chain.startswith("ses_"))
    with plain(quickstart_store) as connection:
        connection.execute("DROP TRIGGER records_are_append_only_update")
        connection.execute(
            "UPDATE records SET participant = 'mallory' WHERE session_id = ? AND seq = 3",
            (session_id,),
        )

    result = invoke("copy-store", quickstart_store, database)

    assert result.exit_code == 2
    assert f"{session_id} seq 3" in result.stderr
    assert "was altered" in result.stderr
    assert "chains whole" in result.stderr
    assert session_id not in evidence(database)
    assert invoke("--store", database, "verify").exit_code == 0  # what was copied holds


def test_a_wrong_password_is_named_by_user_and_database_never_shown(
    invoke: Invoke, quickstart_master: Path, postgres_server: _engines.PostgresServer
) -> None:
    role, _ = password_role_on(postgres_server)
    wrong = f"wrong-{secrets.token_hex(8)}"
    url = f"postgresql://{role}:{wrong}@{postgres_server.host}:{postgres_server.port}/postgres"

    result = invoke("copy-store", quickstart_master, url)

    assert result.exit_code == 2
    assert "password authentication failed" in result.stderr
    assert f"user {role!r}" in result.stderr
    assert wrong not in result.output


def test_without_the_postgres_extra_the_error_names_it(
    invoke: Invoke, quickstart_master: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed

    result = invoke("copy-store", quickstart_master, "postgresql://envh@db.invalid/evidence")

    assert result.exit_code == 2
    assert INSTALL in result.stderr


@pytest.mark.parametrize(
    ("source", "destination"),
    [
        ("{store}", "{store}/../store"),
        (
            "postgresql://envh:hunter2-secret@db.invalid:5432/evidence",
            "postgres://viewer@db.invalid/evidence",
        ),
    ],
)
def test_the_same_store_as_source_and_destination_is_refused(
    invoke: Invoke, quickstart_master: Path, source: str, destination: str
) -> None:
    store = str(quickstart_master)
    before = evidence(quickstart_master)

    result = invoke("copy-store", source.format(store=store), destination.format(store=store))

    assert result.exit_code == 2
    assert "SRC and DST are the same store" in result.stderr
    assert "hunter2" not in result.output
    assert evidence(quickstart_master) == before
