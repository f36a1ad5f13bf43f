"""``sessions``, ``show``, ``verify`` and ``export`` over a quickstart store."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.contracts.environment import Resolution, ScoreReport
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import digest_of
from envharness.store import open_store
from tests.cli._support import Invoke
from tests.store.test_damage import INDEX_LEAF, offset_in_page


class _Line(msgspec.Struct):
    """An exported line with its payload kept as the exact bytes that were digested."""

    session_id: str
    seq: int
    kind: str
    turn: int | None
    participant: str | None
    at: str
    payload: msgspec.Raw
    prev: str | None
    digest: str


def _sessions(invoke: Invoke, store: Path, *options: str) -> list[dict[str, object]]:
    result = invoke("--store", store, "sessions", "--json", *options)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _session_with(invoke: Invoke, store: Path, status: str = "completed") -> str:
    """The most eventful session (most records) with this status."""
    found = _sessions(invoke, store, "--status", status)
    return str(max(found, key=lambda info: int(str(info["records"])))["id"])


# -- sessions ----------------------------------------------------------------------------------


def test_sessions_prints_a_table(invoke: Invoke, quickstart_master: Path) -> None:
    result = invoke("--store", quickstart_master, "sessions")

    assert result.exit_code == 0
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["id", "scenario", "status", "turns", "records", "created"]
    assert len(rows) == 14
    assert all(row.startswith("ses_") for row in rows)


def test_sessions_json_is_one_object_per_line(invoke: Invoke, quickstart_master: Path) -> None:
    found = _sessions(invoke, quickstart_master)

    assert len(found) == 14
    assert {"id", "scenario_id", "status", "turns_completed", "records", "created_at"} <= set(
        found[0]
    )


def test_sessions_filters_by_status(invoke: Invoke, quickstart_master: Path) -> None:
    failed = _sessions(invoke, quickstart_master, "--status", "failed")

    assert [info["status"] for info in failed] == ["failed"]


def test_sessions_rejects_an_unknown_status(invoke: Invoke, quickstart_master: Path) -> None:
    result = invoke("--store", quickstart_master, "sessions", "--status", "done")

    assert result.exit_code == 2
    assert "error: --status 'done' is not one of: created, running" in result.stderr


def test_sessions_of_an_empty_store_says_so(invoke: Invoke, store_path: Path) -> None:
    async def create() -> None:
        async with open_store(store_path):
            pass

    anyio.run(create)
    result = invoke("--store", store_path, "sessions")

    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no sessions in" in result.stderr


# -- show --------------------------------------------------------------------------------------


def test_show_renders_a_timeline_turn_by_turn(invoke: Invoke, quickstart_master: Path) -> None:
    session = _session_with(invoke, quickstart_master)

    result = invoke("--store", quickstart_master, "show", session[:20])

    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith(f"session {session}\n")
    for expected in (
        "created: environment synthetic-total@1",
        "participant alice: role agent, synthetic-agent@1",
        "turn 1\n",
        "turn 4\n",
        "observed   {",
        "attempted  {",
        'executed   {"value":1} -> {',
        'BLOCKED    {"value":99}',
        "by validation: Expected `int` <= 10",
        "outcome    total=",
        "score synthetic-score@1: not passed",
        "finding [low] total ended below zero (cites seq",
        "status completed",
    ):
        assert expected in text
    assert text.index("turn 1\n") < text.index("turn 2\n") < text.index("score synthetic")


def test_show_a_failed_session_gives_the_reason(invoke: Invoke, quickstart_master: Path) -> None:
    session = _session_with(invoke, quickstart_master, "failed")

    result = invoke("--store", quickstart_master, "show", session)

    assert "status failed: agent 'dana' raised RuntimeError: the flaky quickstart agent" in (
        result.stdout
    )


class _NonFiniteNumbers(SyntheticEnvironment):
    """Reports a NaN signal and an infinite metric: both are recorded as null."""

    def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        resolution = super().resolve(state, actions)
        return dataclasses.replace(resolution, signals={"ratio": float("nan"), "total": 2.5})

    def score(self, state: Any, scenario: Scenario[Any]) -> ScoreReport:
        return ScoreReport(metrics={"score": float("inf"), "turns": 2.0})


def test_show_renders_null_signals_and_metrics(invoke: Invoke, store_path: Path) -> None:
    harness = EnvironmentHarness(
        store_path, environment=_NonFiniteNumbers, agents={"alice": SyntheticAgent}
    )
    session = harness.run(
        Scenario(id="non-finite", input=SyntheticScenarioInput(starting_total=0)), turns=2
    )
    assert session.status == "completed", session.reason

    result = invoke("--store", store_path, "show", session.id)

    assert result.exit_code == 0, result.output
    assert "outcome    ratio=null total=2.5" in result.stdout
    assert "score synthetic-score@1: no pass/fail  score=null turns=2" in result.stdout


def test_show_filters_by_kind_participant_and_turn(invoke: Invoke, quickstart_master: Path) -> None:
    session = _session_with(invoke, quickstart_master)
    store = ("--store", quickstart_master)

    blocked = invoke(*store, "show", session, "--kind", "action.blocked").stdout
    bob_turn_1 = invoke(*store, "show", session, "--participant", "bob", "--turn", "1").stdout
    two_kinds = invoke(*store, "show", session, "--kind", "score", "--kind", "finding").stdout

    assert "BLOCKED" in blocked
    assert "observed" not in blocked
    assert "attempted" not in blocked
    assert "bob" in bob_turn_1
    assert "alice" not in bob_turn_1.split("turn 1", 1)[1]
    assert "turn 2" not in bob_turn_1
    assert "score" in two_kinds
    assert "finding" in two_kinds
    assert "observed" not in two_kinds


def test_show_rejects_an_unknown_kind(invoke: Invoke, quickstart_master: Path) -> None:
    result = invoke("--store", quickstart_master, "show", "ses_", "--kind", "observations")

    assert result.exit_code == 2
    assert "error: --kind 'observations' is not one of:" in result.stderr


@pytest.mark.parametrize(
    ("turn", "problem"),
    [("-1", "greater than or equal to 0"), (str(2**64), "less than or equal to")],
)
def test_show_refuses_a_turn_no_session_can_have(
    invoke: Invoke, quickstart_master: Path, turn: str, problem: str
) -> None:
    """A turn beyond 64 bits used to reach SQLite and end in a traceback."""
    session = _session_with(invoke, quickstart_master)
    good = invoke("--store", quickstart_master, "show", session, "--turn", "0")
    result = invoke("--store", quickstart_master, "show", session, "--turn", turn)

    assert good.exit_code == 0, good.output
    assert result.exit_code == 2
    assert "Invalid value for '--turn'" in result.stderr
    assert problem in result.stderr
    assert "Traceback" not in result.output


def test_show_an_ambiguous_prefix_asks_for_more(invoke: Invoke, quickstart_master: Path) -> None:
    result = invoke("--store", quickstart_master, "show", "ses_")

    assert result.exit_code == 2
    assert "error: session id prefix 'ses_' is ambiguous" in result.stderr


# -- verify ------------------------------------------------------------------------------------


def test_verify_an_intact_store(invoke: Invoke, quickstart_master: Path) -> None:
    result = invoke("--store", quickstart_master, "verify")

    assert result.exit_code == 0
    assert result.stdout.startswith("verified 16 chains, ")  # 14 sessions, experiment, source
    assert result.stdout.endswith(" records: OK\n")


def test_verify_names_the_session_and_seq_of_a_tampered_record(
    invoke: Invoke, quickstart_store: Path
) -> None:
    session = _session_with(invoke, quickstart_store)
    database = sqlite3.connect(quickstart_store / "evidence.sqlite3")
    with database:
        database.execute("DROP TRIGGER records_are_append_only_update")
        database.execute(
            "UPDATE records SET payload = ? WHERE session_id = ? AND seq = 7",
            (b'{"action":{"value":3},"kind":"action.attempted","seconds":0.0}', session),
        )
    database.close()

    result = invoke("--store", quickstart_store, "verify")

    assert result.exit_code == 1
    assert f"{session} seq 7: digest mismatch" in result.stdout
    assert "1 problem" in result.stdout.splitlines()[-1]


def test_verify_full_adds_sqlites_integrity_check(invoke: Invoke, quickstart_store: Path) -> None:
    database = quickstart_store / "evidence.sqlite3"
    data = bytearray(database.read_bytes())
    # One entry of the records-by-kind index: "action.executed" -> "action.uxecuted".
    data[offset_in_page(data, INDEX_LEAF, b"action.executed") + len("action.")] = ord("u")
    database.write_bytes(bytes(data))

    quick = invoke("--store", quickstart_store, "verify")
    full = invoke("--store", quickstart_store, "verify", "--full")

    assert (quick.exit_code, full.exit_code) == (1, 1)
    assert "records-by-kind index disagrees with the records" in quick.stdout
    assert "integrity_check" not in quick.stdout
    assert "evidence.sqlite3: SQLite's integrity_check found: " in full.stdout
    assert "evidence.sqlite3 is damaged; to recover, keep a copy of the store folder" in full.stdout


def test_verify_names_a_store_too_damaged_to_open_and_exits_1(
    invoke: Invoke, quickstart_store: Path
) -> None:
    database = quickstart_store / "evidence.sqlite3"
    data = bytearray(database.read_bytes())
    data[18] = 0xFD  # the header's write version: SQLite would open it read-only
    database.write_bytes(bytes(data))

    result = invoke("--store", quickstart_store, "verify")

    assert result.exit_code == 1
    assert "evidence.sqlite3: the store's database " in result.stdout
    assert "is damaged: the header's file format write version (byte 18) holds 253" in result.stdout
    assert "restore the store from a backup" in result.stdout
    assert result.stdout.splitlines()[-1].endswith("1 problem")


# -- export ------------------------------------------------------------------------------------


def test_export_lines_decode_and_chain(invoke: Invoke, quickstart_master: Path) -> None:
    session = _session_with(invoke, quickstart_master)

    result = invoke("--store", quickstart_master, "export", session[:22])

    assert result.exit_code == 0
    lines = [msgspec.json.decode(line, type=_Line) for line in result.stdout_bytes.splitlines()]
    assert [line.seq for line in lines] == list(range(len(lines)))
    assert lines[0].prev is None
    for earlier, later in itertools.pairwise(lines):
        assert later.prev == earlier.digest
    for line in lines:
        payload = bytes(line.payload)
        recomputed = digest_of(
            line.session_id, line.seq, line.kind, line.turn, line.participant, line.at,
            payload, line.prev,
        )  # fmt: skip
        assert recomputed == line.digest


@pytest.mark.parametrize("command", [("sessions", "show"), ("export",)])
def test_an_unknown_session_is_a_clear_error(
    invoke: Invoke, quickstart_master: Path, command: tuple[str, ...]
) -> None:
    result = invoke("--store", quickstart_master, *command, "ses_[nope]")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: no session 'ses_[nope]' in the store at ")
