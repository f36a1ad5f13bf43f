"""The projection: segments and the four states, for every way a session can go."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, NotFoundError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
from envharness.records import Finding, Score
from envharness.trajectories import Gap, Provenance, project_rows
from tests.trajectories._support import MISS, REACH, Journal, async_harness, harness, write


def test_a_completed_session_is_complete_finished_done_and_verified(tmp_path: Path) -> None:
    session = harness(tmp_path).run(REACH, turns=10)
    trajectory = session.trajectory()
    assert trajectory.schema_version == 1
    assert trajectory.session_id == session.id
    assert trajectory.provenance == Provenance(origin="native")
    assert (trajectory.environment, trajectory.scenario_id) == ("synthetic-total@1", "reach")
    assert trajectory.participants == {"a": "synthetic-agent@1"}
    assert trajectory.collection.state == "complete"
    assert (trajectory.execution.state, trajectory.execution.status) == ("finished", "completed")
    assert (trajectory.termination.cause, trajectory.termination.turns) == ("done", 3)
    outcome = trajectory.outcome
    assert (outcome.state, outcome.passed, outcome.verifier_version) == (
        "verified",
        True,
        "synthetic-score@1",
    )
    reward = outcome.reward
    assert reward is not None
    assert reward.resolved
    records = list(harness(tmp_path).records(session.id))
    last_outcome = max(r.seq for r in records if r.kind == "outcome")
    assert reward.cites == (last_outcome,)
    assert records[reward.score_seq].kind == "score"
    assert records[reward.score_seq].digest == reward.score_digest
    journal = trajectory.journal
    assert (journal.first_seq, journal.last_seq, journal.records) == (
        0,
        len(records) - 1,
        len(records),
    )
    assert journal.head_digest == records[-1].digest
    [segment] = trajectory.segments
    assert (segment.index, segment.cause, segment.status, segment.end_turn) == (
        0,
        "start",
        "completed",
        3,
    )


def test_running_out_of_turns_is_a_turn_limit(tmp_path: Path) -> None:
    trajectory = harness(tmp_path).run(MISS, turns=2).trajectory()
    assert trajectory.termination.cause == "turn_limit"
    assert (trajectory.outcome.state, trajectory.outcome.passed) == ("verified", False)


def stopped_then_resumed(store: Path) -> str:
    """A session cancelled after 2 of 6 turns, then resumed to its end: two segments."""

    async def main() -> str:
        runner = AsyncEnvironmentHarness(
            store, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
        )
        done = anyio.Event()
        found: list[str] = []

        def progress(session_id: str, completed: int, planned: int) -> None:
            found.append(session_id)
            if completed == 2:
                done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(lambda: runner.run(MISS, turns=6, progress=progress))
            await done.wait()
            group.cancel_scope.cancel()
        return found[0]

    session_id = anyio.run(main)
    stopped = harness(store).trajectory(session_id)
    assert (stopped.execution.state, stopped.termination.cause) == ("interrupted", "stopped")
    assert stopped.collection.state == "complete"
    resumed = harness(store).resume(session_id)
    assert resumed.status == "completed"
    return session_id


def test_a_resumed_session_has_causally_linked_segments(tmp_path: Path) -> None:
    session_id = stopped_then_resumed(tmp_path)
    trajectory = harness(tmp_path).trajectory(session_id)
    first, second = trajectory.segments
    assert (first.index, first.cause, first.status) == (0, "start", "stopped")
    assert (second.index, second.cause, second.previous, second.status) == (
        1,
        "resume",
        0,
        "completed",
    )
    assert second.start_turn == first.end_turn
    assert first.last_seq < second.first_seq
    assert (trajectory.execution.state, trajectory.termination.cause) == ("finished", "turn_limit")
    assert trajectory.termination.turns == 6


def test_a_branch_names_its_parent_and_waits_paused(tmp_path: Path) -> None:
    runner = harness(tmp_path)
    parent = runner.run(MISS, turns=3)
    checkpoint = runner.checkpoint(parent.id)
    child = runner.branch(checkpoint, intervention={"kind": "reset-total", "value": -1})
    trajectory = runner.trajectory(child)
    assert trajectory.parent == parent.id
    [segment] = trajectory.segments
    assert (segment.cause, segment.status, segment.start_turn) == ("branch", "paused", 3)
    assert (trajectory.execution.state, trajectory.termination.cause) == ("interrupted", "paused")
    assert trajectory.outcome.state == "unverified"
    continued = runner.continue_(child.id, turns=2)
    assert continued.status == "completed"
    trajectory = runner.trajectory(child)
    assert [(s.cause, s.previous) for s in trajectory.segments] == [("branch", None), ("resume", 0)]
    assert (trajectory.outcome.state, trajectory.outcome.passed) == ("verified", True)


def test_a_failed_session_keeps_its_error(tmp_path: Path) -> None:
    [session_id] = write(tmp_path, Journal().failed())
    trajectory = harness(tmp_path).trajectory(session_id)
    assert (trajectory.execution.state, trajectory.termination.cause) == ("finished", "failed")
    assert trajectory.termination.reason == "agent 'alice' raised"
    assert trajectory.termination.error is not None
    assert trajectory.termination.error.message == "boom"
    assert trajectory.outcome.state == "unverified"
    assert trajectory.collection.state == "complete"


def test_a_running_session_is_partial_and_not_ended() -> None:
    journal = Journal()
    journal.start()
    journal.turn(1)
    trajectory = project_rows(journal.id, journal.rows)
    assert (trajectory.collection.state, trajectory.execution.state) == ("partial", "running")
    assert trajectory.termination.cause == "not_ended"
    assert trajectory.ended_at is None
    [segment] = trajectory.segments
    assert (segment.status, segment.last_seq) == (None, journal.rows[-1].seq)


def test_missing_positions_are_gaps_never_filled_in() -> None:
    journal = Journal().complete(turns=2)
    rows = [row for row in journal.rows if row.seq not in (4, 5, 9)]
    trajectory = project_rows(journal.id, rows)
    assert trajectory.collection.state == "gaps"
    assert trajectory.collection.gaps == (Gap(first=4, last=5), Gap(first=9, last=9))
    assert "3 record(s) missing" in trajectory.collection.detail


def test_rows_out_of_order_are_refused() -> None:
    journal = Journal().complete()
    with pytest.raises(ValueError, match="ascending seq"):
        project_rows(journal.id, [journal.rows[1], journal.rows[0]])


def test_scores_that_disagree_are_disputed() -> None:
    journal = Journal()
    journal.start()
    journal.turn(1, done=True)
    journal.score(passed=True, version="judge@1")
    journal.score(passed=False, version="judge@2")
    journal.end()
    outcome = project_rows(journal.id, journal.rows).outcome
    assert outcome.state == "disputed"
    assert outcome.passed is None
    assert "judge@1: passed=True" in outcome.detail
    assert "judge@2: passed=False" in outcome.detail


def test_a_score_with_nothing_to_cite_does_not_resolve() -> None:
    journal = Journal()
    journal.start()
    journal.add(Score(version="judge@1", metrics={"accuracy": 1.0}))
    journal.end()
    reward = project_rows(journal.id, journal.rows).outcome.reward
    assert reward is not None
    assert (reward.cites, reward.resolved) == ((), False)


def test_findings_add_their_citations_to_the_reward_chain() -> None:
    journal = Journal()
    journal.start()
    first = journal.turn(1)
    last = journal.turn(2, done=True)
    journal.score()
    journal.add(Finding(title="slow start", cites=(first.seq,)))
    journal.end()
    reward = project_rows(journal.id, journal.rows).outcome.reward
    assert reward is not None
    assert reward.cites == (first.seq, last.seq)
    assert reward.resolved


def test_the_projection_is_a_pure_function_of_the_rows(tmp_path: Path) -> None:
    journal = Journal().complete()
    write(tmp_path, journal)
    assert harness(tmp_path).trajectory(journal.id) == project_rows(journal.id, journal.rows)


def test_an_unknown_session_is_named() -> None:
    with pytest.raises(NotFoundError, match="no records to project"):
        project_rows("ses_nothing", [])


@pytest.mark.anyio
async def test_the_async_harness_projects_too(tmp_path: Path) -> None:
    runner = async_harness(tmp_path)
    session = await runner.run(REACH, turns=5)
    trajectory = await runner.trajectory(session.id[:12])
    assert trajectory.session_id == session.id
    with pytest.raises(NotFoundError, match="no session"):
        await runner.trajectory("ses_missing")
