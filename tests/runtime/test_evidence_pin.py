"""The evidence a fixed experiment records, pinned byte for byte.

Performance work on the runtime and the journal must not change what is recorded: this runs a
small experiment with everything that varies between runs held still (the clock, the random
part of ids, the runner, measured durations, the package version) and compares each chain's
head digest with one taken before any optimisation. A head digest covers every record of its
chain (each record's digest covers the previous one's), so a changed byte anywhere — a payload,
a kind, a turn, a participant, a timestamp's form, a state blob's digest — changes a head.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import sqlite3
import time
import types
from pathlib import Path

import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import RunnerRef, digest_of
from envharness.runtime import experiment, participants, plan, session
from envharness.store.database import DATABASE_NAME

pytestmark = pytest.mark.anyio

FIXED_TIME_NS = 1_767_225_600_123_456_789
"""2026-01-01T00:00:00.123456Z: every timestamp and id prefix of the run."""

SCENARIOS = [
    Scenario(id="down", input=SyntheticScenarioInput(starting_total=3)),
    Scenario(id="up", input=SyntheticScenarioInput(starting_total=-2)),
    Scenario(id="early", input=SyntheticScenarioInput(starting_total=0, target=2)),
]

SESSION_HEADS = {
    "ses_019b76daa87b0000000002": (
        28,
        "2542353e5ea4688fb4360766417d7bd49b48e1ec5147a2870234ee18935076cb",
    ),
    "ses_019b76daa87b0000000003": (
        28,
        "68ed225e4f3ade30bf5535cb3f1228199ef531cc2bb20cf8aee23101fd1d1eb9",
    ),
    "ses_019b76daa87b0000000004": (
        28,
        "560afb36bac8f040e9db58bfd4fc94023e4929441aa1536a55401a81b74fcb7a",
    ),
    "ses_019b76daa87b0000000005": (
        28,
        "67ce4efe20f08f61f5beead358ec4c50c48e25fbd8f4698556f9955c61fe2432",
    ),
    "ses_019b76daa87b0000000006": (
        14,
        "14d2c689ef0369836a9619d0a86b22ebea589f3638cf3448f468211ff6eadf6c",
    ),
    "ses_019b76daa87b0000000007": (
        14,
        "e4c80fce04ae567a38ddb838cfd068a57da02969d4af9cb6628ba5a5a3024e66",
    ),
}
"""Chain id -> (records, head digest) of each session, taken before the performance work."""
EXPERIMENT = "exp_019b76daa87b0000000001"
PINNED_HEADS = {
    1: {EXPERIMENT: (3, "846cda4aadb9d331a589703ffdf79cbb70b344e164fd35892f3dc8ff22f808a7")},
    3: {EXPERIMENT: (3, "1bcc33fb9444107cada4d117803cd04b4343bbf55daf7934e9fddaa3a2f8814f")},
}
"""Per max_concurrency (the experiment's configuration records it), the experiment's chain."""


@pytest.fixture
def held_still(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold still what legitimately differs from run to run (and nothing else)."""
    counter = itertools.count()
    monkeypatch.setattr(time, "time_ns", lambda: FIXED_TIME_NS)
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: f"{next(counter):0{2 * (n or 32)}x}")
    runner = RunnerRef(host="pinned-host", pid=1, started=None)
    monkeypatch.setattr(session, "this_process", lambda: runner)
    monkeypatch.setattr(experiment, "this_process", lambda: runner)
    monkeypatch.setattr(participants, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    monkeypatch.setattr(plan, "__version__", "pinned")


INDEX_DIGEST = {
    1: "547c6d8a967673632764e9455520769bfda499ca5da34c973690dd5c36f280c2",
    3: "3f5d883e5fc4be4b5a0109fe3c2f0b4c501647fb6a175e51bd0e33f74fd63f84",
}
"""The sha256 of the session and experiment index rows the pinned run leaves (derived from
the records by the journal), taken before the performance work."""


def index_digest(store: Path) -> str:
    """The sessions and experiments tables, as they stand after the run."""
    with sqlite3.connect(store / DATABASE_NAME) as connection:
        sessions = connection.execute(
            "SELECT id, experiment_id, scenario_id, status, reason, created_at, updated_at,"
            " turns_completed, head_seq, head_digest, owner, parent_id, parent_seq"
            " FROM sessions ORDER BY id"
        ).fetchall()
        experiments = connection.execute(
            "SELECT id, name, status, reason, total, created_at, updated_at, head_seq,"
            " head_digest, owner FROM experiments ORDER BY id"
        ).fetchall()
    connection.close()
    return hashlib.sha256(repr((sessions, experiments)).encode()).hexdigest()


def chains(store: Path) -> dict[str, tuple[int, str]]:
    """Every chain's record count and head digest, after checking each link and digest."""
    with sqlite3.connect(store / DATABASE_NAME) as connection:
        rows = connection.execute(
            "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest"
            " FROM records ORDER BY session_id, seq"
        ).fetchall()
    connection.close()
    heads: dict[str, tuple[int, str]] = {}
    for chain_id, seq, kind, turn, participant, at, payload, prev, digest in rows:
        count, head = heads.get(chain_id, (0, None))
        assert (seq, prev) == (count, head), f"{chain_id} is not one unbroken chain at {seq}"
        assert digest == digest_of(chain_id, seq, kind, turn, participant, at, payload, prev)
        heads[chain_id] = (count + 1, digest)
    return heads


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_a_fixed_experiment_records_the_pinned_evidence(
    store_path: Path, held_still: None, concurrency: int, anyio_backend: str
) -> None:
    if concurrency > 1 and anyio_backend == "trio":
        pytest.skip("trio starts concurrent tasks in a random order: ids would follow it")
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={"alice": SyntheticAgent},
        checkpoint_every=2,
    )
    planned = harness.experiment(
        "pinned", SCENARIOS, turns=5, trials=2, seed=7, max_concurrency=concurrency
    )
    result = await planned.run()
    assert (result.completed, result.total) == (6, 6)
    found = chains(store_path)
    assert found == {**PINNED_HEADS[concurrency], **SESSION_HEADS}
    assert index_digest(store_path) == INDEX_DIGEST[concurrency]
