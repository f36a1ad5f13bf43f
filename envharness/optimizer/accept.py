"""Accepting a candidate as ``harness-vN``: the record, the patch files, the new state.

The ``optimizer.accepted`` record is committed first (under the next free name, atomically
with respect to other runs: :meth:`~envharness.optimizer.runlog.RunLog.accept`); the version is
then read back from the store as ``envharness harness show`` reads it, the run directory gets it
as ``versions/harness-vN.json`` and ``accepted_patch.json``, and the loop goes on on top of it.
A resumed run finds the record and only redoes the files.
"""

from __future__ import annotations

import msgspec

from envharness.optimizer.context import RunContext
from envharness.optimizer.gate import compare
from envharness.optimizer.results import summarize, write_json
from envharness.optimizer.state import Proposed, RunState, Spent
from envharness.optimizer.versions import harness_version
from envharness.records import OptimizerAccepted, OptimizerMeasured

__all__ = ["accept"]


async def accept(
    run: RunContext,
    iteration: int,
    chosen: Proposed,
    measured: dict[str, OptimizerMeasured],
    checks: list[OptimizerMeasured],
    state: RunState,
) -> str:
    """Accept ``chosen``; returns the version's name."""
    assert chosen.stacked is not None
    assert chosen.record.digest is not None
    stacked, digest = chosen.stacked, chosen.record.digest
    result = measured[digest]
    recorded = run.memo.accepted.get(iteration)
    if recorded is None:
        comparison = compare(run, result, state.reference, digest)
        score = summarize(result, solved=run.config.solved, version=result.version).mean_reward
        parent, spent = state.version, state.spent

        def record(name: str) -> OptimizerAccepted:
            return OptimizerAccepted(
                version=name,
                iteration=iteration,
                candidate=chosen.record.candidate,
                digest=digest,
                patch=stacked.to_dict(),
                parent=parent,
                experiment_id=result.experiment_id,
                mean_reward=comparison.mean,
                interval=comparison.interval,
                p_value=comparison.p_value,
                score=score,
                engineer_tokens=spent.engineer_tokens,
                rerun_tokens=spent.rerun_tokens,
                seconds=spent.seconds,
            )

        recorded = await run.accept(record, parent)
        run.memo.accepted[iteration] = recorded
    accepted = await harness_version(run.store, recorded.version)
    state.versions.append(accepted)
    state.patch, state.version = stacked, recorded.version
    state.reference = msgspec.structs.replace(result, version=recorded.version)
    for check in checks:
        if check.digest == digest and check.role == "held_out":
            state.held = check
        if check.digest == digest and check.role == "regression":
            state.suite = check
    state.spent = Spent()
    write_json(run.directory / "versions" / f"{accepted.version}.json", accepted)
    write_json(run.directory / "accepted_patch.json", accepted)
    p_value = accepted.p_value if accepted.p_value is not None else float("nan")
    run.say(f"accepted {accepted.version}: reward {accepted.mean_reward:+.3f}, p={p_value:.3g}")
    return accepted.version
