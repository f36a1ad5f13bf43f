"""The envelope: canonical bytes, digests, the per-session chain, timestamps and ids."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from envharness.records import (
    Hint,
    Log,
    Observation,
    Outcome,
    Record,
    SessionChain,
    canonical,
    decode_record,
    digest_of,
    encode_record,
    new_id,
    utc_now_text,
)
from envharness.records import envelope as envelope_module
from envharness.records import ids as ids_module

from .test_payloads import SAMPLES

BASE: dict[str, Any] = {
    "session_id": "ses_1",
    "seq": 3,
    "kind": "log",
    "turn": 2,
    "participant": "alice",
    "at": "2024-05-01T12:00:00.000000Z",
    "payload": b'{"kind":"log","level":"info","message":"hi","stream":null}',
    "prev": "aa" * 32,
}

# For each envelope field, a value that differs from BASE's (None ↔ value both ways).
CHANGED: dict[str, Any] = {
    "session_id": "ses_2",
    "seq": 4,
    "kind": "hint",
    "turn": None,
    "participant": None,
    "at": "2024-05-01T12:00:00.000001Z",
    "payload": b'{"kind":"log","level":"info","message":"hj","stream":null}',
    "prev": None,
}


def test_canonical_bytes_do_not_depend_on_key_order() -> None:
    one = {"b": 1, "a": {"d": [1, {"y": 2, "x": 1}], "c": None}}
    two = {"a": {"c": None, "d": [1, {"x": 1, "y": 2}]}, "b": 1}
    assert canonical(one) == canonical(two)
    assert canonical(one) == b'{"a":{"c":null,"d":[1,{"x":1,"y":2}]},"b":1}'


def test_payloads_with_dicts_built_in_different_orders_seal_to_the_same_digest() -> None:
    at = "2024-05-01T12:00:00.000000Z"
    first = Observation(observation={"z": 1, "a": {"n": 2, "m": 3}})
    second = Observation(observation={"a": {"m": 3, "n": 2}, "z": 1})
    assert canonical(first) == canonical(second)
    digests = {
        digest_of("s", 0, "observation", 1, "p", at, canonical(p), None) for p in (first, second)
    }
    assert len(digests) == 1


def test_digest_is_sha256_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", digest_of(**BASE))


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_the_digest_changes_when_any_one_field_changes(field: str) -> None:
    assert CHANGED[field] != BASE[field]
    assert digest_of(**{**BASE, field: CHANGED[field]}) != digest_of(**BASE)


@pytest.mark.parametrize("field", ["turn", "participant", "prev"])
def test_none_and_a_value_digest_differently_in_both_directions(field: str) -> None:
    with_none = {**BASE, field: None}
    assert digest_of(**with_none) != digest_of(**BASE)


def test_the_digest_covers_the_stored_payload_bytes_verbatim() -> None:
    # Same JSON value, different bytes: the digest follows the bytes, never a re-encoding.
    spaced = b'{"kind": "log", "level": "info", "message": "hi", "stream": null}'
    assert msgspec.json.decode(spaced) == msgspec.json.decode(BASE["payload"])
    assert digest_of(**{**BASE, "payload": spaced}) != digest_of(**BASE)


def test_a_chain_is_dense_from_zero_and_linked_through_prev() -> None:
    chain = SessionChain("ses_x")
    assert chain.next_seq == 0
    assert chain.head is None
    rows = [chain.seal(payload, turn=i, participant="p") for i, payload in enumerate(SAMPLES)]
    assert [row.seq for row in rows] == list(range(len(SAMPLES)))
    assert rows[0].prev is None
    for previous, row in itertools.pairwise(rows):
        assert row.prev == previous.digest
    assert chain.head == rows[-1].digest
    assert chain.next_seq == len(rows)
    assert len({row.digest for row in rows}) == len(rows)
    for row, payload in zip(rows, SAMPLES, strict=True):
        assert row.session_id == "ses_x"
        assert row.kind == payload.__struct_config__.tag
        assert row.payload == canonical(payload)
        assert row.digest == digest_of(*row[:-1])


def test_a_chain_resumed_from_its_head_continues_the_same_links() -> None:
    first = SessionChain("ses_r")
    rows = [first.seal(Log(message=str(i))) for i in range(3)]
    resumed = SessionChain("ses_r", next_seq=first.next_seq, prev=first.head)
    row = resumed.seal(Log(message="after"))
    assert row.seq == 3
    assert row.prev == rows[-1].digest


def test_seal_defaults_turn_and_participant_to_none() -> None:
    row = SessionChain("s").seal(Hint(text="x"))
    assert row.turn is None
    assert row.participant is None


def test_at_is_utc_text_ending_in_z() -> None:
    text = utc_now_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", text)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert parsed.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - parsed) < timedelta(minutes=1)
    row = SessionChain("s").seal(Log(message="x"))
    assert row.at.endswith("Z")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", row.at)


@pytest.mark.parametrize(
    "instant",
    [
        datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2024, 3, 1, 0, 0, 0, 0, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2099, 12, 31, 12, 30, 5, 42, tzinfo=UTC),
    ],
)
def test_at_text_matches_iso_formatting_of_the_same_instant(
    monkeypatch: pytest.MonkeyPatch, instant: datetime
) -> None:
    nanoseconds = (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000
    monkeypatch.setattr(envelope_module.time, "time_ns", lambda: nanoseconds + 999)
    expected = instant.isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert utc_now_text() == expected


def test_decode_record_gives_typed_payload_and_aware_utc_time() -> None:
    chain = SessionChain("ses_d")
    outcome = Outcome(state="00" * 32, done=True, signals={"x": 1.5})
    row = chain.seal(outcome, turn=4, participant="bob")
    record = decode_record(row)
    assert isinstance(record, Record)
    assert record.payload == outcome
    assert record.at.tzinfo is not None
    assert record.at.utcoffset() == timedelta(0)
    assert record.at.isoformat(timespec="microseconds").replace("+00:00", "Z") == row.at
    assert (record.session_id, record.seq, record.kind, record.turn, record.participant) == (
        "ses_d",
        0,
        "outcome",
        4,
        "bob",
    )
    assert (record.prev, record.digest) == (None, row.digest)


def test_encode_record_embeds_the_payload_bytes_verbatim() -> None:
    row = SessionChain("ses_e").seal(Observation(observation={"b": 1, "a": 2}), turn=1)
    line = encode_record(row)
    assert row.payload in line
    assert b"\n" not in line
    decoded = msgspec.json.decode(line)
    assert decoded["payload"] == {"kind": "observation", "observation": {"a": 2, "b": 1}}
    assert {k: v for k, v in decoded.items() if k != "payload"} == {
        "session_id": "ses_e",
        "seq": 0,
        "kind": "observation",
        "turn": 1,
        "participant": None,
        "at": row.at,
        "prev": None,
        "digest": row.digest,
    }
    # The exported line carries enough to re-check the digest.
    assert (
        digest_of(
            decoded["session_id"],
            decoded["seq"],
            decoded["kind"],
            decoded["turn"],
            decoded["participant"],
            decoded["at"],
            canonical(decoded["payload"]),
            decoded["prev"],
        )
        == row.digest
    )


def test_new_id_names_what_it_identifies_and_sorts_by_creation_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert re.fullmatch(r"ses_[0-9a-f]{22}", new_id("ses"))
    clock = iter([1_700_000_000_000_000_000 + i * 1_000_000 for i in range(50)])
    monkeypatch.setattr(ids_module.time, "time_ns", lambda: next(clock))
    made = [new_id("exp") for _ in range(50)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_new_ids_made_in_the_same_millisecond_differ() -> None:
    assert len({new_id("ses") for _ in range(1000)}) == 1000
