"""A transaction that moves every kind of indexed chain at once, for the checks that the
index comes out the same however its statements are shaped (one per chain, or many chains to
a statement): sessions created before it and in it, statuses with and without a reason, an
owner set and one cleared, a branch, turns, an experiment's and an optimizer run's chains, a
chain no index holds, and more chains than one statement carries."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from envharness.records import (
    Branch,
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerStarted,
    OptimizerStatus,
    RecordRow,
    RunnerRef,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
    new_id,
)
from envharness.store.journal import ROWS_PER_INSERT

from ._support import config, logs, new_session, status_row, turn_rows

RUNNER = RunnerRef(host="here", pid=7)
INDEX_TABLES = {
    "sessions": "id, experiment_id, scenario_id, status, reason, created_at, updated_at,"
    " turns_completed, head_seq, head_digest, owner, parent_id, parent_seq",
    "experiments": "id, name, status, reason, owner, total, created_at, updated_at, head_seq,"
    " head_digest",
    "optimizer_runs": "id, name, status, reason, owner, created_at, updated_at, head_seq,"
    " head_digest",
    "harness_versions": "version, run_id, seq, parent, digest, created_at",
}
"""Every derived index and the columns the journal writes in it."""


@dataclass
class Mix:
    """``before`` commits first (chains to move on); ``together`` is the one transaction."""

    before: list[RecordRow] = field(default_factory=list)
    together: list[RecordRow] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    unindexed: str = ""
    """The chain no index holds (``verify`` names it)."""


def mixed() -> Mix:
    """Fresh chains (new ids, so a shared database takes them more than once)."""
    mix = Mix()
    tag = new_id("mix")[-8:]
    experiment = SessionChain(new_id("exp"))
    mix.before.append(experiment.seal(ExperimentCreated(config=_experiment_config())))

    # Set an owner earlier, finish and clear it now (the owner becomes NULL, not kept).
    ending, created = new_session(experiment_id=experiment.session_id)
    mix.before += [created, ending.seal(SegmentStarted(segment=0, runner=RUNNER))]
    for turn in (1, 2):
        rows, state = turn_rows(ending, turn)
        mix.together += rows
        mix.blobs |= state
    mix.together += [
        status_row(ending, "completed", "done"),
        ending.seal(SegmentEnded(segment=0, status="completed")),
    ]
    # A branch taken now, with a status that has no reason, and an owner set now.
    parent = ending.session_id
    branched, created = new_session()
    mix.before.append(created)
    mix.together += [
        branched.seal(Branch(parent_session=parent, checkpoint_seq=3, intervention={"n": 1})),
        status_row(branched, "running"),
        branched.seal(SegmentStarted(segment=1, cause="branch", runner=RUNNER)),
    ]
    # A session that keeps its status, reason and owner while its head moves, a turn behind.
    kept, created = new_session()
    mix.before += [created, status_row(kept, "paused", "asked to")]
    for turn, into in ((4, mix.before), (2, mix.together)):
        rows, state = turn_rows(kept, turn)
        into += rows
        mix.blobs |= state
    # More chains than one statement carries, each only moving on.
    for _ in range(ROWS_PER_INSERT + 3):
        chain, created = new_session()
        mix.before.append(created)
        mix.together += logs(chain, 1)
    # Sessions created in the transaction itself, next to the others.
    for _ in range(2):
        chain, created = new_session(experiment_id=experiment.session_id)
        mix.together += [created, status_row(chain, "running"), *logs(chain, 1)]
    # An experiment's and an optimizer run's chains, their statuses and a version.
    mix.together += [
        experiment.seal(ExperimentStatus(status="running", total=4, runner=RUNNER)),
        *logs(experiment, 1),
    ]
    optimizer = SessionChain(new_id("opt"))
    mix.before.append(optimizer.seal(OptimizerStarted(config=_optimizer_config())))
    mix.together += [
        optimizer.seal(OptimizerStatus(status="running", runner=RUNNER)),
        optimizer.seal(
            OptimizerAccepted(
                version=f"v-{tag}", iteration=1, candidate=0, digest="d" * 64, patch={}
            )
        ),
    ]
    # A chain that no index holds: its head goes nowhere, and nothing fails.
    mix.unindexed = new_id("log")
    mix.together += logs(SessionChain(mix.unindexed), 2)
    return mix


def index_of(connection: sqlite3.Connection, mix: Mix) -> dict[str, list[tuple[object, ...]]]:
    """The index rows of ``mix``'s chains, table by table, in a stable order."""
    chains = sorted({row.session_id for row in mix.before + mix.together})
    marks = ", ".join("?" * len(chains))
    found: dict[str, list[tuple[object, ...]]] = {}
    for table, columns in INDEX_TABLES.items():
        key = "run_id" if table == "harness_versions" else "id"
        found[table] = [
            tuple(row)
            for row in connection.execute(
                f"SELECT {columns} FROM {table} WHERE {key} IN ({marks}) ORDER BY 1", chains
            )
        ]
    return found


def _experiment_config() -> ExperimentConfig:
    base = config()
    return ExperimentConfig(
        name="mixed",
        scenarios=(base.scenario,),
        trials=4,
        seed=0,
        turns=1,
        max_concurrency=1,
        environment=base.environment,
        participants=base.participants,
        envharness_version="test",
    )


def _optimizer_config() -> OptimizerConfigRef:
    return OptimizerConfigRef(
        name="mixed",
        environment=config().environment,
        engineer="scripted",
        engineer_version="1",
        scenarios=("scenario-1",),
    )
