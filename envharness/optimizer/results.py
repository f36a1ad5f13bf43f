"""What an optimizer run returns and writes: the result, the run report and harness versions.

Everything here is a msgspec Struct, so the returned :class:`OptimizationResult` and the files
under the run directory (``report.json``, ``accepted_patch.json``, ``versions/harness-vN.json``)
are the same values. Files are written atomically (a temporary file renamed into place), so a
crash never leaves half a report.

:class:`HarnessVersion` is the one shape of an accepted version: the run returns it, writes it,
and :mod:`envharness.optimizer.versions` reads it back from the store (``envharness harness
show --json``, the service's API) — built in one place, from the version's record.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from envharness.optimizer.patches.patch import HarnessPatch
from envharness.records import CandidateVerdict, OptimizerMeasured

__all__ = [
    "HarnessVersion",
    "IterationReport",
    "LedgerEntry",
    "MeasurementSummary",
    "OptimizationResult",
    "cut_by_turn_limit",
    "cut_note",
    "report_lines",
    "summarize",
    "write_bytes",
    "write_json",
]


class MeasurementSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One measurement: its experiment, harness version and per-scenario values.

    ``mean_reward`` is the mean of ``values`` (the pass rate when scoring by pass/fail).
    """

    role: str
    experiment_id: str | None
    version: str | None
    values: dict[str, float | None]
    mean_reward: float
    passed: int
    total: int
    failures: dict[str, str] = {}
    hooks: dict[str, int] = {}
    hook_errors: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cut: int = 0
    """Sessions the turn limit ended rather than the environment."""


class HarnessVersion(msgspec.Struct, frozen=True, kw_only=True):
    """An accepted harness version: what its ``optimizer.accepted`` record says, where that
    record lies (``run_id``, ``seq``, ``created_at``), the run's ``environment``, and the
    scenarios it ``improved`` (its verdict's, in the run's ``optimizer.decision``).

    ``patch`` is the whole stacked patch, so a version needs nothing else to run. ``mean_reward``
    is the mean paired difference over the accepted harness it stacks on (``parent``), with its
    ``interval`` and sign-test ``p_value``; ``score`` its own mean over the training scenarios
    (``None`` in a record written before scores were recorded); ``engineer_tokens``,
    ``rerun_tokens`` and ``seconds`` are what the iterations since the previous version spent.
    """

    version: str
    run_id: str
    seq: int
    created_at: str
    parent: str | None
    digest: str
    patch: dict[str, Any]
    iteration: int
    candidate: int
    experiment_id: str | None
    mean_reward: float
    interval: tuple[float, float] | None
    p_value: float | None
    score: float | None
    engineer_tokens: int
    rerun_tokens: int
    seconds: float
    environment: str | None = None
    improved: tuple[str, ...] = ()

    def harness_patch(self) -> HarnessPatch:
        return HarnessPatch.from_dict(self.patch)


class LedgerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A previously solved scenario that a candidate broke (the regression ledger)."""

    iteration: int
    candidate: int
    scenario: str
    suite: str = "scenarios"


class IterationReport(msgspec.Struct, frozen=True, kw_only=True):
    """One iteration: every candidate's verdict, what was selected and why, what it spent, and
    ``hooks`` — for each candidate that was rerun, which hooks intervened how often
    (``on_before_action:block_and_prompt`` → n; empty when its hooks never did).

    ``reruns`` is how many rerun experiments the iteration ran (candidates and gate checks),
    ``reused`` how many valid candidates it judged without a rerun of their own (a duplicate
    patch, or one judged in an earlier iteration on the same harness), and ``behaviours`` how
    many distinct outcome vectors its reruns measured (the significance gate's divisor)."""

    iteration: int
    verdicts: tuple[CandidateVerdict, ...]
    selected: int | None
    accepted_version: str | None
    reason: str
    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0
    hooks: dict[int, dict[str, int]] = {}
    reruns: int = 0
    reused: int = 0
    behaviours: int = 0


class OptimizationResult(msgspec.Struct, frozen=True, kw_only=True):
    """How an optimizer run ended: baseline and final measurements, versions, iterations."""

    run_id: str
    status: str
    reason: str | None
    directory: str
    environment: str
    engineer: str
    baseline: MeasurementSummary
    final: MeasurementSummary
    accepted_version: str | None
    versions: tuple[HarnessVersion, ...] = ()
    iterations: tuple[IterationReport, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()
    patch: dict[str, Any] | None = None
    held_out: MeasurementSummary | None = None


def summarize(
    measured: OptimizerMeasured,
    scenarios: Sequence[str] | None = None,
    solved: float = 1.0,
    *,
    version: str | None = None,
) -> MeasurementSummary:
    """One measurement's figures over ``scenarios`` (a suite of it; default: every scenario it
    holds), a scenario counting as passed at ``solved``, named as ``version``: what the loop
    reports and what :mod:`envharness.optimizer.history` reads back, computed one way."""
    chosen = list(measured.values) if scenarios is None else scenarios
    values = {scenario: measured.values.get(scenario) for scenario in chosen}
    filled = [value or 0.0 for value in values.values()]
    return MeasurementSummary(
        role=measured.role,
        experiment_id=measured.experiment_id,
        version=version,
        values=values,
        mean_reward=sum(filled) / len(filled) if filled else 0.0,
        passed=sum(1 for value in filled if value >= solved),
        total=len(filled),
        failures={s: why for s, why in measured.failures.items() if s in values},
        hooks=dict(measured.hooks),
        hook_errors=measured.hook_errors,
        tokens=measured.tokens,
        seconds=measured.seconds,
        cut=cut_by_turn_limit(measured),
    )


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically."""
    write_bytes(path, msgspec.json.format(msgspec.json.encode(value), indent=2) + b"\n")


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def cut_by_turn_limit(measured: OptimizerMeasured) -> int:
    """How many of a measurement's sessions the turn limit ended (none when unrecorded)."""
    return measured.cut if isinstance(measured.cut, int) else 0


def cut_note(cut: int) -> str:
    """What to tell a user whose baseline sessions ran out of turns: their scores judge
    episodes that were cut short, and so will every rerun's (reruns inherit ``turns``)."""
    sessions = "1 baseline session" if cut == 1 else f"{cut} baseline sessions"
    return (
        f"{sessions} ended by the turn limit, not by the environment; reruns play the same "
        "turns: raise the optimizer's turns (--turns) to play whole episodes"
    )


def _figure(summary: MeasurementSummary) -> str:
    return f"{summary.passed}/{summary.total} passed (mean {summary.mean_reward:.3f})"


def _score(score: float | None) -> str:
    return f"{score:.3f}" if score is not None else "unrecorded"


def _fired(hooks: dict[str, int]) -> str:
    """Which hooks intervened in a rerun: the evidence that a patch did anything at all."""
    if not hooks:
        return "; its hooks never intervened"
    return "; hooks fired: " + ", ".join(f"{name} x{n}" for name, n in sorted(hooks.items()))


def report_lines(result: OptimizationResult) -> list[str]:
    """The run report as text (``report.txt`` and what the CLI prints)."""
    lines = [
        f"optimizer run {result.run_id}: {result.status}"
        + (f" ({result.reason})" if result.reason else ""),
        f"environment {result.environment}; engineer {result.engineer}",
        f"baseline: {_figure(result.baseline)}  [{result.baseline.experiment_id}]",
        f"final:    {_figure(result.final)}  [{result.final.version or 'no patch'}]",
    ]
    if result.held_out is not None:
        lines.append(f"held-out: {_figure(result.held_out)}")
    if result.baseline.cut:
        lines.append(f"warning: {cut_note(result.baseline.cut)}")
    for iteration in result.iterations:
        lines.append(
            f"iteration {iteration.iteration}: {iteration.reason}"
            f" (engineer {iteration.engineer_tokens} tokens, reruns {iteration.rerun_tokens}"
            f" tokens, {iteration.seconds:.1f}s; {iteration.reruns} rerun(s), "
            f"{iteration.reused} candidate(s) judged without one)"
        )
        for verdict in iteration.verdicts:
            figures = ""
            if verdict.mean_reward is not None:
                figures = f" reward {verdict.mean_reward:+.3f}"
                if verdict.interval is not None:
                    low, high = verdict.interval
                    figures += f" [{low:+.3f}, {high:+.3f}]"
                if verdict.p_value is not None:
                    figures += f" p={verdict.p_value:.3g}"
            first, *rest = verdict.reason.splitlines() or [""]
            fired = iteration.hooks.get(verdict.candidate)
            if fired is not None:
                first += _fired(fired)
            lines.append(f"  candidate {verdict.candidate}: {verdict.status}{figures} — {first}")
            lines.extend(f"      {line}" for line in rest)
    for version in result.versions:
        interval = (
            f" [{version.interval[0]:+.3f}, {version.interval[1]:+.3f}]" if version.interval else ""
        )
        lines.append(
            f"{version.version} (from {version.parent or 'the unpatched harness'}): reward "
            f"{version.mean_reward:+.3f}{interval}, score {_score(version.score)}; cost: engineer "
            f"{version.engineer_tokens} tokens, reruns {version.rerun_tokens} tokens, "
            f"{version.seconds:.1f}s"
        )
    broken: dict[tuple[int, int, str], list[str]] = {}
    for entry in result.ledger:
        broken.setdefault((entry.iteration, entry.candidate, entry.suite), []).append(
            entry.scenario
        )
    for (number, candidate, suite), scenarios in broken.items():
        lines.append(
            f"regression ledger: iteration {number} candidate {candidate} broke "
            f"{', '.join(scenarios)} ({suite})"
        )
    lines.append(f"run directory: {result.directory}")
    return lines
