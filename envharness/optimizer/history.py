"""An optimizer run read back from its chain: its iterations, candidates, versions and ledger.

The loop keeps what it learns in memory and writes it as records (``optimizer.proposal``,
``.measured``, ``.decision``, ``.accepted``); :func:`run_history` reads those records and derives
the same picture without running anything — what the viewer and the API show of a run, for a
run that completed, failed, stopped or is still going. Nothing here is a second source of truth:
every figure is a record's, or is computed from records the way the loop computes it —

- a measurement's figures (passed, mean) over the scenarios of its suite, a scenario counting as
  passed at the configuration's ``solved`` value;
- each version's **before** (the accepted harness it was compared with: the baseline, or the
  parent's rerun) and **after** (its own rerun, the experiment that justified it);
- the **regression ledger**: the solved scenarios each candidate broke — in the training
  scenarios (the verdicts' ``regressions``), in the regression suite and in the held-out split
  (each check's values against those of the harness accepted at the time) — each patch's
  breaks once, however often it was proposed.
"""

from __future__ import annotations

from typing import Any

import msgspec

from envharness.errors import EnvharnessError
from envharness.optimizer.measure import outcome_vector, unmeasured
from envharness.optimizer.results import LedgerEntry, MeasurementSummary, summarize
from envharness.optimizer.runlog import RunMemo, read_run
from envharness.records import (
    CandidateVerdict,
    OptimizerConfigRef,
    OptimizerDecision,
    OptimizerMeasured,
)
from envharness.store import OptimizerRunInfo
from envharness.store.locate import AnyStore

__all__ = [
    "CandidateRecord",
    "IterationRecord",
    "RunHistory",
    "VersionRecord",
    "run_history",
    "summarize",
]


class CandidateRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One engineer answer of one iteration: what it proposed, how it was measured, its verdict.

    ``patch`` is the candidate's own patch (JSON of a ``HarnessPatch``), ``digest`` that of the
    patch stacked on the accepted harness; ``verdict`` is ``None`` until the iteration is
    decided. ``rerun`` is the candidate's rerun over the training scenarios and ``checks`` its
    regression-suite and held-out measurements, when the gates measured it.
    """

    candidate: int
    engineer: str
    answer: str
    error: str | None = None
    problem: str | None = None
    patch: dict[str, Any] | None = None
    digest: str | None = None
    verdict: CandidateVerdict | None = None
    rerun: MeasurementSummary | None = None
    checks: tuple[MeasurementSummary, ...] = ()


class IterationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One iteration: its candidates, on top of which version, and what was decided."""

    iteration: int
    base_version: str | None
    """The accepted version its candidates were stacked on (``None``: the unpatched harness)."""
    candidates: tuple[CandidateRecord, ...]
    decided: bool
    selected: int | None = None
    accepted_version: str | None = None
    reason: str = ""
    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0
    reruns: int = 0
    """Rerun experiments recorded for this iteration (candidates and gate checks)."""
    reused: int = 0
    """Valid candidates judged without a rerun of their own (a duplicate patch, or one judged in
    an earlier iteration on the same harness)."""
    behaviours: int = 0
    """Distinct outcome vectors its candidate reruns measured (the significance gate's m)."""


class VersionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A version as its run justified it: the measurement it was compared with (``before``),
    its own rerun (``after``), its gate checks, and the ledger of the iterations since its
    parent (the candidates rejected on the way for breaking a solved scenario).

    This is a version's evidence, derived by replaying the whole run; the version itself is a
    :class:`~envharness.optimizer.results.HarnessVersion`, read from its record alone. The few
    fields they share name which version the evidence is of, so a run lists its versions
    without reading each one."""

    version: str
    parent: str | None
    iteration: int
    candidate: int
    digest: str
    experiment_id: str | None
    before: MeasurementSummary
    after: MeasurementSummary | None
    checks: tuple[MeasurementSummary, ...] = ()
    improved: tuple[str, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()


class RunHistory(msgspec.Struct, frozen=True, kw_only=True):
    """An optimizer run as its chain tells it."""

    id: str
    name: str
    status: str
    reason: str | None
    created_at: str
    updated_at: str
    environment: str
    engineer: str
    config: OptimizerConfigRef
    baseline: MeasurementSummary | None
    """The unpatched (or base) harness on the training scenarios."""
    final: MeasurementSummary | None
    """The latest accepted harness on the training scenarios (the baseline when none was)."""
    held_out: MeasurementSummary | None = None
    iterations: tuple[IterationRecord, ...] = ()
    versions: tuple[VersionRecord, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()


async def run_history(store: AnyStore, run_id: str) -> RunHistory:
    """The run ``run_id`` (an id or unique prefix) read from its chain; :class:`NotFoundError`
    when there is none, :class:`EnvharnessError` when its chain has no configuration."""
    info, chain = await read_run(store, run_id)
    config = chain.config
    if config is None:
        raise EnvharnessError(f"optimizer run {info.id} has no recorded configuration")
    return _History(info, config, chain).build()


class _History:
    """Replays a run's records in the loop's order: baseline, then each iteration's candidates,
    checks, decision and acceptance."""

    def __init__(self, info: OptimizerRunInfo, config: OptimizerConfigRef, chain: RunMemo) -> None:
        self.info, self.config, self.chain = info, config, chain
        self.solved = config.solved
        self.by_key: dict[tuple[str, str | None], OptimizerMeasured] = {
            (m.role, m.digest): m for m in chain.measured
        }
        self.ledgered: set[tuple[str, str, str]] = set()

    def measurement(self, role: str, digest: str | None) -> OptimizerMeasured | None:
        return self.by_key.get((role, digest))

    def summary(self, measured: OptimizerMeasured, version: str | None) -> MeasurementSummary:
        suites = {"held_out": self.config.held_out, "regression": self.config.regression}
        return summarize(
            measured, suites.get(measured.role, self.config.scenarios), self.solved,
            version=version,
        )  # fmt: skip

    def build(self) -> RunHistory:
        config = self.config
        baseline = next((m for m in self.chain.measured if m.role == "baseline"), None)
        reference = suite = held = None
        if baseline is not None:
            reference = summarize(baseline, config.scenarios, self.solved,
                                  version=config.base_version)  # fmt: skip
            suite = summarize(baseline, config.regression, self.solved, version=None)
            held = summarize(baseline, config.held_out, self.solved, version=config.base_version)
        first = reference
        version = config.base_version
        ledger: list[LedgerEntry] = []
        iterations: list[IterationRecord] = []
        versions: list[VersionRecord] = []
        numbers = sorted({*self.chain.proposals, *self.chain.decisions})
        for number in numbers:
            decision = self.chain.decisions.get(number)
            found = self._ledger(number, decision, suite, held)
            ledger.extend(found)
            iterations.append(self._iteration(number, decision, version))
            accepted = self.chain.accepted.get(number)
            if accepted is None or reference is None:
                continue
            rerun = self.measurement("candidate", accepted.digest)
            after = self.summary(rerun, accepted.version) if rerun is not None else None
            since = [e for e in ledger if e.iteration > (versions[-1].iteration if versions else 0)]
            verdict = next(
                (v for v in decision.verdicts if v.candidate == accepted.candidate), None
            ) if decision is not None else None  # fmt: skip
            versions.append(
                VersionRecord(
                    version=accepted.version, parent=accepted.parent, iteration=number,
                    candidate=accepted.candidate, digest=accepted.digest,
                    experiment_id=accepted.experiment_id, before=reference, after=after,
                    checks=self._checks(accepted.digest, accepted.version),
                    improved=verdict.improved if verdict is not None else (),
                    ledger=tuple(since),
                )
            )  # fmt: skip
            version = accepted.version
            if after is not None:
                reference = after
            for role in ("regression", "held_out"):
                check = self.measurement(role, accepted.digest)
                if check is None:
                    continue
                if role == "regression":
                    suite = self.summary(check, accepted.version)
                else:
                    held = self.summary(check, accepted.version)
        return RunHistory(
            id=self.info.id, name=self.info.name, status=self.info.status,
            reason=self.info.reason, created_at=self.info.created_at,
            updated_at=self.info.updated_at,
            environment=f"{config.environment.name}@{config.environment.version}",
            engineer=f"{config.engineer} ({config.engineer_version})", config=config,
            baseline=first, final=reference,
            held_out=held if config.held_out else None,
            iterations=tuple(iterations), versions=tuple(versions), ledger=tuple(ledger),
        )  # fmt: skip

    def _iteration(
        self, number: int, decision: OptimizerDecision | None, base: str | None
    ) -> IterationRecord:
        verdicts = {v.candidate: v for v in decision.verdicts} if decision is not None else {}
        candidates = []
        for proposal in self.chain.proposals.get(number, []):
            rerun = self.measurement("candidate", proposal.digest) if proposal.digest else None
            candidates.append(
                CandidateRecord(
                    candidate=proposal.candidate, engineer=proposal.engineer,
                    answer=proposal.text, error=proposal.error, problem=proposal.problem,
                    patch=proposal.patch, digest=proposal.digest,
                    verdict=verdicts.get(proposal.candidate),
                    rerun=self.summary(rerun, rerun.version) if rerun is not None else None,
                    checks=self._checks(proposal.digest, None) if proposal.digest else (),
                )
            )  # fmt: skip
        accepted = self.chain.accepted.get(number)
        reruns = [m for m in self.chain.measured if m.iteration == number and m.role != "baseline"]
        own = [m for m in reruns if m.role == "candidate"]
        behaviours = {
            outcome_vector(m, self.config.scenarios, self.config.metric)
            for m in own
            if not unmeasured(m)
        }
        economy = IterationRecord(
            iteration=number, base_version=base, candidates=tuple(candidates), decided=False,
            reruns=len(reruns),
            reused=sum(1 for c in candidates if c.digest is not None) - len(own),
            behaviours=len(behaviours),
        )  # fmt: skip
        if decision is None:
            return economy
        return msgspec.structs.replace(
            economy, decided=True, selected=decision.selected,
            accepted_version=accepted.version if accepted is not None else None,
            reason=decision.reason, engineer_tokens=decision.engineer_tokens,
            rerun_tokens=decision.rerun_tokens, seconds=decision.seconds,
        )  # fmt: skip

    def _checks(self, digest: str, version: str | None) -> tuple[MeasurementSummary, ...]:
        found = []
        for role in ("regression", "held_out"):
            check = self.measurement(role, digest)
            if check is not None:
                found.append(self.summary(check, version or check.version))
        return tuple(found)

    def _ledger(
        self,
        number: int,
        decision: OptimizerDecision | None,
        suite: MeasurementSummary | None,
        held: MeasurementSummary | None,
    ) -> list[LedgerEntry]:
        """The solved scenarios the candidates of iteration ``number`` broke, each patch's
        breaks noted once (as the loop notes them: a duplicate adds nothing)."""
        found: list[LedgerEntry] = []

        def note(digest: str | None, candidate: int, scenario: str, role: str) -> None:
            key = (digest or f"candidate {number}:{candidate}", scenario, role)
            if key not in self.ledgered:
                self.ledgered.add(key)
                found.append(
                    LedgerEntry(iteration=number, candidate=candidate, scenario=scenario,
                                suite=role)
                )  # fmt: skip

        for verdict in decision.verdicts if decision is not None else ():
            for scenario in verdict.regressions:
                note(verdict.digest, verdict.candidate, scenario, "scenarios")
        for role, reference in (("regression", suite), ("held_out", held)):
            if reference is None:
                continue
            for check in self.chain.measured:
                if check.role != role or check.iteration != number or check.candidate is None:
                    continue
                for scenario, before in reference.values.items():
                    if (before or 0.0) >= self.solved and (check.values.get(scenario) or 0.0) < (
                        before or 0.0
                    ):
                        note(check.digest, check.candidate, scenario, role)
        return found
