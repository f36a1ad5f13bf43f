"""The acceptance gate: each candidate's verdict, then the one selected.

A candidate's rerun is compared with the accepted harness's over the same scenarios and seeds
(:func:`compare`, the statistics of :mod:`envharness.optimizer.stats`). It is eligible when its
mean paired reward exceeds ``min_improvement``, it breaks no scenario the accepted harness
solved, and the one-sided sign test's p-value is at most ``alpha / m`` (Bonferroni), where m
counts the distinct per-scenario **outcome vectors** measured in the iteration, not the
candidates: textual variants that score the same on every training scenario are one test, not
K (:func:`outcomes`). The best eligible candidate must then hold on the regression suite and the
held-out split (:func:`select`); every other one is rejected with why, and every solved scenario
a patch broke goes into the regression ledger once.

A candidate whose stacked patch was already judged in an earlier iteration (the same patch on
the same accepted harness) is not measured or judged again: its verdict points to the earlier
one (:func:`repeated`). Judging it again would only repeat the verdict, or — with fewer
candidates beside it, hence a milder correction — test the same data twice.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import msgspec

from envharness.contracts.scenario import Scenario
from envharness.optimizer.context import MeasuredRole, RunContext
from envharness.optimizer.measure import crashed, outcome_vector, unmeasured
from envharness.optimizer.rerun import candidate_version
from envharness.optimizer.results import LedgerEntry
from envharness.optimizer.state import Proposed, RunState
from envharness.optimizer.stats import PairedComparison, paired_comparison
from envharness.records import CandidateVerdict, OptimizerMeasured

__all__ = [
    "Selection",
    "add_to_ledger",
    "compare",
    "distinct_outcomes",
    "outcomes",
    "repeated",
    "select",
    "unmeasured",
    "verdict",
]


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


def outcomes(run: RunContext, result: OptimizerMeasured) -> Hashable:
    """A rerun's outcome vector on the training scenarios (:func:`outcome_vector`)."""
    return outcome_vector(result, [s.id for s in run.suites.train], run.config.metric)


def distinct_outcomes(
    run: RunContext, unique: Mapping[str, Proposed], measured: Mapping[str, OptimizerMeasured]
) -> dict[str, Hashable]:
    """Each measured distinct patch's outcome vector (patch digest → vector); a rerun that
    could not be measured tested nothing and has none."""
    return {
        digest: outcomes(run, measured[digest])
        for digest in unique
        if digest in measured and not unmeasured(measured[digest])
    }


def repeated(run: RunContext, iteration: int) -> dict[str, OptimizerMeasured]:
    """The stacked patches already judged before ``iteration`` (digest → their rerun): the same
    digest means the same candidate on the same accepted harness, so its verdict would be the
    same. A rerun that could not be measured judged nothing and is not among them."""
    return {
        m.digest: m
        for m in run.memo.measurements.values()
        if m.role == "candidate"
        and m.digest is not None
        and m.iteration < iteration
        and not unmeasured(m)
    }


def verdict(
    run: RunContext,
    item: Proposed,
    measured: Mapping[str, OptimizerMeasured],
    unique: Mapping[str, Proposed],
    state: RunState,
    *,
    tests: int,
    judged: Mapping[str, OptimizerMeasured] | None = None,
) -> CandidateVerdict:
    """One candidate's verdict on the training scenarios (``accepted`` means eligible).

    ``tests`` is the number of distinct outcome vectors measured in the iteration (the
    Bonferroni divisor); ``judged`` the patches judged in earlier iterations
    (:func:`repeated`), whose candidates are rejected without a second measurement."""
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
    earlier = (judged or {}).get(record.digest)
    if earlier is not None:
        return CandidateVerdict(
            candidate=index,
            status="rejected",
            reason=f"already judged in iteration {earlier.iteration} (candidate "
            f"{earlier.candidate}) on the same harness; not measured again",
            digest=record.digest,
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
    tests = max(tests, 1)
    if regressions:
        reason = f"breaks previously solved scenario(s): {', '.join(regressions)}"
    elif comparison.mean <= run.config.min_improvement:
        reason = f"no improvement (mean reward {comparison.mean:+.3f})"
    elif alpha is not None and comparison.p_value > (threshold := alpha / tests):
        reason = (
            f"not significant: sign test p={comparison.p_value:.3g} > alpha "
            f"{alpha}/{tests} distinct outcome{'s' if tests != 1 else ''} = {threshold:.3g} "
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
    split; every other eligible one is marked rejected, with why.

    Each distinct patch is gated, even one whose outcomes on the training scenarios equal
    those of a candidate that failed the gates: the same outcomes there do not make the same
    patch, and the gate suites exist to tell such patches apart (a fix and a variant that also
    breaks a task outside the training scenarios look the same on them)."""
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
    stacked, candidate, digest = item.stacked, item.record.candidate, item.record.digest
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
        add_to_ledger(state, iteration, candidate, broken, "regression", digest=digest)
        if broken:
            return f"breaks the regression suite: {', '.join(broken)}"
    if run.suites.held_out and state.held is not None:
        result = await rerun("held_out", run.suites.held_out)
        if result is None:
            return "the held-out split could not be measured"
        comparison = compare(run, result, state.held, f"held:{item.record.digest}")
        broken = [s for s in comparison.worsened if (state.held.values.get(s) or 0.0) >= solved]
        add_to_ledger(state, iteration, candidate, broken, "held_out", digest=digest)
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
    *,
    digest: str,
) -> None:
    """Note in the regression ledger the solved scenarios of ``suite`` that the patch
    ``digest`` (candidate ``candidate``) broke — once per patch: the same patch proposed again,
    by another candidate or in another iteration, adds nothing."""
    for scenario in broken:
        key = (digest, scenario, suite)
        if key in state.ledgered:
            continue
        state.ledgered.add(key)
        state.ledger.append(
            LedgerEntry(iteration=iteration, candidate=candidate, scenario=scenario, suite=suite)
        )
