"""``experiments show`` per participant, and ``dataset create`` choosing whose reward a row has."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from envharness import EnvironmentHarness
from tests.cli._support import Invoke
from tests.trajectories._duel import AGENTS, Duel, duel


@dataclass(frozen=True)
class Duels:
    store: Path
    experiment: str
    """Zero-sum duels, scored per participant: alice wins one scenario, bob the other."""
    shared: str
    """The same duels scored with shared metrics only."""
    snapshot: str
    """An entitled snapshot of one per-participant duel and one truncated duel."""
    shared_snapshot: str
    """An entitled snapshot of one shared-scored duel."""


@pytest.fixture(scope="module")
def duels(tmp_path_factory: pytest.TempPathFactory) -> Duels:
    store = tmp_path_factory.mktemp("cli-duels") / "store"
    harness = EnvironmentHarness(store, environment=Duel, agents=AGENTS)
    scenarios = [duel("alice-wins"), duel("bob-wins", winner="bob")]
    result = harness.experiment("duels", scenarios, trials=2, seed=3, turns=10).run()
    shared = harness.experiment(
        "shared duels", [duel("together", shared_only=True)], trials=2, seed=3, turns=10
    ).run()
    won = harness.run(duel("won"), turns=10)
    cut = harness.run(duel("cut", moves=9, limit=2), turns=10)
    one = harness.run(duel("shared", shared_only=True), turns=10)
    return Duels(
        store=store,
        experiment=result.id,
        shared=shared.id,
        snapshot=harness.snapshot([won, cut], entitlement="own games").metadata.id,
        shared_snapshot=harness.snapshot([one], entitlement="own games").metadata.id,
    )


def test_experiments_show_a_table_per_participant(invoke: Invoke, duels: Duels) -> None:
    result = invoke("--store", duels.store, "experiments", "show", duels.experiment)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("scores duel-score@1 per participant: mean [95% CI] (n)")
    table = [line.split() for line in lines[start + 1 : start + 8]]
    assert table == [
        ["scenario", "participant", "metric", "value"],
        ["alice-wins", "alice", "chips", "1", "[1,", "1]", "(2)"],
        ["bob", "chips", "-1", "[-1,", "-1]", "(2)"],
        ["bob-wins", "alice", "chips", "-1", "[-1,", "-1]", "(2)"],
        ["bob", "chips", "1", "[1,", "1]", "(2)"],
        ["all", "alice", "chips", "0", "[-1,", "1]", "(4)"],
        ["bob", "chips", "0", "[-1,", "1]", "(4)"],
    ]
    # The shared metric keeps its own table, as before.
    assert "scores duel-score@1: mean [95% CI] (n)" in lines
    assert any(line.split()[:2] == ["alice-wins", "moves"] for line in lines)
    as_json = invoke("--store", duels.store, "experiments", "show", duels.experiment, "--json")
    [overall] = json.loads(as_json.stdout)["scores"]
    assert [p["participant"] for p in overall["participants"]] == ["alice", "bob"]
    assert overall["participants"][0]["metrics"][0]["n"] == 4


def test_shared_scores_show_no_participant_table(invoke: Invoke, duels: Duels) -> None:
    result = invoke("--store", duels.store, "experiments", "show", duels.shared)
    assert result.exit_code == 0, result.output
    assert "per participant" not in result.stdout
    as_json = json.loads(
        invoke("--store", duels.store, "experiments", "show", duels.shared, "--json").stdout
    )
    assert "participants" not in as_json["scores"][0]


def test_dataset_create_takes_each_participants_reward(invoke: Invoke, duels: Duels) -> None:
    created = invoke(
        "--store", duels.store, "dataset", "create", "chips", duels.snapshot, "--reward", "chips"
    )
    assert created.exit_code == 0, created.output
    exported = invoke("--store", duels.store, "dataset", "export", "chips")
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    found = {(r["participant"], r["terminated"], r["truncated"]): r["reward"] for r in rows}
    assert found == {
        ("alice", True, False): 1.0,
        ("bob", True, False): -1.0,
        ("alice", False, True): 0.0,
        ("bob", False, True): 0.0,
    }
    assert sorted(r["step_rewards"] for r in rows) == [[-0.75], [0.25], [0.25], [0.25, 1.0]]


def test_dataset_create_refuses_a_shared_reward_for_two(invoke: Invoke, duels: Duels) -> None:
    refused = invoke("--store", duels.store, "dataset", "create", "both", duels.shared_snapshot)
    assert refused.exit_code == 2
    assert "has no per-participant metrics" in refused.stderr
    assert "would give both the same reward" in refused.stderr
    one = invoke(
        "--store", duels.store, "dataset", "create", "alice", duels.shared_snapshot,
        "--participant", "alice",
    )  # fmt: skip
    assert one.exit_code == 0, one.output
    both = invoke(
        "--store", duels.store, "dataset", "create", "both", duels.shared_snapshot,
        "--shared-reward",
    )  # fmt: skip
    assert both.exit_code == 0, both.output
    listed = invoke("--store", duels.store, "dataset", "list").stdout.splitlines()
    [alice] = [line for line in listed if line.startswith("alice ")]
    assert "participants=alice" in alice
    [shared] = [line for line in listed if line.startswith("both ")]
    assert "shared-reward" in shared
