"""An optimizer run's result, from its state: the returned value and the report files.

``report.json`` (the :class:`~envharness.optimizer.results.OptimizationResult`) and
``report.txt`` (:func:`~envharness.optimizer.results.report_lines`) are rewritten after every
iteration, so an interrupted run leaves its report up to its last decided iteration.
"""

from __future__ import annotations

from envharness.optimizer.context import RunContext
from envharness.optimizer.measure import subset
from envharness.optimizer.results import (
    OptimizationResult,
    report_lines,
    summarize,
    write_bytes,
    write_json,
)
from envharness.optimizer.runlog import measurement_key
from envharness.optimizer.state import RunState

__all__ = ["run_result", "write_report"]


def run_result(
    run: RunContext, state: RunState, status: str, reason: str | None
) -> OptimizationResult:
    """What the run has come to: baseline and current figures, versions, iterations, ledger."""
    solved = run.config.solved
    base_digest = run.base.digest() if run.base is not None else None
    baseline = subset(
        run.memo.measurements[measurement_key("baseline", base_digest)],
        [s.id for s in run.suites.train],
    )
    return OptimizationResult(
        run_id=run.run_id,
        status=status,
        reason=reason,
        directory=str(run.directory),
        environment=run.environment_name,
        engineer=f"{run.engineer.name} ({run.engineer.version})",
        baseline=summarize(baseline, solved=solved, version=baseline.version),
        final=summarize(state.reference, solved=solved, version=state.reference.version),
        accepted_version=state.versions[-1].version if state.versions else None,
        versions=tuple(state.versions),
        iterations=tuple(state.iterations),
        ledger=tuple(state.ledger),
        patch=state.patch.to_dict() if state.patch.hooks else None,
        held_out=(
            summarize(state.held, solved=solved, version=state.held.version)
            if state.held is not None
            else None
        ),
    )


def write_report(run: RunContext, result: OptimizationResult) -> None:
    """``report.json`` and ``report.txt`` in the run directory, each written atomically."""
    write_json(run.directory / "report.json", result)
    text = "\n".join(report_lines(result)) + "\n"
    write_bytes(run.directory / "report.txt", text.encode())
