"""What one optimizer run works with, and the two things every step does: record, measure.

:class:`RunContext` is fixed for a run's whole length — its configuration, store, chain,
environment, sandbox and suites. Every step of the loop records through :meth:`RunContext.append`
(one writer per chain, in order) and measures through :meth:`RunContext.measure`, which is the
patch cache: a measurement the run's chain already holds (this process's, or a crashed one's) is
never made again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from msgspec import UNSET

from envharness.contracts.environment import Environment
from envharness.contracts.scenario import Scenario
from envharness.optimizer.config import OptimizationConfig, Progress
from envharness.optimizer.engineers.contract import Engineer
from envharness.optimizer.engineers.packets import forbidden_terms_of
from envharness.optimizer.host import HarnessHost
from envharness.optimizer.inputs import Suites
from envharness.optimizer.patches.patch import HarnessPatch
from envharness.optimizer.patches.sandbox import Sandbox
from envharness.optimizer.rerun import rerun_patch
from envharness.optimizer.runlog import RunLog, RunMemo, measurement_key
from envharness.optimizer.shares import RerunBatch, RerunSlots
from envharness.records import OptimizerAccepted, OptimizerMeasured, Payload
from envharness.store.locate import AnyStore

__all__ = ["MeasuredRole", "RunContext"]

MeasuredRole = Literal["baseline", "candidate", "held_out", "regression"]
"""What a rerun measured: the accepted harness, a candidate, or a candidate on a gate suite."""


@dataclass(slots=True, kw_only=True)
class RunContext:
    """One run's fixed inputs (see the module doc); ``harness`` is the open async harness
    (:class:`~envharness.optimizer.host.HarnessHost`), ``base`` the patch the run started from."""

    harness: HarnessHost
    engineer: Engineer
    config: OptimizationConfig
    store: AnyStore
    log: RunLog
    memo: RunMemo
    environment: Environment[Any, Any]
    sandbox: Sandbox
    directory: Path
    suites: Suites
    base: HarnessPatch | None
    base_version: str | None
    progress: Progress | None = None
    terms: tuple[str, ...] = field(init=False)
    environment_name: str = field(init=False)
    reruns: RerunSlots = field(init=False)
    """The run's executor shared by the reruns that run at once, each batch split its way."""
    _lock: anyio.Lock = field(init=False, default_factory=anyio.Lock)

    def __post_init__(self) -> None:
        self.terms = forbidden_terms_of(self.environment)
        spec = self.environment.spec
        self.environment_name = f"{spec.name}@{spec.version}"
        self.reruns = RerunSlots(self.config)

    @property
    def run_id(self) -> str:
        return self.log.run_id

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def solved_all(self, measured: OptimizerMeasured) -> bool:
        return all((v or 0.0) >= self.config.solved for v in measured.values.values())

    async def append(self, *payloads: Payload) -> None:
        """Commit ``payloads`` to the run's chain, in order (concurrent steps take turns)."""
        async with self._lock:
            await self.log.append(*payloads)

    async def accept(
        self, make: Callable[[str], OptimizerAccepted], parent: str | None = None
    ) -> OptimizerAccepted:
        """Commit the version ``make(name)`` under the next free ``harness-vN`` name past
        ``parent``'s (see :meth:`RunLog.accept`)."""
        async with self._lock:
            return await self.log.accept(make, parent=parent)

    def recorded(self, role: MeasuredRole, patch: HarnessPatch) -> OptimizerMeasured | None:
        """The measurement of ``patch`` in ``role`` that the run's chain holds, unless it
        failed for infrastructure reasons (then it is measured again)."""
        digest = patch.digest() if patch.hooks else None
        cached = self.memo.measurements.get(measurement_key(role, digest))
        return cached if cached is not None and cached.error is None else None

    async def measure(
        self,
        role: MeasuredRole,
        iteration: int,
        scenarios: Sequence[Scenario[Any]],
        patch: HarnessPatch,
        version: str | None,
        candidate: int | None,
        *,
        batch: RerunBatch | None = None,
        after: anyio.Event | None = None,
    ) -> OptimizerMeasured:
        """A rerun of ``scenarios`` with ``patch``, recorded — or the one already recorded.

        A recorded measurement that failed for infrastructure reasons is measured again. A
        rerun of a ``batch`` started together (:meth:`RerunSlots.among`) holds its limiter
        while it runs, with its share of the executor's workers; without one it runs alone and
        takes them all. Its record waits for ``after`` (when given) without holding either,
        so reruns that end in any order are recorded in the order the caller chose: the same
        seeds give the same chain."""
        digest = patch.digest() if patch.hooks else None
        key = measurement_key(role, digest)
        cached = self.recorded(role, patch)
        if cached is not None:
            return cached
        label = role if candidate is None else f"{role} {candidate}"
        batch = batch or self.reruns.among(1)
        async with batch.limiter:
            rerun = await rerun_patch(
                self.harness,
                self.store,
                scenarios,
                patch,
                sandbox=self.sandbox,
                config=batch.config,
                name=f"{self.config.name} {self.run_id} iteration {iteration} {label}",
                version=version,
                forbidden_terms=self.terms,
            )
        folded = rerun.measurement
        record = OptimizerMeasured(
            iteration=iteration,
            role=role,
            candidate=candidate,
            digest=digest,
            version=version,
            experiment_id=rerun.experiment_id,
            values=folded.values,
            failures=folded.failures,
            hooks=folded.hooks,
            hook_errors=folded.hook_errors,
            tokens=folded.tokens,
            seconds=rerun.seconds,
            error=folded.error,
            cut=folded.cut or UNSET,
        )
        if after is not None:
            await after.wait()
        await self.append(record)
        self.memo.measurements[key] = record
        return record
