"""Checkpoints, branches with declared interventions, continuing, lineage and comparison."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from envharness import ConfigurationError, EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import Branch, Checkpoint, Intervention, SegmentStarted

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=5))


def harness_for(store: Path) -> EnvironmentHarness:
    return EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )


def test_the_branching_workflow(store_path: Path) -> None:
    harness = harness_for(store_path)
    session = harness.run(START, turns=3)
    checkpoint = harness.checkpoint(session)
    assert (checkpoint.session_id, checkpoint.turn, checkpoint.label) == (session.id, 3, "turn 3")
    child = harness.branch(
        checkpoint, intervention={"kind": "reset-total", "value": -4}, reason="what if"
    )
    assert child.status == "paused"

    parent_after = harness.continue_(session, turns=3)
    child_after = harness.continue_(child, turns=3)
    assert (parent_after.status, parent_after.turns_completed) == ("completed", 6)
    assert (child_after.status, child_after.turns_completed) == ("completed", 6)

    child_records = list(harness.records(child.id))
    [branch] = [r.payload for r in child_records if isinstance(r.payload, Branch)]
    assert (branch.parent_session, branch.checkpoint_seq, branch.reason) == (
        session.id,
        checkpoint.seq,
        "what if",
    )
    assert branch.checkpoint_digest == checkpoint.digest
    [intervention] = [r.payload for r in child_records if isinstance(r.payload, Intervention)]
    assert intervention.intervention == {"kind": "reset-total", "value": -4}
    assert [r.turn for r in child_records if r.kind == "outcome"] == [4, 5, 6]

    lineage = harness.lineage(session)
    assert lineage.parent is None
    assert [(c.session_id, c.checkpoint_seq) for c in lineage.children] == [
        (child.id, checkpoint.seq)
    ]
    assert harness.lineage(child).parent is not None

    diff = harness.compare(session.id, child.id)
    assert diff.turns_compared == (4, 5, 6)
    first = next(d for d in diff.differences if d.kind == "observation")
    assert (first.turn, first.participant) == (4, "alice")
    assert (first.left["total"], first.right["total"]) == (2, -4)
    assert diff.scores["total"] == (0.0, -1.0)
    segments = [
        r.payload for r in harness.records(session.id) if isinstance(r.payload, SegmentStarted)
    ]
    assert [(s.cause, s.turn, s.until) for s in segments] == [("start", 0, None), ("resume", 3, 6)]
    assert harness.verify().ok


def test_branching_costs_the_same_whatever_the_parents_length(store_path: Path) -> None:
    harness = harness_for(store_path)
    short = harness.run(START, turns=2)
    long = harness.run(START, turns=300)
    sizes = []
    for session in (short, long):
        child = harness.branch(harness.checkpoint(session), intervention={"kind": "reset-total"})
        sizes.append(len(list(harness.records(child.id))))
    assert sizes[0] == sizes[1] == 6


def test_an_intervention_the_environment_rejects_is_recorded_and_makes_no_branch(
    store_path: Path,
) -> None:
    harness = harness_for(store_path)
    session = harness.run(START, turns=2)
    checkpoint = harness.checkpoint(session)
    with pytest.raises(ConfigurationError, match="rejected the intervention"):
        harness.branch(checkpoint, intervention={"kind": "explode"}, reason="chaos")
    assert len(harness.sessions()) == 1
    rejected = [
        r.payload for r in harness.records(session.id) if isinstance(r.payload, Intervention)
    ]
    assert len(rejected) == 1
    assert "unknown intervention 'explode'" in (rejected[0].rejected or "")
    assert harness.verify().ok


def test_a_checkpoint_from_another_store_is_refused(tmp_path: Path) -> None:
    first, second = harness_for(tmp_path / "a"), harness_for(tmp_path / "b")
    checkpoint = first.checkpoint(first.run(START, turns=1))
    second.run(START, turns=1)
    with pytest.raises(ConfigurationError, match="not in the store"):
        second.branch(checkpoint, intervention={"kind": "reset-total"})


def test_branching_from_something_that_is_not_a_checkpoint_is_refused(
    store_path: Path,
) -> None:
    """A checkpoint's id as a string used to end in an AttributeError."""
    harness = harness_for(store_path)
    session = harness.run(START, turns=1)
    with pytest.raises(ConfigurationError, match="branch needs a checkpoint, not str 'cp_1'"):
        harness.branch("cp_1", intervention={"kind": "reset-total"})  # type: ignore[arg-type]
    checkpoint = harness.checkpoint(session)
    child = harness.branch(checkpoint, intervention={"kind": "reset-total"})
    assert harness.lineage(child.id).parent is not None
    assert len(harness.sessions()) == 2


def test_checkpoints_are_records_with_the_state_of_the_turn(store_path: Path) -> None:
    harness = harness_for(store_path)
    session = harness.run(START, turns=2)
    checkpoint = harness.checkpoint(session, label="before the change")
    [record] = [r for r in harness.records(session.id) if isinstance(r.payload, Checkpoint)]
    assert (record.seq, record.digest) == (checkpoint.seq, checkpoint.digest)
    outcome = [r for r in harness.records(session.id) if r.kind == "outcome"][-1]
    assert record.payload.state == outcome.payload.state  # type: ignore[union-attr]
    assert record.payload.label == "before the change"  # type: ignore[union-attr]
    assert msgspec.json.decode(msgspec.json.encode(record.payload))["turn"] == 2


def test_continuing_needs_a_positive_number_of_turns(store_path: Path) -> None:
    harness = harness_for(store_path)
    session = harness.run(START, turns=1)
    with pytest.raises(ConfigurationError, match="turns must be a positive integer"):
        harness.continue_(session, turns=0)


def test_checkpoints_every_n_turns_keep_agents_own_state(store_path: Path) -> None:
    import sys

    from envharness import CommandAgent

    reference = Path(__file__).parents[1] / "agents" / "python" / "echo_agent.py"
    harness = EnvironmentHarness(
        store_path,
        environment=SyntheticEnvironment,
        agents={
            "alice": SyntheticAgent,
            "bob": CommandAgent([sys.executable, str(reference)], implementation="echo@1"),
        },
        checkpoint_every=2,
    )
    session = harness.run(START, turns=5)
    assert session.status == "completed"
    checkpoints = harness.checkpoints(session)
    assert [(c.turn, c.label) for c in checkpoints] == [(2, "turn 2"), (4, "turn 4")]
    [first, _] = [
        r.payload for r in harness.records(session.id) if isinstance(r.payload, Checkpoint)
    ]
    assert first.agents == {"bob": {"acts": 2, "feedback": 2}}
    child = harness.branch(checkpoints[0], intervention={"kind": "reset-total", "value": 1})
    assert harness.continue_(child, turns=1).turns_completed == 3
    assert harness.verify().ok


def test_sessions_of_different_lengths_are_not_identical(store_path: Path) -> None:
    harness = harness_for(store_path)
    short, long = harness.run(START, turns=2), harness.run(START, turns=4)
    diff = harness.compare(short, long)
    assert diff.unmatched_turns == (3, 4)
    assert not diff.identical
    assert harness.compare(short, harness.run(START, turns=2)).identical
