"""The optimizer run's own chain of evidence, and what a resumed run learns from it.

An optimizer run is a hash chain (id ``opt_…``) like an experiment's, indexed in the store's
``optimizer_runs`` table: ``optimizer.started`` (the frozen configuration), ``optimizer.status``
changes, the failure packet each iteration's engineer was shown (an ``artifact`` record named
``failure-packet`` whose turn is the iteration, in the format :data:`PACKET_MEDIA_TYPE`), one
``optimizer.proposal`` per engineer answer (with ``cost`` records for what the engineer spent),
one ``optimizer.measured`` per rerun experiment, one ``optimizer.decision`` per iteration and
one ``optimizer.accepted`` per harness version. Each record is committed before the loop acts on
it, so after a crash :meth:`RunLog.reopen` hands the loop a :class:`RunMemo` — answers already
given, measurements already made, decisions already taken — and nothing measured is measured
again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from envharness.errors import ConfigurationError, EnvharnessError, NameTakenError, StoreError
from envharness.optimizer.engineers.contract import FailurePacket
from envharness.optimizer.versions import next_version_name, numbered_after
from envharness.records import (
    Artifact,
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
from envharness.store import OptimizerRunInfo
from envharness.store.locate import AnyStore
from envharness.store.owners import is_gone, this_process

__all__ = [
    "NAME_TRIES",
    "PACKET_MEDIA_TYPE",
    "PACKET_NAME",
    "RunLog",
    "RunMemo",
    "measurement_key",
    "read_packet",
    "read_run",
]

NAME_TRIES = 100
"""How many names :meth:`RunLog.accept` tries before it gives up (each lost a race)."""
PACKET_NAME = "failure-packet"
"""The ``artifact`` record's name for an iteration's failure packet (its turn: the iteration)."""
PACKET_MEDIA_TYPE = "application/vnd.envharness.failure-packet+json; version=1"
"""The packet's format: the JSON of a :class:`FailurePacket`. Its fields only ever gain
defaults, so version 1 stays readable; a change that is not would be version 2."""
_packet_decoder = msgspec.json.Decoder(FailurePacket)


def measurement_key(role: str, digest: str | None) -> str:
    """The patch cache's key: what was measured (role) with which stacked patch (digest)."""
    return f"{role}:{digest or 'none'}"


@dataclass(slots=True)
class RunMemo:
    """What an optimizer run's chain already holds (empty for a new run).

    ``measurements`` is the patch cache (the latest measurement per role and patch);
    ``measured`` every measurement in the order it was recorded."""

    config: OptimizerConfigRef | None = None
    status: Status | None = None
    runner: RunnerRef | None = None
    proposals: dict[int, list[OptimizerProposal]] = field(default_factory=dict)
    costs: dict[int, list[Cost]] = field(default_factory=dict)
    measurements: dict[str, OptimizerMeasured] = field(default_factory=dict)
    measured: list[OptimizerMeasured] = field(default_factory=list)
    decisions: dict[int, OptimizerDecision] = field(default_factory=dict)
    accepted: dict[int, OptimizerAccepted] = field(default_factory=dict)
    packets: dict[int, Artifact] = field(default_factory=dict)


async def read_run(store: AnyStore, run_id: str) -> tuple[OptimizerRunInfo, RunMemo]:
    """The run ``run_id`` (an id or unique prefix) as its index lists it, and what its chain
    holds — what a resumed run goes on from and what :mod:`envharness.optimizer.history`
    shows, read one way. :class:`~envharness.errors.NotFoundError` when there is no such run."""
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
        elif isinstance(payload, Artifact) and payload.name == PACKET_NAME and record.turn:
            memo.packets[record.turn] = payload
        elif isinstance(payload, OptimizerMeasured):
            memo.measurements[measurement_key(payload.role, payload.digest)] = payload
            memo.measured.append(payload)
        elif isinstance(payload, OptimizerDecision):
            memo.decisions[payload.iteration] = payload
        elif isinstance(payload, OptimizerAccepted):
            memo.accepted[payload.iteration] = payload
    return info, memo


async def read_packet(store: AnyStore, artifact: Artifact) -> FailurePacket:
    """The failure packet a run recorded (``memo.packets[iteration]``), as its engineer saw it.

    :class:`~envharness.errors.EnvharnessError` for a format this version cannot read, or a
    packet missing from the store or changed since (its bytes are checked against the sha256
    the run recorded before they are decoded)."""
    if artifact.media_type != PACKET_MEDIA_TYPE:
        raise EnvharnessError(
            f"the failure packet {artifact.sha256[:12]} is {artifact.media_type!r}, which this "
            f"version of envharness does not read (it reads {PACKET_MEDIA_TYPE!r})"
        )
    data = await store.backend.artifact(artifact.sha256)
    return _packet_decoder.decode(data)


class RunLog:
    """Appends to one optimizer run's chain through the store's single writer."""

    def __init__(self, store: AnyStore, chain: SessionChain) -> None:
        self.store = store
        self._chain = chain

    @property
    def run_id(self) -> str:
        return self._chain.session_id

    @classmethod
    async def start(cls, store: AnyStore, run_id: str, config: OptimizerConfigRef) -> RunLog:
        log = cls(store, SessionChain(run_id))
        await log.append(OptimizerStarted(config=config))
        await log.append(OptimizerStatus(status="running", runner=this_process()))
        return log

    @classmethod
    async def reopen(cls, store: AnyStore, run_id: str) -> tuple[RunLog, RunMemo]:
        """The run's chain, read (nothing is written: call :meth:`resumed` once the caller has
        checked it can go on); refused when it completed or another live process runs it."""
        info, memo = await read_run(store, run_id)
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

    async def accept(
        self,
        make: Callable[[str], OptimizerAccepted],
        *,
        parent: str | None = None,
        tries: int = NAME_TRIES,
    ) -> OptimizerAccepted:
        """Commit the harness version ``make(name)`` under the next free ``harness-vN`` name
        (numbered past ``parent``'s, which may come from another store: :func:`numbered_after`).

        The name is part of the record (its digest covers it), so it is chosen before the
        commit; the store's index refuses a name another run committed in the meantime (in this
        process or another) with :class:`~envharness.errors.NameTakenError`, writing nothing
        and leaving the chain intact, and the record is sealed again under the next free name
        at the same position. Concurrent acceptances therefore get distinct names. The caller
        must not append to this chain until this returns.
        """
        for _ in range(tries):
            payload = make(numbered_after(await next_version_name(self.store), parent))
            chain = SessionChain(self.run_id, next_seq=self._chain.next_seq, prev=self._chain.head)
            try:
                await self.store.append([chain.seal(payload)])
            except NameTakenError:
                continue
            self._chain = chain
            return payload
        raise StoreError(
            f"optimizer run {self.run_id}: {tries} harness version names in a row were taken "
            "by other runs while this one tried to accept; resume the run to try again"
        )

    async def packet(self, iteration: int, packet: FailurePacket) -> Artifact:
        """Keep ``packet`` (what iteration ``iteration``'s engineer is about to be shown) as an
        artifact and record it in the chain: the evidence of what each answer answered."""
        data = msgspec.json.encode(packet, order="sorted")
        sha256 = await self.store.put_artifact(data)
        artifact = Artifact(
            name=PACKET_NAME, sha256=sha256, size=len(data), media_type=PACKET_MEDIA_TYPE
        )
        await self.append(artifact, turn=iteration)
        return artifact

    async def costs(self, iteration: int, costs: Sequence[Cost]) -> None:
        if costs:
            await self.append(*costs, turn=iteration)
