"""Import lines: each bad line is refused naming the line, the position and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from envharness.errors import ConfigurationError
from envharness.store.sources import SourceRow, source_hash_of
from envharness.trajectories.sources import (
    SourceChain,
    SourceChainError,
    SourceFormatError,
    encode_source_row,
    import_file,
    import_records,
    read_source_lines,
)
from tests.trajectories.sources._support import AT, SOURCE, dump, episode, lines, write_lines


def read(texts: list[bytes], source: str = SOURCE) -> list[SourceRow]:
    return list(read_source_lines(source, texts, origin="run.jsonl"))


def line_of(row: SourceRow, **changes: object) -> bytes:
    """The import line of ``row`` with fields changed (the hash left as it was)."""
    fields = json.loads(encode_source_row(row))
    fields.update(changes)
    return json.dumps(fields).encode()


def resealed(row: SourceRow, **changes: object) -> bytes:
    """The import line of ``row`` with fields changed and its hash recomputed."""
    changed = row._replace(**changes)  # type: ignore[arg-type]
    return encode_source_row(changed._replace(hash=source_hash_of(*changed[:10])))


def test_lines_round_trip_to_the_same_records() -> None:
    rows = episode(SourceChain(SOURCE))
    assert read([*lines(rows), b"\n"]) == rows


def test_a_hand_written_line_with_spaces_in_its_payload_reads() -> None:
    """The payload's bytes are hashed as they are, whatever their spacing."""
    payload = b'{ "b": 1,  "a": [1.5, "\xc3\xa9"] }'
    fields = {
        "schema_version": 1, "source": SOURCE, "position": 0, "episode": "e", "kind": "note",
        "at": AT, "prev": None,
    }  # fmt: skip
    digest = source_hash_of(SOURCE, 0, 1, "e", "note", None, None, AT, payload, None)
    text = json.dumps({**fields, "hash": digest}).encode()
    text = text[:-1] + b', "payload": ' + payload + b"}"
    [row] = read([text])
    assert row.payload == payload


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"{not json", "run.jsonl line 1: not a JSON object"),
        (b"[1, 2]", "run.jsonl line 1: not a JSON object"),
        (b'{"position": 0}', "no schema_version is not one this envharness reads (1)"),
    ],
)
def test_lines_that_are_not_records_are_refused(text: bytes, expected: str) -> None:
    with pytest.raises(SourceFormatError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        read([text])


def test_a_payload_that_is_not_utf8_is_refused_though_its_hash_matches() -> None:
    # The payload is kept as raw bytes, so the decoder never looked at its text: a Latin-1
    # line hashed by its producer was stored, and its exports were lines no reader decodes.
    row = SourceChain(SOURCE).seal("run-1", "note", {"text": "x"}, at=AT)
    text = resealed(row, payload=b'{"text":"d\xe9but"}')
    with pytest.raises(SourceFormatError) as caught:
        read([text])
    assert caught.value.position == 0
    assert "run.jsonl line 1 (position 0): payload is not UTF-8 (byte 0xe9 at offset 10)" in str(
        caught.value
    )
    assert "re-encode the file" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            b"\xef\xbb\xbf" + encode_source_row(episode(SourceChain(SOURCE))[0]),
            "starts with a byte",
        ),
        ('{"schema_version": 1}'.encode("utf-16"), "is UTF-16, not UTF-8"),
        # A field the first look skips: msgspec's DecodeError escaped as a traceback.
        (b'{"schema_version": 1, "episode": "d\xe9"}', r"is not UTF-8 \(byte 0xe9 at offset 35\)"),
    ],
)
def test_a_line_that_is_not_utf8_text_says_so(text: bytes, expected: str) -> None:
    with pytest.raises(SourceFormatError, match=f"run.jsonl line 1: {expected}"):
        read([text])


def test_an_unknown_schema_version_names_the_line_position_and_fix() -> None:
    rows = episode(SourceChain(SOURCE))
    texts = [*lines(rows[:2]), line_of(rows[2], schema_version=2)]
    with pytest.raises(SourceFormatError) as caught:
        read(texts)
    assert caught.value.problem == "schema"
    assert caught.value.position == 2
    assert str(caught.value).startswith(
        "run.jsonl line 3 (position 2): schema_version 2 is not one this envharness reads (1); "
        "upgrade envharness to import it"
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"hash": None}, "Expected `str`, got `null` - at `$.hash`"),
        ({"colour": "red"}, "unknown field `colour`"),
        ({"source": "other/src"}, "belongs to source 'other/src'"),
        ({"episode": ""}, "episode must be a non-empty string"),
        ({"kind": "Bad Kind"}, "is not a kind name"),
        ({"at": "yesterday"}, "is not an RFC 3339 time with a zone"),
        ({"at": "2026-01-05T09:00:00"}, "is not an RFC 3339 time with a zone"),
        ({"payload": [1]}, "payload must be a JSON object"),
        ({"hash": "ABC"}, "is not a sha256 in lowercase hex"),
        ({"turn": -1}, "turn -1 is negative"),
        ({"turn": 2**63}, "must be at most 9223372036854775807"),
    ],
)
def test_a_malformed_field_is_named(changes: dict[str, object], expected: str) -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceFormatError) as caught:
        read([lines(rows)[0], line_of(rows[1], **changes)])
    assert str(caught.value).startswith("run.jsonl line 2 (position 1): ")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "payload", "expected"),
    [
        ("episode.ended", {"status": "finished"}, "status is one of completed, failed, stopped"),
        ("episode.ended", {}, "missing required field `status`"),
        ("score", {"metrics": {}}, "missing required field `scorer`"),
        ("score", {"scorer": "s@1", "passed": "yes"}, "Expected `bool | null`"),
        ("capture.failed", {"lost": 3}, "missing required field `detail`"),
        ("episode.started", {"participants": ["bot"]}, "Expected `object`"),
    ],
)
def test_a_malformed_payload_of_a_shaping_kind_is_refused(
    kind: str, payload: dict[str, object], expected: str
) -> None:
    chain = SourceChain(SOURCE)
    row = chain.seal("run-1", kind, payload, at=AT)
    with pytest.raises(SourceFormatError) as caught:
        read(lines([row]))
    assert f"the payload of a {kind!r} record is malformed" in str(caught.value)
    assert expected in str(caught.value)


def test_a_hash_that_does_not_chain_names_the_line() -> None:
    rows = episode(SourceChain(SOURCE))
    texts = lines(rows)
    texts[3] = resealed(rows[3], prev=rows[1].hash)
    with pytest.raises(SourceChainError) as caught:
        read(texts)
    assert (caught.value.problem, caught.value.position) == ("chain", 3)
    assert str(caught.value).startswith(
        f"run.jsonl line 4: position 3: its prev {rows[1].hash!r} is not the hash of position 2"
    )


def test_an_altered_record_names_the_line() -> None:
    rows = episode(SourceChain(SOURCE))
    texts = lines(rows)
    texts[1] = line_of(rows[1], payload={"cells": [6, 6]})
    with pytest.raises(SourceChainError) as caught:
        read(texts)
    assert (caught.value.problem, caught.value.position) == ("hash", 1)
    assert "run.jsonl line 2: position 1: its hash" in str(caught.value)


def test_a_gap_between_lines_names_the_missing_positions() -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceChainError) as caught:
        read([*lines(rows[:2]), *lines(rows[4:])])
    assert (caught.value.problem, caught.value.position) == ("gap", 4)
    assert "position(s) 2..3 are missing" in str(caught.value)


def test_lines_out_of_order_are_refused() -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceChainError, match="sort the file by position"):
        read([*lines(rows[:3]), *lines(rows[1:2])])


def test_the_first_record_has_no_prev() -> None:
    rows = episode(SourceChain(SOURCE))
    with pytest.raises(SourceChainError, match="its prev must be null"):
        read([resealed(rows[0], prev=rows[1].hash)])


@pytest.mark.anyio
async def test_a_bad_file_changes_nothing_already_stored(tmp_path: Path) -> None:
    store = tmp_path / "store"
    chain = SourceChain(SOURCE)
    first = episode(chain, "run-1")
    await import_file(store, SOURCE, write_lines(tmp_path / "a.jsonl", first))
    before = dump(store)
    second = episode(chain, "run-2")
    texts = lines(second)
    texts[-1] = line_of(second[-1], schema_version=9)
    (tmp_path / "b.jsonl").write_bytes(b"".join(texts))
    with pytest.raises(SourceFormatError, match=r"b.jsonl line 5 \(position 9\)"):
        await import_file(store, SOURCE, tmp_path / "b.jsonl")
    assert dump(store) == before


@pytest.mark.anyio
async def test_files_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read '.*missing.jsonl'"):
        await import_file(tmp_path / "store", SOURCE, tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"\n\n")
    with pytest.raises(ConfigurationError, match=r"empty\.jsonl holds no records"):
        await import_file(tmp_path / "store", SOURCE, tmp_path / "empty.jsonl")
    with pytest.raises(ConfigurationError, match="unknown import format 'csv'"):
        await import_file(tmp_path / "store", SOURCE, tmp_path / "empty.jsonl", format="csv")


def test_sealed_payloads_are_canonical() -> None:
    row = SourceChain(SOURCE).seal("e", "note", {"b": 1, "a": 2}, at=AT)
    assert row.payload == b'{"a":2,"b":1}'
    assert msgspec.json.decode(encode_source_row(row))["payload"] == {"a": 2, "b": 1}


def test_a_position_beyond_what_the_store_holds_is_refused() -> None:
    row = episode(SourceChain(SOURCE))[0]
    with pytest.raises(SourceFormatError, match="must be at most 9223372036854775807"):
        read([line_of(row, position=2**63)])


@pytest.mark.parametrize(
    ("kind", "payload", "changes", "expected"),
    [
        ("score", {"metrics": {"a": "x"}}, {}, "the payload of a 'score' record is malformed"),
        ("episode.ended", {"status": "finished"}, {}, "status is one of completed, failed"),
        ("note", {}, {"at": "yesterday"}, "is not an RFC 3339 time with a zone"),
        ("note", {}, {"turn": 2**63}, "must be at most 9223372036854775807"),
        ("Bad Kind", {}, {}, "is not a kind name"),
        ("note", {}, {"payload": b'{"a":"\xff"}'}, "payload is not UTF-8 (byte 0xff"),
    ],
)
@pytest.mark.anyio
async def test_records_sealed_in_python_get_the_checks_of_a_line(
    tmp_path: Path, kind: str, payload: dict[str, object], changes: dict[str, object], expected: str
) -> None:
    # Stored records are never removed: one that does not project would break every
    # projection of its source for good.
    chain = SourceChain(SOURCE)
    good = chain.seal("run-1", "episode.started", {}, at=AT)
    bad = chain.seal("run-1", kind, payload, at=AT)._replace(**changes)  # type: ignore[arg-type]
    bad = bad._replace(hash=source_hash_of(*bad[:10]))
    with pytest.raises(SourceFormatError) as caught:
        await import_records(tmp_path, SOURCE, [good, bad])
    assert caught.value.position == 1
    assert expected in str(caught.value)
    # A refused first import leaves the store exactly as it was: here, no store at all.
    assert not (tmp_path / "evidence.sqlite3").exists()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kind": "note\n"}, "is not a kind name"),
        ({"episode": "e" * 201}, "episode must be a non-empty string"),
        ({"position": 2**63}, "must be at most 9223372036854775807"),
        ({"at": "2026-13-05T09:00:00Z"}, "is not an RFC 3339 time with a zone"),
        ({"payload": b'{"text":"d\xe9but"}'}, "payload is not UTF-8"),
    ],
)
def test_a_line_only_the_full_checks_would_refuse_is_still_refused(
    changes: dict[str, object], expected: str
) -> None:
    """Well-formed lines take a fast path (decoded once, checked by msgspec); every other
    line, even one whose hash matches its odd content, gets the full checks' message."""
    row = SourceChain(SOURCE).seal("run-1", "note", {"text": "x"}, at=AT)
    with pytest.raises(SourceFormatError) as caught:
        read([resealed(row, **changes)])
    assert str(caught.value).startswith("run.jsonl line 1 (position ")
    assert expected in str(caught.value)


def test_a_well_formed_line_that_is_not_ascii_takes_the_same_path_to_the_same_row() -> None:
    row = SourceChain(SOURCE).seal("run-é", "note", {"text": "début ✓"}, at=AT, turn=3)
    assert read([encode_source_row(row)]) == [row]


def test_a_malformed_prev_on_the_first_line_of_a_batch_is_named() -> None:
    """Nothing before it in the file to link to: its form is checked on its own."""
    row = SourceChain(SOURCE, next_position=5, prev="a" * 64).seal("run-1", "note", {}, at=AT)
    with pytest.raises(SourceFormatError, match="prev 'A' is neither null nor a sha256"):
        read([resealed(row, prev="A")])


def test_the_fast_path_reads_each_good_line_to_the_row_the_full_checks_read() -> None:
    from envharness.trajectories.sources.format import _decode_checked, _well_formed_row

    chain = SourceChain(SOURCE)
    rows = [
        *episode(chain),
        chain.seal("run-é", "note", {"text": "début ✓"}, at="2026-01-05T10:00:00.5+01:00"),
    ]
    for text in lines(rows):
        fast = _well_formed_row(SOURCE, text)
        assert fast is not None
        assert fast == _decode_checked(SOURCE, text, "run.jsonl line 1")
