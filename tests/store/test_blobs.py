"""State blobs kept compressed: the digest names the uncompressed bytes, every reader gets them
back, damage is named (never a zlib traceback), and a store of schema 9 migrates and verifies."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import msgspec
import pytest

from envharness.errors import StoreError
from envharness.records import Outcome, SessionChain
from envharness.store import blobs, database, open_store
from envharness.store.blobs import RAW, SMALLEST_PACKED, ZLIB, BlobDamage, pack, unpack
from envharness.store.database import SCHEMA_VERSION

from ._support import new_session, plain, status_row

pytestmark = pytest.mark.anyio


def replay_state(turns: int) -> bytes:
    """Shaped like a replay adapter's state: it grows by a move and a check each turn."""
    moves = ["north", "south", "east", "west"] * (turns // 4)
    return msgspec.json.encode({"replay": {"checks": "1ec5e337" * turns, "moves": moves}})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the codec -----------------------------------------------------------------------------------


def test_a_repetitive_blob_is_kept_compressed_and_comes_back_whole() -> None:
    data = replay_state(400)
    codec, stored = pack(data)
    assert codec == ZLIB
    assert len(stored) < len(data) // 10
    assert unpack(sha(data), codec, stored) == data


@pytest.mark.parametrize("turns", [8, 12, 40, 400, 4000])
def test_a_small_hash_table_compresses_as_well_as_zlibs_default(turns: int) -> None:
    """The hash table sized to the window keeps every state as small as the default does."""
    data = replay_state(turns)
    codec, stored = pack(data)
    assert codec == ZLIB
    assert len(stored) <= len(zlib.compress(data, blobs.LEVEL))
    assert unpack(sha(data), codec, stored) == data


def test_small_and_incompressible_blobs_are_kept_raw() -> None:
    small = b'{"turn":1}'
    assert len(small) < SMALLEST_PACKED
    assert pack(small) == (RAW, small)
    noise = os.urandom(4096)
    assert pack(noise) == (RAW, noise)
    assert unpack(sha(noise), RAW, noise) == noise


@pytest.mark.parametrize(
    ("codec", "stored", "problem"),
    [
        (ZLIB, b"not a zlib stream", "does not decompress (Error -3"),
        (ZLIB, zlib.compress(replay_state(50))[:-9], "does not decompress"),
        (ZLIB, zlib.compress(b"other bytes" * 10), "was modified"),
        (RAW, b"other bytes", "was modified"),
        (7, replay_state(50), "codec 7, which this envharness does not know (0: raw, 1: zlib)"),
        ("zlib", replay_state(50), "codec 'zlib'"),
        (ZLIB, "text", "holds text, not bytes"),
        (RAW, None, "holds null, not bytes"),
    ],
)
def test_a_damaged_row_is_named_by_its_digest(codec: object, stored: object, problem: str) -> None:
    digest = sha(replay_state(50))
    with pytest.raises(BlobDamage) as caught:
        unpack(digest, codec, stored)
    assert str(caught.value).startswith(f"state blob {digest} ")
    assert problem in str(caught.value)


# -- through the store ---------------------------------------------------------------------------


async def write_states(store_path: Path, states: list[bytes]) -> SessionChain:
    """A session whose turns' outcomes cite ``states``, one per turn."""
    async with open_store(store_path) as store:
        chain, created = new_session("ses_states")
        await store.append([created, status_row(chain, "running")])
        for turn, state in enumerate(states, start=1):
            outcome = chain.seal(Outcome(state=sha(state), signals={}), turn=turn)
            await store.append([outcome], {sha(state): state})
        await store.append([status_row(chain, "completed")])
    return chain


def kept(store_path: Path) -> dict[str, tuple[int, bytes]]:
    with plain(store_path) as connection:
        rows = connection.execute("SELECT digest, codec, data FROM blobs").fetchall()
    return {digest: (codec, data) for digest, codec, data in rows}


async def test_the_journal_keeps_states_compressed_under_their_uncompressed_digest(
    store_path: Path,
) -> None:
    big, small = replay_state(300), b'{"turn":1}'
    await write_states(store_path, [big, small])
    rows = kept(store_path)
    assert rows[sha(big)][0] == ZLIB
    assert zlib.decompress(rows[sha(big)][1]) == big
    assert rows[sha(small)] == (RAW, small)
    async with open_store(store_path, create=False) as store:
        assert await store.blob(sha(big)) == big
        assert await store.blob(sha(small)) == small
        assert (await store.verify()).ok


async def test_a_corrupt_compressed_blob_is_damage_for_verify_and_the_readers(
    store_path: Path,
) -> None:
    big = replay_state(300)
    await write_states(store_path, [replay_state(100), big])
    with plain(store_path) as connection:
        stored = connection.execute("SELECT data FROM blobs WHERE digest = ?", (sha(big),))
        damaged = bytearray(stored.fetchone()[0])
        damaged[len(damaged) // 2] ^= 0xFF
        connection.execute("UPDATE blobs SET data = ? WHERE digest = ?", (bytes(damaged), sha(big)))
    async with open_store(store_path, create=False) as store:
        report = await store.verify()
        with pytest.raises(StoreError, match=f"state blob {sha(big)} .*corrupt"):
            await store.blob(sha(big))
    [found] = report.breaks
    assert (found.session_id, found.seq) == ("ses_states", 3)  # the outcome of turn 2
    assert found.problem.startswith(f"state blob {sha(big)} ")
    assert "does not decompress" in found.problem


async def test_a_raw_row_written_by_a_plain_insert_reads_the_same(store_path: Path) -> None:
    """``codec`` defaults to raw, so a writer that knows nothing of it stays readable."""
    state = replay_state(100)
    await write_states(store_path, [b'{"turn":1}'])
    with plain(store_path) as connection:
        connection.execute("INSERT INTO blobs (digest, data) VALUES (?, ?)", (sha(state), state))
    async with open_store(store_path, create=False) as store:
        assert await store.blob(sha(state)) == state


# -- migrating a store of schema 9 ---------------------------------------------------------------


SCHEMA_9_BLOBS = "CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID"


def as_schema_9(store_path: Path) -> None:
    """Rewrite a store's blobs as schema 9 kept them (raw, WITHOUT ROWID) and say version 9."""
    with plain(store_path) as connection:
        rows = connection.execute("SELECT digest, codec, data FROM blobs").fetchall()
        connection.execute("BEGIN")
        connection.execute("DROP TABLE blobs")
        connection.execute(SCHEMA_9_BLOBS)
        connection.executemany(
            "INSERT INTO blobs (digest, data) VALUES (?, ?)",
            [
                (digest, zlib.decompress(data) if codec == ZLIB else data)
                for digest, codec, data in rows
            ],
        )
        connection.execute("PRAGMA user_version = 9")
        connection.execute("COMMIT")


async def test_a_schema_9_store_migrates_compresses_and_verifies(store_path: Path) -> None:
    states = [replay_state(turns) for turns in (4, 100, 200, 400)]
    chain = await write_states(store_path, states)
    as_schema_9(store_path)
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 9
        before = connection.execute("SELECT * FROM records ORDER BY pos").fetchall()
    async with open_store(store_path, create=False) as store:
        assert (await store.verify()).ok
        for state in states:
            assert await store.blob(sha(state)) == state
    rows = kept(store_path)
    assert {digest: codec for digest, (codec, _) in rows.items()} == {
        sha(state): RAW if len(state) < SMALLEST_PACKED else ZLIB for state in states
    }
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert connection.execute("SELECT * FROM records ORDER BY pos").fetchall() == before
        head = connection.execute(
            "SELECT head_digest FROM sessions WHERE id = ?", (chain.session_id,)
        )
        assert head.fetchone()[0] == chain.head


async def test_a_damaged_blob_of_a_schema_9_store_is_carried_over_for_verify(
    store_path: Path,
) -> None:
    """Migrating never fails on a row it cannot compress: it is copied as it is, and named."""
    state = replay_state(100)
    await write_states(store_path, [state])
    as_schema_9(store_path)
    with plain(store_path) as connection:
        connection.execute("UPDATE blobs SET data = 'text' WHERE digest = ?", (sha(state),))
    async with open_store(store_path, create=False) as store:
        report = await store.verify()
    [found] = report.breaks
    assert found.problem == f"state blob {sha(state)} holds text, not bytes"
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_migrating_compresses_each_blob_once(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = database.connect(store_path, create=True)
    connection.close()
    with plain(store_path) as plain_connection:
        for turns in (50, 100, 150):
            state = replay_state(turns)
            plain_connection.execute(
                "INSERT INTO blobs (digest, data) VALUES (?, ?)", (sha(state), state)
            )
    as_schema_9(store_path)
    packed: list[bytes] = []
    monkeypatch.setattr(blobs, "pack", lambda data: packed.append(data) or pack(data))
    database.connect(store_path, create=False).close()
    assert sorted(packed) == sorted(replay_state(turns) for turns in (50, 100, 150))


def test_a_migration_that_fails_leaves_the_schema_9_store_as_it_was(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = database.connect(store_path, create=True)
    connection.close()
    state = replay_state(100)
    with plain(store_path) as plain_connection:
        plain_connection.execute(
            "INSERT INTO blobs (digest, data) VALUES (?, ?)", (sha(state), state)
        )
    as_schema_9(store_path)

    def fail(data: bytes) -> tuple[int, bytes]:
        raise OSError("out of memory, say")

    monkeypatch.setattr(blobs, "pack", fail)
    with pytest.raises(StoreError, match="user-defined function raised exception"):
        database.connect(store_path, create=False)
    with plain(store_path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 9
        assert connection.execute("SELECT digest, data FROM blobs").fetchall() == [
            (sha(state), state)
        ]
        columns = [row[1] for row in connection.execute("PRAGMA table_info(blobs)")]
        assert columns == ["digest", "data"]
