"""``quickstart``: a store worth exploring, and an honest note that it measures nothing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from envharness.cli.quickstart import BOARD, BRANCH, SCENARIOS
from envharness.records import (
    Artifact,
    Branch,
    Checkpoint,
    ExperimentCreated,
    Score,
    SessionCreated,
)
from envharness.runtime.experiment import derive_seed
from envharness.store import RecordFilter, read_store
from envharness.store.artifacts import ArtifactFiles
from tests.cli._support import Invoke


@dataclass
class _Written:
    """What a quickstart store holds, read back from the evidence."""

    rosters: dict[str, frozenset[str]] = field(default_factory=dict)
    experiments: dict[str, ExperimentCreated] = field(default_factory=dict)
    placements: dict[str, tuple[str | None, str, int | None, int]] = field(default_factory=dict)
    """session id → (experiment id, scenario id, trial, seed)"""
    kinds: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    passed: set[bool | None] = field(default_factory=set)
    boards: list[str] = field(default_factory=list)
    """The sha256 of each board artifact."""
    checkpoints: dict[str, list[tuple[int, Checkpoint]]] = field(default_factory=dict)
    """session id → its checkpoints, with their seqs"""
    branches: dict[str, Branch] = field(default_factory=dict)
    """session id of a branch → where it came from"""
    turns: dict[str, int] = field(default_factory=dict)


async def _read(store: Path) -> _Written:
    reader = await read_store(store)
    written = _Written()
    for experiment in await reader.experiments():
        async for record in reader.records(experiment.id):
            if isinstance(record.payload, ExperimentCreated):
                written.experiments[experiment.id] = record.payload
    for info in await reader.sessions():
        written.statuses[info.status] += 1
        written.turns[info.id] = info.turns_completed
        async for record in reader.records(info.id):
            written.kinds[record.kind] += 1
            payload = record.payload
            if isinstance(payload, SessionCreated):
                config = payload.config
                written.rosters[info.id] = frozenset(config.participants)
                written.placements[info.id] = (
                    config.experiment_id,
                    config.scenario.id,
                    config.trial,
                    config.seed,
                )
            elif isinstance(payload, Score):
                written.passed.add(payload.passed)
            elif isinstance(payload, Artifact):
                assert payload.name == BOARD
                written.boards.append(payload.sha256)
            elif isinstance(payload, Checkpoint):
                written.checkpoints.setdefault(info.id, []).append((record.seq, payload))
            elif isinstance(payload, Branch):
                written.branches[info.id] = payload
    return written


def test_quickstart_writes_an_experiment_and_standalone_sessions(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "4")

    assert result.exit_code == 0, result.output
    assert "measure nothing" in result.stdout
    assert str(store_path.resolve()) in result.stdout
    assert "wrote 14 sessions" in result.stdout
    assert "10 in experiment exp_" in result.stdout
    assert "'quickstart sweep'), 3 standalone, 1 branch" in result.stdout
    assert "after turn 4: what if the total were reset" in result.stdout
    assert 'intervention {"kind":"reset-total","value":0}; both continued to turn 6' in (
        result.stdout
    )
    for command in ("serve --open", "sessions list", "sessions show ses_", "verify", "export ses_"):
        assert f"envharness --store {store_path.resolve()} {command}" in result.stdout
    written = anyio.run(_read, store_path)

    [(experiment_id, created)] = written.experiments.items()
    config = created.config
    assert [scenario.id for scenario in config.scenarios] == [s.id for s in SCENARIOS]
    assert config.trials == 2
    grouped = {sid: p for sid, p in written.placements.items() if p[0] == experiment_id}
    assert sorted((p[1], p[2]) for p in grouped.values()) == sorted(
        (s.id, trial) for s in SCENARIOS for trial in (0, 1)
    )
    for _, scenario, trial, seed in grouped.values():
        assert trial is not None
        assert seed == derive_seed(config.seed, scenario, trial)
    standalone = [sid for sid, p in written.placements.items() if p[0] is None]
    assert len(standalone) == 4  # three, and a branch of one of them
    assert {written.rosters[sid] for sid in grouped} == {frozenset(config.participants)}
    assert len({written.rosters[sid] for sid in standalone} | {frozenset(config.participants)}) == 4
    assert {len(roster) for roster in written.rosters.values()} == {1, 2, 3}

    assert written.kinds["action.blocked"] > 0
    assert written.kinds["finding"] > 0
    # Every session but the failed one, and again for the branched one once it was continued.
    assert written.kinds["score"] == 14
    assert written.passed == {True, False, None}
    assert written.statuses == {"completed": 13, "failed": 1}
    assert len(written.boards) == written.kinds["artifact"] == 14
    artifacts = ArtifactFiles(store_path / "artifacts")
    assert all(b"these numbers measure nothing" in artifacts.get(b) for b in written.boards)

    # One checkpoint, one branch from it with the declared intervention; both continued.
    [(child, branch)] = written.branches.items()
    parent = branch.parent_session
    [(seq, checkpoint)] = written.checkpoints[parent]
    assert list(written.checkpoints) == [parent]
    assert (branch.checkpoint_seq, checkpoint.turn) == (seq, 4)
    assert (branch.intervention, branch.reason) == (dict(BRANCH.intervention), BRANCH.reason)
    assert written.rosters[child] == written.rosters[parent] == {"alice", "bob", "carol"}
    assert written.turns[parent] == written.turns[child] == 4 + BRANCH.turns


def test_the_suggested_show_has_a_blocked_action_and_a_finding(
    invoke: Invoke, store_path: Path
) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "4")
    suggested = next(
        line.split()[-1] for line in result.stdout.splitlines() if " show ses_" in line
    )

    async def notable() -> list[str]:
        reader = await read_store(store_path)
        selection = RecordFilter(kinds=("action.blocked", "finding"))
        return [record.kind async for record in reader.records(suggested, selection)]

    assert {"action.blocked", "finding"} <= set(anyio.run(notable))


def test_quickstart_adds_to_an_existing_store(invoke: Invoke, store_path: Path) -> None:
    first = invoke("--store", store_path, "quickstart", "--turns", "1")
    again = invoke("--store", store_path, "quickstart", "--turns", "1")

    assert "already here" not in first.stdout
    assert "added to the 14 sessions already here (28 now)" in again.stdout
    assert "a new --store starts afresh" in again.stdout
    listed = invoke("--store", store_path, "sessions", "--json")

    assert len(listed.stdout.splitlines()) == 28


def test_quickstart_refuses_zero_turns(invoke: Invoke, store_path: Path) -> None:
    result = invoke("--store", store_path, "quickstart", "--turns", "0")

    assert result.exit_code == 2
    assert not store_path.exists()
