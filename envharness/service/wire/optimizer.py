"""Wire types of harness versions and optimizer runs in the service's API.

Like :mod:`.sessions`, these Structs are the single source of the OpenAPI schemas and what the
client decodes with. What the optimizer layer already defines travels as it is: a version as
``envharness harness show --json`` prints it and the optimizer returns and writes it
(:class:`~envharness.optimizer.HarnessVersion`), its code hooks
(:class:`~envharness.optimizer.CodeHook`), and a run read back from its chain
(:class:`~envharness.optimizer.history.RunHistory`, whose ``VersionRecord`` is a version's
evidence). What is new here is the summary a listing needs — a version with its before and
after figures, flat, as a table row wants it — and a diff's answer.
"""

from __future__ import annotations

import msgspec

from envharness.optimizer import CodeHook, MeasurementSummary
from envharness.optimizer.history import RunHistory, VersionRecord
from envharness.optimizer.versions import HarnessVersion

__all__ = [
    "CodeHook",
    "HarnessDiff",
    "HarnessVersion",
    "HarnessVersionDetail",
    "HarnessVersionPage",
    "HarnessVersionSummary",
    "MeasurementFigure",
    "OptimizerRunPage",
    "OptimizerRunSummary",
    "RunHistory",
    "VersionRecord",
    "figure",
]


class MeasurementFigure(msgspec.Struct, frozen=True, kw_only=True):
    """A measurement at a glance: how many scenarios passed, the mean value, its experiment."""

    experiment_id: str | None
    passed: int
    total: int
    mean_reward: float


def figure(summary: MeasurementSummary) -> MeasurementFigure:
    return MeasurementFigure(
        experiment_id=summary.experiment_id,
        passed=summary.passed,
        total=summary.total,
        mean_reward=summary.mean_reward,
    )


class HarnessVersionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One accepted version as the list shows it.

    ``before`` is the harness it was compared with (the baseline, or its parent) and ``after``
    its own rerun, both over the run's training scenarios; ``mean_reward`` is the mean paired
    difference with its bootstrap ``interval`` and the one-sided sign test's ``p_value``.
    """

    version: str
    parent: str | None
    run_id: str
    run_name: str
    environment: str
    digest: str
    created_at: str
    iteration: int
    candidate: int
    hooks: int
    """How many code hooks the (stacked) patch holds."""
    experiment_id: str | None
    before: MeasurementFigure
    after: MeasurementFigure | None
    mean_reward: float
    interval: tuple[float, float] | None
    p_value: float | None
    engineer_tokens: int
    rerun_tokens: int
    seconds: float


class HarnessVersionPage(msgspec.Struct, frozen=True, kw_only=True):
    versions: list[HarnessVersionSummary]
    next_after: str | None
    """Pass as ``after`` for the next page; ``null`` on the last page."""


class OptimizerRunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One optimizer run as the list shows it."""

    id: str
    name: str
    status: str
    reason: str | None
    created_at: str
    updated_at: str
    environment: str
    engineer: str
    iterations: int
    """Iterations decided so far."""
    candidates: int
    """Engineer answers recorded, in every iteration."""
    versions: list[str]
    """The versions it accepted, in order."""
    baseline: MeasurementFigure | None
    final: MeasurementFigure | None


class OptimizerRunPage(msgspec.Struct, frozen=True, kw_only=True):
    runs: list[OptimizerRunSummary]
    next_after: str | None
    """Pass as ``after`` for the next page; ``null`` on the last page."""


class HarnessVersionDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One version: what ``envharness harness show`` prints, its code hooks one by one, its
    run, and the evidence that justified it (before, after, gate checks, the ledger since its
    parent; ``evidence.after.hooks`` counts the hooks that fired in its rerun)."""

    version: HarnessVersion
    hooks: list[CodeHook]
    run: OptimizerRunSummary
    evidence: VersionRecord


class HarnessDiff(msgspec.Struct, frozen=True, kw_only=True):
    """``envharness harness diff OLD NEW``: a unified diff of the two versions' code."""

    old: str
    new: str
    old_digest: str
    new_digest: str
    same: bool
    """Whether the two versions have the same hooks (then ``lines`` is empty)."""
    lines: list[str]
