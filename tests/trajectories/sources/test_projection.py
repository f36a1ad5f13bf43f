"""Imported episodes project into the trajectory contract, marked by their provenance."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from envharness.errors import NotFoundError
from envharness.store.sources import ImportBatch, SourceStore
from envharness.trajectories import EvidenceMismatchError, TrajectoryError
from envharness.trajectories.codec import decode_trajectory, encode
from envharness.trajectories.sources import (
    SOURCE_DIGEST_ALGORITHM,
    SourceChain,
    import_records,
    project_episode,
    source_trajectories,
    split_trajectory_id,
    trajectory_id,
    verify_imported,
)
from tests.trajectories.sources._support import AT, SOURCE, database, episode

pytestmark = pytest.mark.anyio


async def test_an_episode_projects_with_its_provenance_and_four_states(
    store_path: Path,
) -> None:
    rows = episode(SourceChain(SOURCE))
    await import_records(store_path, SOURCE, rows, training=True)
    trajectory = await project_episode(store_path, SOURCE, "run-1")
    assert trajectory.session_id == "acme/nightly-evals:run-1"
    provenance = trajectory.provenance
    assert (provenance.origin, provenance.source, provenance.format) == (
        "imported",
        SOURCE,
        "envharness",
    )
    assert (provenance.source_position, provenance.source_hash) == (4, rows[-1].hash)
    assert provenance.training is True
    journal = trajectory.journal
    assert (journal.chain, journal.first_seq, journal.last_seq, journal.records) == (
        SOURCE,
        0,
        4,
        5,
    )
    assert (journal.head_digest, journal.algorithm) == (rows[-1].hash, SOURCE_DIGEST_ALGORITHM)
    assert (trajectory.environment, trajectory.scenario_id) == ("grid@1", "maze-3")
    assert trajectory.participants == {"bot": "gpt-x"}
    assert trajectory.collection.state == "complete"
    assert (trajectory.execution.state, trajectory.execution.status) == ("finished", "completed")
    assert (trajectory.termination.cause, trajectory.termination.seq) == ("imported", 4)
    assert trajectory.termination.turns == 1
    outcome = trajectory.outcome
    assert (outcome.state, outcome.verifier_version, outcome.passed) == (
        "verified",
        "exact@1",
        True,
    )
    assert outcome.reward is not None
    assert (outcome.reward.score_seq, outcome.reward.cites) == (3, (1, 2))
    assert outcome.reward.resolved
    [segment] = trajectory.segments
    assert (segment.cause, segment.first_seq, segment.last_seq, segment.status) == (
        "import",
        0,
        4,
        "completed",
    )
    # The same contract: it round-trips through the trajectory codec.
    assert decode_trajectory(encode(trajectory)) == trajectory


async def test_interleaved_episodes_each_project_their_own_records(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    rows = [
        chain.seal("a", "step", {}, at=AT),
        chain.seal("b", "step", {}, at=AT),
        chain.seal("a", "episode.ended", {"status": "stopped", "reason": "budget"}, at=AT),
        chain.seal("b", "capture.failed", {"detail": "exporter queue full", "lost": 7}, at=AT),
    ]
    await import_records(store_path, SOURCE, rows)
    found = {t.session_id: t async for t in source_trajectories(store_path)}
    first, second = found[trajectory_id(SOURCE, "a")], found[trajectory_id(SOURCE, "b")]
    assert (first.journal.first_seq, first.journal.last_seq, first.journal.records) == (0, 2, 2)
    assert (first.execution.state, first.termination.reason) == ("interrupted", "budget")
    assert first.outcome.state == "unverified"
    assert second.collection.state == "gaps"
    assert "position 3: exporter queue full" in second.collection.detail
    assert second.termination.cause == "not_ended"
    for trajectory in (first, second):
        await verify_imported(store_path, trajectory)


async def test_disagreeing_scores_are_disputed(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    rows = [
        chain.seal("e", "step", {}, at=AT),
        chain.seal("e", "score", {"scorer": "judge@1", "passed": True, "cites": [0]}, at=AT),
        chain.seal("e", "score", {"scorer": "judge@2", "passed": False, "cites": [0]}, at=AT),
    ]
    await import_records(store_path, SOURCE, rows)
    trajectory = await project_episode(store_path, SOURCE, "e")
    assert trajectory.outcome.state == "disputed"
    assert "position 1 (judge@1: passed=True)" in trajectory.outcome.detail


async def test_a_score_citing_nothing_in_its_episode_is_unresolved(store_path: Path) -> None:
    chain = SourceChain(SOURCE)
    rows = [chain.seal("e", "score", {"scorer": "judge@1", "passed": True, "cites": [5]}, at=AT)]
    await import_records(store_path, SOURCE, rows)
    reward = (await project_episode(store_path, SOURCE, "e")).outcome.reward
    assert reward is not None
    assert not reward.resolved


async def test_a_tampered_record_fails_the_digest_check(store_path: Path) -> None:
    await import_records(store_path, SOURCE, episode(SourceChain(SOURCE)))
    trajectory = await project_episode(store_path, SOURCE, "run-1")
    with database(store_path) as connection:
        connection.execute("DROP TRIGGER source_records_are_append_only_update")
        connection.execute(
            "UPDATE source_records SET payload = CAST(? AS BLOB) WHERE position = 2",
            ('{"move":"down"}',),
        )
    with pytest.raises(EvidenceMismatchError) as caught:
        await verify_imported(store_path, trajectory)
    assert caught.value.seq == 2
    assert "position 2" in str(caught.value)


async def test_a_trajectory_bound_to_another_head_fails_the_digest_check(
    store_path: Path,
) -> None:
    await import_records(store_path, SOURCE, episode(SourceChain(SOURCE)))
    trajectory = await project_episode(store_path, SOURCE, "run-1")
    moved = msgspec.structs.replace(
        trajectory, journal=msgspec.structs.replace(trajectory.journal, head_digest="0" * 64)
    )
    with pytest.raises(EvidenceMismatchError, match="but the trajectory bound 0000"):
        await verify_imported(store_path, moved)


async def test_unknown_episodes_and_sources_are_named(store_path: Path) -> None:
    await import_records(store_path, SOURCE, episode(SourceChain(SOURCE)))
    with pytest.raises(NotFoundError, match="has no episode 'run-9'"):
        await project_episode(store_path, SOURCE, "run-9")
    with pytest.raises(NotFoundError, match="no records of source 'nobody/here'"):
        await project_episode(store_path, "nobody/here", "run-1")


def test_trajectory_ids_split_back_into_source_and_episode() -> None:
    assert split_trajectory_id(trajectory_id(SOURCE, "a:b")) == (SOURCE, "a:b")
    assert split_trajectory_id("ses_0123") is None


async def test_projecting_one_episode_reads_only_that_episode(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing projects every episode: if each projection summarised the whole source,
    # a source of E episodes would cost E passes over it (minutes at a few thousand).
    chain = SourceChain(SOURCE)
    await import_records(store_path, SOURCE, episode(chain, "a") + episode(chain, "b"))

    def whole_source(self: SourceStore, source: str) -> None:
        raise AssertionError("projected one episode by summarising every episode")

    monkeypatch.setattr(SourceStore, "episodes", whole_source)
    trajectory = await project_episode(store_path, SOURCE, "b")
    assert (trajectory.journal.first_seq, trajectory.journal.last_seq) == (5, 9)
    info = await SourceStore(store_path).episode(SOURCE, "a")
    assert (info.first_position, info.last_position, info.records) == (0, 4, 5)


async def test_a_stored_payload_that_does_not_project_is_named(store_path: Path) -> None:
    # Stores written before imports checked every sealed record may hold one.
    chain = SourceChain(SOURCE)
    rows = [chain.seal("run-1", "score", {"metrics": {"a": "x"}}, at=AT)]
    batch = ImportBatch(source=SOURCE, format="envharness", importer="old/0")
    await SourceStore(store_path).append(batch, rows)
    with pytest.raises(TrajectoryError, match="position 0: the payload of its 'score' record"):
        await project_episode(store_path, SOURCE, "run-1")
