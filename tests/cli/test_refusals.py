"""Refusals with many reasons are told by reason: a count, the fix and one example each, and
``--verbose`` for every one."""

from __future__ import annotations

from pathlib import Path

from envharness.cli.refusals import FIXES, refusal_lines
from envharness.trajectories import Refusal
from tests.cli._support import Invoke
from tests.cli.test_trajectories import snapshot_of, synthetic_store


def refusal(session: str, condition: str) -> Refusal:
    return Refusal(snapshot_id="snp_1", session_id=session, condition=condition, detail="why")


def test_refusals_are_grouped_by_reason_most_frequent_first() -> None:
    refusals = [refusal(f"ses_{n}", "reward") for n in range(3)] + [refusal("ses_9", "terminal")]
    lines = refusal_lines("dataset 'd'", refusals, verbose=False)
    assert lines == [
        "dataset 'd' refused 4 trajectories:",
        "  3 not reward",
        f"    fix: {FIXES['reward']}",
        "    e.g. ses_0 (snapshot snp_1): not reward: why",
        "  1 not terminal",
        f"    fix: {FIXES['terminal']}",
        "    e.g. ses_9 (snapshot snp_1): not terminal: why",
        "  (--verbose lists every refused trajectory)",
    ]
    every = refusal_lines("dataset 'd'", refusals, verbose=True)
    assert [line for line in every if "ses_" in line] == [
        f"    ses_{n} (snapshot snp_1): not {c}: why"
        for n, c in [(0, "reward"), (1, "reward"), (2, "reward"), (9, "terminal")]
    ]
    assert not [line for line in every if "--verbose" in line]


def test_an_unknown_condition_still_points_somewhere() -> None:
    lines = refusal_lines("dataset 'd'", [refusal("ses_1", "new-rule")], verbose=False)
    assert lines[1:3] == ["  1 not new-rule", "    fix: see docs/trajectories.md"]
    assert lines[-1].startswith("    e.g. ses_1")  # one refusal: nothing more to list


def test_dataset_create_tells_refusals_by_reason(invoke: Invoke, tmp_path: Path) -> None:
    store = tmp_path / "store"
    sessions = synthetic_store(store)
    snapshot_id = snapshot_of(invoke, store, *sessions)  # no training entitlement
    refused = invoke("--store", store, "dataset", "create", "sft", snapshot_id)
    assert refused.exit_code == 2
    lines = refused.stderr.splitlines()
    assert lines[0] == "error: dataset 'sft' refused 2 trajectories:"
    assert lines[1] == "  2 not training-entitled"
    assert "--entitle-training BASIS" in lines[2]
    assert sum(session in refused.stderr for session in sessions) == 1
    assert lines[-1] == "  (--verbose lists every refused trajectory)"
    verbose = invoke("--store", store, "dataset", "create", "sft", snapshot_id, "--verbose")
    assert verbose.exit_code == 2
    assert all(session in verbose.stderr for session in sessions)
    assert invoke("--store", store, "dataset", "list").stdout == ""
