"""What an optimizer run holds between its steps: the accepted harness and what it has spent.

The loop's state is a projection of the run's chain: each field is built from records the loop
committed before acting (:mod:`envharness.optimizer.runlog`), so a resumed run rebuilds the same
state by replaying them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.results import HarnessVersion, IterationReport, LedgerEntry
from envharness.records import OptimizerMeasured, OptimizerProposal

__all__ = ["Proposed", "RunState", "Spent"]


@dataclass(slots=True)
class Proposed:
    """A recorded proposal and, when valid, the stacked patch it makes."""

    record: OptimizerProposal
    stacked: HarnessPatch | None = None


@dataclass(slots=True)
class Spent:
    """What iterations spent: the engineer's tokens, the reruns' tokens, wall-clock seconds."""

    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0

    def add(self, other: Spent) -> None:
        self.engineer_tokens += other.engineer_tokens
        self.rerun_tokens += other.rerun_tokens
        self.seconds += other.seconds


@dataclass(slots=True)
class RunState:
    """The accepted harness so far and its measurements (train, held-out, regression), the
    versions and iterations so far, the regression ledger (and which patch broke which scenario
    of which suite, so each is noted once), and what was spent since the last accepted
    version."""

    patch: HarnessPatch
    version: str | None
    reference: OptimizerMeasured
    held: OptimizerMeasured | None = None
    suite: OptimizerMeasured | None = None
    versions: list[HarnessVersion] = field(default_factory=list)
    iterations: list[IterationReport] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    ledgered: set[tuple[str, str, str]] = field(default_factory=set)
    spent: Spent = field(default_factory=Spent)
