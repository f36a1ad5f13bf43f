"""The optimizer run's own chain of evidence, and what a resumed run learns from it.

An optimizer run is a hash chain (id ``opt_…``) like an experiment's, indexed in the store's
``optimizer_runs`` table: ``optimizer.started`` (the frozen configuration), ``optimizer.status``
changes, one ``optimizer.proposal`` per engineer answer (with ``cost`` records for what the
engineer spent), one ``optimizer.measured`` per rerun experiment, one ``optimizer.decision`` per
iteration and one ``optimizer.accepted`` per harness version. Each record is committed before
the loop acts on it, so after a crash :meth:`RunLog.reopen` hands the loop a :class:`RunMemo`
— answers already given, measurements already made, decisions already taken — and nothing
measured is measured again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from envharness.errors import ConfigurationError
from envharness.records import (
    Cost,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerDecision,
    OptimizerMeasured,
    OptimizerProposal,
    OptimizerStarted,
    OptimizerStatus,
    Payload,
    RunnerRef,
    SessionChain,
    Status,
)
from envharness.store import Store
from envharness.store.owners import is_gone, this_process

__all__ = ["RunLog", "RunMemo", "measurement_key"]


def measurement_key(role: str, digest: str | None) -> str:
    """The patch cache's key: what was measured (role) with which stacked patch (digest)."""
    return f"{role}:{digest or 'none'}"


@dataclass(slots=True)
class RunMemo:
    """What an optimizer run's chain already holds (empty for a new run)."""

    config: OptimizerConfigRef | None = None
    status: Status | None = None
    runner: RunnerRef | None = None
    proposals: dict[int, list[OptimizerProposal]] = field(default_factory=dict)
    costs: dict[int, list[Cost]] = field(default_factory=dict)
    measurements: dict[str, OptimizerMeasured] = field(default_factory=dict)
    decisions: dict[int, OptimizerDecision] = field(default_factory=dict)
    accepted: dict[int, OptimizerAccepted] = field(default_factory=dict)


class RunLog:
    """Appends to one optimizer run's chain through the store's single writer."""

    def __init__(self, store: Store, chain: SessionChain) -> None:
        self.store = store
        self._chain = chain

    @property
    def run_id(self) -> str:
        return self._chain.session_id

    @classmethod
    async def start(cls, store: Store, run_id: str, config: OptimizerConfigRef) -> RunLog:
        log = cls(store, SessionChain(run_id))
        await log.append(OptimizerStarted(config=config))
        await log.append(OptimizerStatus(status="running", runner=this_process()))
        return log

    @classmethod
    async def reopen(cls, store: Store, run_id: str) -> tuple[RunLog, RunMemo]:
        """The run's chain, read (nothing is written: call :meth:`resumed` once the caller has
        checked it can go on); refused when it completed or another live process runs it."""
        info = await store.optimizer_run(run_id)
        memo = RunMemo()
        async for record in store.records(info.id):
            payload = record.payload
            if isinstance(payload, OptimizerStarted):
                memo.config = payload.config
            elif isinstance(payload, OptimizerStatus):
                memo.status = payload.status
                memo.runner = payload.runner
            elif isinstance(payload, OptimizerProposal):
                memo.proposals.setdefault(payload.iteration, []).append(payload)
            elif isinstance(payload, Cost) and record.turn is not None:
                memo.costs.setdefault(record.turn, []).append(payload)
            elif isinstance(payload, OptimizerMeasured):
                memo.measurements[measurement_key(payload.role, payload.digest)] = payload
            elif isinstance(payload, OptimizerDecision):
                memo.decisions[payload.iteration] = payload
            elif isinstance(payload, OptimizerAccepted):
                memo.accepted[payload.iteration] = payload
        if memo.config is None:
            raise ConfigurationError(f"optimizer run {info.id} has no recorded configuration")
        if memo.status == "completed":
            raise ConfigurationError(
                f"optimizer run {info.id} already completed; nothing to resume"
            )
        if memo.status == "running" and memo.runner is not None and not is_gone(memo.runner):
            raise ConfigurationError(
                f"optimizer run {info.id} is being run by pid {memo.runner.pid} on "
                f"{memo.runner.host}; resume it once that process has ended"
            )
        log = cls(store, SessionChain(info.id, next_seq=info.head_seq + 1, prev=info.head_digest))
        return log, memo

    async def resumed(self) -> None:
        """Record that this process now runs the reopened run."""
        await self.append(
            OptimizerStatus(status="running", reason="resumed", runner=this_process())
        )

    async def append(self, *payloads: Payload, turn: int | None = None) -> None:
        """Commit ``payloads`` durably, in order, before the caller goes on."""
        await self.store.append([self._chain.seal(p, turn=turn) for p in payloads])

    async def costs(self, iteration: int, costs: Sequence[Cost]) -> None:
        if costs:
            await self.append(*costs, turn=iteration)
