"""RecordRow: a row the garbage collector never sees, still the nine-field sequence it was."""

from __future__ import annotations

import collections.abc
import gc
import sqlite3

import msgspec

from envharness.records import Log, RecordRow, SessionChain

FIELDS = ("session_id", "seq", "kind", "turn", "participant", "at", "payload", "prev", "digest")


def _row() -> RecordRow:
    return SessionChain("ses_1").seal(Log(message="hi"), turn=2, participant="alice")


def _values(row: RecordRow) -> tuple[object, ...]:
    return tuple(getattr(row, name) for name in FIELDS)


def test_a_sealed_row_is_not_tracked_by_the_garbage_collector() -> None:
    # A session's rows live until their commit: tracked, each would be allocated into the
    # young generation and carried through collections while the session waits.
    row = _row()
    assert not gc.is_tracked(row)
    assert not gc.is_tracked(RecordRow(*_values(row)))


def test_a_row_unpacks_indexes_and_slices_as_its_nine_fields_in_order() -> None:
    row = _row()
    values = _values(row)
    assert len(row) == 9
    assert tuple(row) == values
    session_id, seq, kind, turn, participant, at, payload, prev, digest = row
    assert (session_id, seq, kind, turn, participant, at, payload, prev, digest) == values
    assert [row[index] for index in range(9)] == list(values)
    assert row[-1] == row.digest
    assert row[:6] == values[:6]
    assert row[7:] == values[7:]
    assert RecordRow(*row) == row


def test_a_row_binds_as_sqlite_parameters() -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute(f"CREATE TABLE records ({', '.join(FIELDS)})")
    row = _row()
    connection.executemany(f"INSERT INTO records VALUES ({', '.join('?' * 9)})", [row])
    assert connection.execute("SELECT * FROM records").fetchall() == [_values(row)]


def test_a_row_encodes_and_decodes_as_the_array_it_was() -> None:
    row = _row()
    data = msgspec.json.encode(row)
    assert data == msgspec.json.encode(list(_values(row)))
    assert msgspec.json.decode(data, type=RecordRow) == row


def test_a_row_is_a_sequence_to_isinstance_and_match() -> None:
    row = SessionChain("ses_x").seal(Log(message="hi"))
    assert isinstance(row, collections.abc.Sequence)
    match row:
        case [session_id, seq, *_]:
            assert (session_id, seq) == ("ses_x", 0)
        case _:
            raise AssertionError("a row matches a sequence pattern")


def test_a_row_answers_what_a_sequence_answers() -> None:
    row = SessionChain("ses_x").seal(Log(message="hi"))
    assert "ses_x" in row
    assert row.index("ses_x") == 0
    assert row.count(None) == list(row).count(None)
    assert list(reversed(row)) == list(row)[::-1]
