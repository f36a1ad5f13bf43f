"""The acceptance gate: each candidate's verdict, then the one selected.

A candidate's rerun is compared with the accepted harness's over the same scenarios and seeds
(:func:`compare`, the statistics of :mod:`envharness.optimizer.stats`). It is eligible when its
mean paired reward exceeds ``min_improvement``, it breaks no scenario the accepted harness
solved, and the one-sided sign test's p-value is at most ``alpha / m`` for the m distinct
patches measured in the iteration (Bonferroni). The best eligible candidate must then hold on
the regression suite and the held-out split (:func:`select`); every other one is rejected with
why, and every solved scenario a candidate broke goes into the regression ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import msgspec

from envharness.contracts.scenario import Scenario
from envharness.optimizer.context import MeasuredRole, RunContext
from envharness.optimizer.measure import crashed
from envharness.optimizer.rerun import candidate_version
from envharness.optimizer.results import LedgerEntry
from envharness.optimizer.state import Proposed, RunState
from envharness.optimizer.stats import PairedComparison, paired_comparison
from envharness.records import CandidateVerdict, OptimizerMeasured

__all__ = ["Selection", "add_to_ledger", "compare", "select", "unmeasured", "verdict"]


class Selection(NamedTuple):
    """What an iteration decided: the chosen candidate (or ``None``), every verdict in
    candidate order, the reason in words, and the gate checks that were measured."""

    chosen: Proposed | None
    verdicts: list[CandidateVerdict]
    reason: str
    checks: list[OptimizerMeasured]


def compare(
    run: RunContext, result: OptimizerMeasured, reference: OptimizerMeasured, key: str
) -> PairedComparison:
    """``result`` - ``reference`` per scenario, with the run's seeded bootstrap and sign test
    (the bootstrap's seed is keyed by the run, the reference and ``key``: reproducible). With a
    metric, a scenario where the patch's code failed gains nothing (:func:`crashed`)."""
    return paired_comparison(
        result.values,
        reference.values,
        seed=run.config.seed,
        key=f"{run.run_id}:{reference.digest}:{key}",
        confidence=run.config.confidence,
        resamples=run.config.resamples,
        failed=crashed(result.failures, run.config.metric),
    )


def unmeasured(result: OptimizerMeasured) -> bool:
    """The rerun says nothing about the patch (the experiment or the sandbox failed)."""
    return result.error is not None or "infrastructure" in result.failures.values()


def verdict(
    run: RunContext,
    item: Proposed,
    measured: dict[str, OptimizerMeasured],
    unique: dict[str, Proposed],
    state: RunState,
) -> CandidateVerdict:
    """One candidate's verdict on the training scenarios (``accepted`` means eligible)."""
    record = item.record
    index = record.candidate
    if record.error is not None:
        status: Literal["failed", "infrastructure"] = (
            "infrastructure" if record.error.startswith("infrastructure") else "failed"
        )
        return CandidateVerdict(candidate=index, status=status, reason=record.error)
    if record.problem is not None or record.digest is None:
        return CandidateVerdict(
            candidate=index,
            status="invalid",
            reason=record.problem or "no patch",
            mean_reward=0.0,
        )
    result = measured[record.digest]
    duplicate = unique[record.digest].record.candidate
    same = f" (same patch as candidate {duplicate}, measured once)" if duplicate != index else ""
    if unmeasured(result):
        why = result.error.message if result.error else "a hook call could not be run"
        return CandidateVerdict(
            candidate=index,
            status="infrastructure",
            reason=f"the rerun could not be measured: {why}{same}",
            digest=record.digest,
        )
    comparison = compare(run, result, state.reference, record.digest)
    solved = run.config.solved
    regressions = tuple(
        s for s in comparison.worsened if (state.reference.values.get(s) or 0.0) >= solved
    )
    crashed = sorted(s for s, why in result.failures.items() if why == "patch")
    crash_note = f"; the patch's hooks failed in {', '.join(crashed)}" if crashed else ""
    alpha = run.config.alpha
    if regressions:
        reason = f"breaks previously solved scenario(s): {', '.join(regressions)}"
    elif comparison.mean <= run.config.min_improvement:
        reason = f"no improvement (mean reward {comparison.mean:+.3f})"
    elif alpha is not None and comparison.p_value > (threshold := alpha / len(unique)):
        reason = (
            f"not significant: sign test p={comparison.p_value:.3g} > alpha "
            f"{alpha}/{len(unique)} distinct candidate"
            f"{'s' if len(unique) != 1 else ''} = {threshold:.3g} "
            f"({len(comparison.improved)} improved, {len(comparison.worsened)} worsened)"
        )
    else:
        reason = ""
    return CandidateVerdict(
        candidate=index,
        status="rejected" if reason else "accepted",
        reason=(reason or f"improves {len(comparison.improved)} scenario(s)") + crash_note + same,
        digest=record.digest,
        mean_reward=comparison.mean,
        interval=comparison.interval,
        p_value=comparison.p_value,
        improved=comparison.improved,
        regressions=regressions,
    )


async def select(
    run: RunContext,
    iteration: int,
    verdicts: list[CandidateVerdict],
    unique: dict[str, Proposed],
    state: RunState,
) -> Selection:
    """The best eligible candidate that also holds on the regression suite and held-out
    split; every other eligible one is marked rejected, with why."""
    eligible = sorted(
        (v for v in verdicts if v.status == "accepted"),
        key=lambda v: (-(v.mean_reward or 0.0), v.candidate),
    )
    final = {v.candidate: v for v in verdicts}
    checks: list[OptimizerMeasured] = []
    chosen: Proposed | None = None
    seen: set[str] = set()
    for eligible_one in eligible:
        digest = eligible_one.digest or ""
        if digest in seen:  # a duplicate of one already judged
            final[eligible_one.candidate] = msgspec.structs.replace(
                eligible_one, status="rejected", reason="the same patch as an earlier candidate"
            )
            continue
        seen.add(digest)
        if chosen is not None:
            final[eligible_one.candidate] = msgspec.structs.replace(
                eligible_one,
                status="rejected",
                reason=f"candidate {chosen.record.candidate} was chosen (its reward was "
                f"higher, or equal and it ranked first; this one: {eligible_one.reason})",
            )
            continue
        item = unique[digest]
        problem = await _gates(run, iteration, item, state, checks)
        if problem is not None:
            final[eligible_one.candidate] = msgspec.structs.replace(
                eligible_one, status="rejected", reason=problem
            )
            continue
        chosen = item
    ordered = [final[v.candidate] for v in verdicts]
    return Selection(chosen, ordered, _reason(chosen, final, ordered, state), checks)


def _reason(
    chosen: Proposed | None,
    final: dict[int, CandidateVerdict],
    ordered: list[CandidateVerdict],
    state: RunState,
) -> str:
    if chosen is not None:
        best = final[chosen.record.candidate]
        return (
            f"accepted candidate {chosen.record.candidate}: mean reward "
            f"{best.mean_reward or 0.0:+.3f} over {state.version or 'the unpatched harness'}"
        )
    if not ordered:
        return "the engineer proposed nothing"
    counts: dict[str, int] = {}
    for one in ordered:
        counts[one.status] = counts.get(one.status, 0) + 1
    return (
        "no candidate accepted ("
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        + ")"
    )


async def _gates(
    run: RunContext,
    iteration: int,
    item: Proposed,
    state: RunState,
    checks: list[OptimizerMeasured],
) -> str | None:
    """The regression suite, then the held-out split; the problem, or ``None``."""
    assert item.stacked is not None
    assert item.record.digest is not None
    stacked, candidate = item.stacked, item.record.candidate
    solved = run.config.solved

    async def rerun(role: MeasuredRole, suite: list[Scenario[Any]]) -> OptimizerMeasured | None:
        """The candidate on ``suite``, noted in ``checks``; ``None`` when it says nothing."""
        version = candidate_version(stacked.digest())
        result = await run.measure(role, iteration, suite, stacked, version, candidate)
        checks.append(result)
        return None if unmeasured(result) else result

    if run.suites.regression and state.suite is not None:
        result = await rerun("regression", run.suites.regression)
        if result is None:
            return "the regression suite could not be measured"
        before = state.suite.values
        broken = [
            s.id
            for s in run.suites.regression
            if (before.get(s.id) or 0.0) >= solved
            and (result.values.get(s.id) or 0.0) < (before.get(s.id) or 0.0)
        ]
        add_to_ledger(state, iteration, candidate, broken, "regression")
        if broken:
            return f"breaks the regression suite: {', '.join(broken)}"
    if run.suites.held_out and state.held is not None:
        result = await rerun("held_out", run.suites.held_out)
        if result is None:
            return "the held-out split could not be measured"
        comparison = compare(run, result, state.held, f"held:{item.record.digest}")
        broken = [s for s in comparison.worsened if (state.held.values.get(s) or 0.0) >= solved]
        add_to_ledger(state, iteration, candidate, broken, "held_out")
        if broken or comparison.mean < 0:
            return (
                f"worse on the held-out split (mean {comparison.mean:+.3f}"
                + (f"; breaks {', '.join(broken)}" if broken else "")
                + ")"
            )
    return None


def add_to_ledger(
    state: RunState,
    iteration: int,
    candidate: int,
    broken: Sequence[str],
    suite: str = "scenarios",
) -> None:
    """Note in the regression ledger the solved scenarios of ``suite`` a candidate broke."""
    state.ledger.extend(
        LedgerEntry(iteration=iteration, candidate=candidate, scenario=s, suite=suite)
        for s in broken
    )
