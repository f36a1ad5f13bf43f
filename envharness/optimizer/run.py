"""One optimizer run, step by step: baseline, then iterations until done.

:func:`execute` measures the baseline (refusing an environment that never says whether a
session passed), then runs each iteration — failure packet, proposals, reruns, verdicts,
selection, acceptance — and records how the run ended (``optimizer.status``) whatever happens,
shielded from cancellation. An iteration whose engineer offers nothing new — every valid
answer a patch already judged on the same accepted harness, every invalid one an answer already
given — ends the run ("found no new candidates; stopping after iteration N"): the next one
would only repeat it. The steps live in their own modules: asking the engineer
(:mod:`~envharness.optimizer.proposals`), judging (:mod:`~envharness.optimizer.gate`), accepting
(:mod:`~envharness.optimizer.accept`) and reporting (:mod:`~envharness.optimizer.report`).
"""

from __future__ import annotations

from typing import Literal

import anyio

from envharness.errors import ConfigurationError, EnvharnessError
from envharness.optimizer.accept import accept
from envharness.optimizer.context import RunContext
from envharness.optimizer.engineers.contract import FailurePacket
from envharness.optimizer.engineers.evidence import experiment_traces
from envharness.optimizer.engineers.packets import build_packet
from envharness.optimizer.gate import (
    add_to_ledger,
    distinct_outcomes,
    repeated,
    select,
    verdict,
)
from envharness.optimizer.measure import subset
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.proposals import propose
from envharness.optimizer.report import run_result, write_report
from envharness.optimizer.rerun import candidate_version, error_info
from envharness.optimizer.results import (
    IterationReport,
    OptimizationResult,
    cut_by_turn_limit,
    cut_note,
    summarize,
)
from envharness.optimizer.state import Proposed, RunState, Spent
from envharness.records import Cost, OptimizerDecision, OptimizerMeasured, OptimizerStatus

__all__ = ["execute"]


async def execute(run: RunContext) -> OptimizationResult:
    """Run (or finish) the run to its end; its chain records how it ended."""
    run.directory.mkdir(parents=True, exist_ok=True)
    if run.reruns.note is not None:
        run.say(run.reruns.note)
    try:
        state = await _baseline(run)
        stopped: str | None = None
        for iteration in range(1, run.config.iterations + 1):
            if run.config.stop_when_solved and run.solved_all(state.reference):
                run.say(f"every scenario is solved; stopping before iteration {iteration}")
                break
            stopped = await _iteration(run, iteration, state)
            write_report(run, run_result(run, state, "running", None))
            if stopped is not None:
                break
    except BaseException as exc:
        status, reason = _ending(exc)
        with anyio.CancelScope(shield=True):
            await run.append(
                OptimizerStatus(
                    status=status,
                    reason=reason,
                    error=error_info(exc) if status == "failed" else None,
                )
            )
        raise
    await run.append(OptimizerStatus(status="completed", reason=stopped))
    result = run_result(run, state, "completed", stopped)
    write_report(run, result)
    run.say(
        f"done: {result.baseline.passed}/{result.baseline.total} -> "
        f"{result.final.passed}/{result.final.total}"
        + (f", {result.accepted_version}" if result.accepted_version else ", no version")
    )
    return result


# -- baseline ------------------------------------------------------------------------------------


async def _baseline(run: RunContext) -> RunState:
    base = run.base or HarnessPatch()
    version = run.base_version
    suites = run.suites
    everything = suites.train + suites.held_out + suites.regression
    measured = await run.measure("baseline", 0, everything, base, version, None)
    if measured.error is not None:
        raise EnvharnessError(
            f"the baseline could not be measured: {measured.error.type}: {measured.error.message}"
        )
    await _require_signal(run, measured)
    train, held, suite = suites.ids()
    state = RunState(
        patch=base,
        version=version,
        reference=subset(measured, train),
        held=subset(measured, held) if held else None,
        suite=subset(measured, suite) if suite else None,
    )
    summary = summarize(state.reference, solved=run.config.solved, version=version)
    run.say(
        f"baseline: {summary.passed}/{summary.total} passed "
        f"(mean {summary.mean_reward:.3f}) [{measured.experiment_id}]"
    )
    if cut := cut_by_turn_limit(measured):
        run.say(f"warning: {cut_note(cut)}")
    return state


async def _require_signal(run: RunContext, measured: OptimizerMeasured) -> None:
    """Refuse an environment that never said whether a session passed — before the engineer is
    asked for anything."""
    if measured.experiment_id is None:
        return
    metric = run.config.metric
    traces = await experiment_traces(run.store, measured.experiment_id)
    if metric is None:
        silent = bool(traces) and all(t.passed is None for t in traces)
    else:
        silent = bool(traces) and all(metric not in t.metrics for t in traces)
    if not silent:
        return
    failed = [t for t in traces if t.status != "completed"]
    if len(failed) == len(traces):  # nothing was scored because nothing finished
        first = failed[0]
        raise ConfigurationError(
            f"every baseline session ended {first.status} ({len(traces)} sessions), so "
            f"nothing was scored; the first, {first.session_id}: "
            f"{first.reason or 'no reason recorded'} "
            f"(envharness sessions show {first.session_id}); "
            "fix the environment or agents before optimizing"
        )
    if metric is None:
        raise ConfigurationError(
            f"environment {run.environment_name}'s score() never reported `passed` in "
            f"the baseline ({len(traces)} sessions); the optimizer needs a success signal:"
            " return ScoreReport(metrics=..., passed=True/False), or optimize a metric "
            "(OptimizationConfig(metric=...); envharness optimize --metric NAME)"
        )
    raise ConfigurationError(f"no baseline session's score has the metric {metric!r}")


# -- one iteration -------------------------------------------------------------------------------


async def _iteration(run: RunContext, iteration: int, state: RunState) -> str | None:
    """Run (or replay) one iteration; the reason to stop the run after it, if any."""
    started = anyio.current_time()
    recorded = run.memo.decisions.get(iteration)
    packet = await _packet(run, state)
    proposed = await propose(run, iteration, packet, state)
    judged = repeated(run, iteration)
    unique: dict[str, Proposed] = {}
    for item in proposed:
        digest = item.record.digest
        if item.stacked is not None and digest is not None and digest not in judged:
            unique.setdefault(digest, item)
    stop = None
    if not unique and _nothing_new(run, iteration, proposed):
        stop = f"found no new candidates; stopping after iteration {iteration - 1}"
    measured = await _rerun(run, iteration, unique)
    behaviours = distinct_outcomes(run, unique, measured)
    tests = len(set(behaviours.values()))
    verdicts = [
        verdict(run, item, measured, unique, state, tests=tests, judged=judged) for item in proposed
    ]
    for judged_one in verdicts:
        if judged_one.digest is not None:
            add_to_ledger(
                state, iteration, judged_one.candidate, judged_one.regressions,
                digest=judged_one.digest,
            )  # fmt: skip
    chosen, verdicts, reason, checks = await select(run, iteration, verdicts, unique, state)
    reason = stop or reason
    spent = Spent(
        engineer_tokens=sum(_tokens(c) for c in run.memo.costs.get(iteration, [])),
        rerun_tokens=sum(
            m.tokens for m in [*measured.values(), *checks] if m.iteration == iteration
        ),
        seconds=anyio.current_time() - started,
    )
    if recorded is not None:  # replayed: what the iteration spent is what it recorded
        spent = Spent(recorded.engineer_tokens, recorded.rerun_tokens, recorded.seconds)
    else:
        await run.append(
            OptimizerDecision(
                iteration=iteration,
                verdicts=tuple(verdicts),
                selected=chosen.record.candidate if chosen is not None else None,
                reason=reason,
                engineer_tokens=spent.engineer_tokens,
                rerun_tokens=spent.rerun_tokens,
                seconds=spent.seconds,
            )
        )
    state.spent.add(spent)
    version = None
    if chosen is not None:
        version = await accept(run, iteration, chosen, measured, checks, state)
    reruns = [m for m in [*measured.values(), *checks] if m.iteration == iteration]
    valid = sum(1 for item in proposed if item.stacked is not None)
    state.iterations.append(
        IterationReport(
            iteration=iteration,
            verdicts=tuple(verdicts),
            selected=chosen.record.candidate if chosen is not None else None,
            accepted_version=version,
            reason=reason,
            engineer_tokens=spent.engineer_tokens,
            rerun_tokens=spent.rerun_tokens,
            seconds=spent.seconds,
            hooks={
                item.record.candidate: dict(measured[item.record.digest].hooks)
                for item in proposed
                if item.record.digest is not None and item.record.digest in measured
            },
            reruns=len(reruns),
            reused=valid - sum(1 for m in reruns if m.role == "candidate"),
            behaviours=tests,
        )
    )
    run.say(f"iteration {iteration}: {reason}")
    return stop


def _nothing_new(run: RunContext, iteration: int, proposed: list[Proposed]) -> bool:
    """Whether the engineer's answers only repeat what this accepted harness already got (the
    caller checked that no valid one is new): an invalid answer whose text an earlier
    iteration on the same harness got is no news either. The first iteration on a harness, and
    one where the engineer itself failed every time (an outage may pass), are never nothing
    new."""
    since = max((number for number in run.memo.accepted if number < iteration), default=0)
    if iteration - since < 2:
        return False
    if proposed and all(item.record.error is not None for item in proposed):
        return False
    given = {
        record.text
        for number in range(since + 1, iteration)
        for record in run.memo.proposals.get(number, [])
    }
    return all(
        item.record.error is not None or item.stacked is not None or item.record.text in given
        for item in proposed
    )


async def _packet(run: RunContext, state: RunState) -> FailurePacket:
    """The failure packet of the accepted harness's sessions of the training scenarios."""
    experiment_id = state.reference.experiment_id
    traces = await experiment_traces(run.store, experiment_id) if experiment_id else []
    wanted = {s.id for s in run.suites.train}
    return await build_packet(
        run.store,
        [t for t in traces if t.scenario_id in wanted],
        run.environment,
        metric=run.config.metric,
        solved=run.config.solved,
        current_patch=state.patch.to_dict() if state.patch.hooks else None,
    )


async def _rerun(
    run: RunContext, iteration: int, unique: dict[str, Proposed]
) -> dict[str, OptimizerMeasured]:
    """Each distinct valid candidate rerun on the training scenarios, ``capacity`` at once,
    the executor's workers split among as many as run at once (a lone one takes them all:
    :mod:`~envharness.optimizer.shares`), recorded in candidate order whichever rerun ends
    first (the scheduler decides that — trio even at capacity 1 — and the chain must not
    depend on it)."""
    measured: dict[str, OptimizerMeasured] = {}
    items = list(unique.values())
    recorded = [anyio.Event() for _ in items]
    batch = run.reruns.among(
        sum(
            1
            for item in items
            if item.stacked is not None and not run.recorded("candidate", item.stacked)
        )
    )

    async def evaluate(index: int, item: Proposed) -> None:
        assert item.stacked is not None
        assert item.record.digest is not None
        try:
            measured[item.record.digest] = await run.measure(
                "candidate",
                iteration,
                run.suites.train,
                item.stacked,
                candidate_version(item.record.digest),
                item.record.candidate,
                batch=batch,
                after=recorded[index - 1] if index else None,
            )
        finally:
            recorded[index].set()

    async with anyio.create_task_group() as group:
        for index, item in enumerate(items):
            group.start_soon(evaluate, index, item)
    return measured


def _tokens(cost: Cost) -> int:
    return (cost.input_tokens or 0) + (cost.output_tokens or 0)


def _ending(exc: BaseException) -> tuple[Literal["stopped", "failed"], str]:
    if isinstance(exc, anyio.get_cancelled_exc_class() | KeyboardInterrupt):
        return "stopped", "the run was stopped"
    return "failed", f"{type(exc).__name__}: {exc}"
