"""Reading a session's evidence back into where it can resume.

A session resumes after its last *complete* turn, from the state recorded after it, in a new
segment linked to the one that ended. Its code must be the code the evidence recorded — the
same environment name and version, the same agent implementations, the same harness version
— unless the caller declares the change, which the new segment then records. What it spent so
far — every ``cost`` record, and the wall time of its segments — is read back too, so that a
budget counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from envharness.contracts.budget import SegmentClock, Spending
from envharness.errors import ConfigurationError, NotFoundError
from envharness.hooks.notebook import encoded_notebook
from envharness.records import (
    Branch,
    Checkpoint,
    Cost,
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    Intervention,
    OperationReceipt,
    Outcome,
    RunnerRef,
    SegmentStarted,
    SessionConfig,
    SessionCreated,
)
from envharness.runtime.hook_memory import MEMORY_KINDS, HookMemory, MemoryReader
from envharness.runtime.plan import Resumption, SessionResult
from envharness.store import RecordFilter
from envharness.store.locate import AnyStore
from envharness.store.owners import is_gone

__all__ = [
    "CONTINUABLE",
    "RESUMABLE",
    "ResumePoint",
    "differences",
    "find_resume_point",
    "read_experiment",
    "restore_state",
    "scenario_input",
]

RESUMABLE = frozenset({"interrupted", "stopped", "paused"})
CONTINUABLE = RESUMABLE | {"completed"}
"""A completed session may be continued for more turns (``continue_``), not resumed."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """What the evidence says about a session that is to resume."""

    config: SessionConfig
    head_seq: int
    head_digest: str
    segment: int
    turn: int
    state_digest: str
    outcome_seqs: dict[int, list[int]] = field(default_factory=dict)
    until: int | None = None
    """The turn a continued segment was to reach (``None``: the recorded plan's turns)."""
    memory: HookMemory = field(default_factory=HookMemory)
    """What the session's hooks remembered after ``turn``."""
    agent_states: dict[str, Any] = field(default_factory=dict)
    """Agents' own states to restore, from the checkpoint a branch started at."""
    spent: Spending = field(default_factory=Spending)
    """Every ``cost`` the session recorded (a replayed turn's too: that was paid) and the wall
    time of its segments."""

    @property
    def notebook(self) -> dict[str, Any]:
        value: dict[str, Any] = msgspec.json.decode(self.memory.notebook)
        return value

    def resumption(
        self, state: Any, changes: tuple[str, ...], until: int | None = None
    ) -> Resumption:
        return Resumption(
            until=until,
            head_seq=self.head_seq,
            head_digest=self.head_digest,
            previous_segment=self.segment,
            turn=self.turn,
            state=state,
            outcome_seqs=self.outcome_seqs,
            changes=changes,
            memory=self.memory,
            agent_states=self.agent_states,
            spent=self.spent,
        )


async def find_resume_point(
    store: AnyStore,
    session_id: str,
    allowed: frozenset[str] = RESUMABLE,
    *,
    gone: RunnerRef | None = None,
) -> ResumePoint:
    """Read the session's chain; refuse (naming why) a session whose status is not ``allowed``,
    or whose runner may still run. ``gone`` is a runner the caller knows has ended (a driver
    whose worker's channel broke), though this machine cannot tell: on another host, say. It
    counts only when it is exactly the session's runner (host, pid and start)."""
    info = await store.session(session_id)
    if info.status not in allowed:
        hint = {
            "completed": "it completed; start a new session (or branch from a checkpoint)",
            "failed": "it failed; its failure is evidence — fix the cause and run it again",
            "running": "it is running",
            "created": "it never started",
        }.get(info.status, "")
        raise ConfigurationError(f"session {info.id} cannot be resumed: {hint or info.status}")
    owner = await store.session_owner(info.id)
    if owner is not None and owner != gone and not is_gone(owner):
        raise ConfigurationError(
            f"session {info.id} is being run by pid {owner.pid} on {owner.host}; "
            "a live runner is never taken over"
        )
    config: SessionConfig | None = None
    segment = 0
    participants = 0
    outcomes: dict[int, list[tuple[int, Outcome]]] = {}
    initial: tuple[int, str | None] | None = None
    until: int | None = None
    head = (-1, "")
    kinds = {
        "session.created",
        "segment.started",
        "outcome",
        "branch",
        "checkpoint",
        "operation.receipt",
        "intervention",
        "cost",
        *MEMORY_KINDS,
    }
    spent = Spending()
    clock = SegmentClock()
    reader = MemoryReader()
    branched: Branch | None = None
    changed: dict[int, list[tuple[int, str]]] = {}
    """States named after a turn's outcome (by ``after_turn``: a receipt, an intervention)."""
    checkpoints: dict[int, dict[str, Any]] = {}
    """The agents' own states each turn's latest checkpoint recorded."""
    async for record in store.records(info.id):
        head = (record.seq, record.digest)
        clock.saw(record.kind, record.at)
        if record.kind not in kinds:
            continue
        payload = record.payload
        if isinstance(payload, Cost):
            spent.add(payload)
            continue
        reader.feed(record)
        if isinstance(payload, Branch):
            branched = payload
            await _feed_lineage(store, reader, payload)
        elif isinstance(payload, SessionCreated):
            config = payload.config
            participants = len(config.participants)
        elif isinstance(payload, SegmentStarted):
            segment = payload.segment
            until = payload.until
            # A segment replays every turn after the one it starts from: what an earlier
            # segment recorded of those turns (a stopped, half-played turn) no longer counts.
            for replayed in [t for t in outcomes if t > payload.turn]:
                del outcomes[replayed]
            changed = {t: v for t, v in changed.items() if t <= payload.turn}
            checkpoints = {t: v for t, v in checkpoints.items() if t <= payload.turn}
            if initial is None:  # a branch's first segment starts after its checkpoint's turn
                initial = (payload.turn, payload.state)
        elif isinstance(payload, Outcome) and record.turn is not None:
            outcomes.setdefault(record.turn, []).append((record.seq, payload))
        elif isinstance(payload, OperationReceipt | Intervention) and record.turn is not None:
            if payload.state is not None:
                changed.setdefault(record.turn, []).append((record.seq, payload.state))
        elif isinstance(payload, Checkpoint) and record.turn is not None:
            checkpoints[record.turn] = dict(payload.agents)
    if head[0] + 1 != info.records:
        # Its status was read before its records: a runner that wrote meanwhile (another resume
        # of it, finishing within one commit) would otherwise be resumed after, not refused.
        raise ConfigurationError(
            f"session {info.id} is being run elsewhere: its chain grew from {info.records} to "
            f"{head[0] + 1} records while it was read for this resume; only one runner may "
            "drive a session"
        )
    if config is None or initial is None or initial[1] is None:
        raise ConfigurationError(f"session {info.id} has no session.created record to resume")
    sequential = config.environment.turn_order == "sequential"
    turn, state = initial[0], initial[1]
    for number in sorted(outcomes):
        steps = outcomes[number]
        complete = not sequential or len(steps) == participants or steps[-1][1].done
        if number != turn + 1 or not complete:
            break
        turn, state = number, steps[-1][1].state
    if turn in outcomes:  # what after_turn changed once the turn had resolved
        last_outcome = outcomes[turn][-1][0]
        later = [digest for seq, digest in changed.get(turn, ()) if seq > last_outcome]
        state = later[-1] if later else state
    memory = reader.memory(turn)
    agent_states: dict[str, Any] = checkpoints.get(turn, {})
    if branched is not None:
        taken = await _checkpoint_of(store, branched)
        if memory.notebook_digest is None and taken.notebook is not None:
            memory.notebook = encoded_notebook(taken.notebook)
        if turn == initial[0]:  # agents start from the checkpoint until the branch has played
            agent_states = dict(taken.agents)
    if memory.notebook_digest is not None:
        memory.notebook = await store.blob(memory.notebook_digest)
    spent.seconds = clock.seconds()
    return ResumePoint(
        config=config,
        head_seq=head[0],
        head_digest=head[1],
        segment=segment,
        turn=turn,
        state_digest=state,
        outcome_seqs={t: [seq for seq, _ in outcomes[t]] for t in outcomes if t <= turn},
        until=until,
        memory=memory,
        agent_states=agent_states,
        spent=spent,
    )


async def _checkpoint_of(store: AnyStore, branched: Branch) -> Checkpoint:
    """The checkpoint a branch started from (in its parent's chain, bound by its digest)."""
    found = [
        record
        async for record in store.records(
            branched.parent_session, RecordFilter(after=branched.checkpoint_seq - 1, limit=1)
        )
    ]
    if not found or not isinstance(found[0].payload, Checkpoint):
        raise ConfigurationError(
            f"the checkpoint {branched.parent_session}#{branched.checkpoint_seq} this branch "
            "started from is not in the store"
        )
    return found[0].payload


@dataclass(frozen=True, slots=True)
class RecordedExperiment:
    """An experiment as its chain and its sessions' evidence describe it."""

    config: ExperimentConfig
    status: str
    head_seq: int
    head_digest: str
    sessions: dict[tuple[str, int], SessionResult]
    spent: Spending | None = None
    """What the experiment spent (when asked for): its sessions' ``cost`` records, and the
    wall time of its runs."""


async def read_experiment(
    store: AnyStore, experiment_id: str, *, spending: bool = False
) -> RecordedExperiment:
    """The experiment's configuration, status and sessions; with ``spending``, also what it
    spent (which reads every session's ``cost`` records)."""
    config: ExperimentConfig | None = None
    status = "created"
    head = (-1, "")
    spent = Spending() if spending else None
    running_since: datetime | None = None
    """When the run that has not recorded its end yet started."""
    async for record in store.records(experiment_id):
        head = (record.seq, record.digest)
        if isinstance(record.payload, ExperimentCreated):
            config = record.payload.config
        elif isinstance(record.payload, ExperimentStatus):
            status = record.payload.status
            if spent is not None and running_since is not None:
                spent.seconds += max(0.0, (record.at - running_since).total_seconds())
            running_since = record.at if status == "running" else None
    if config is None:
        raise NotFoundError(
            f"no experiment {experiment_id!r} in the store; "
            "`envharness experiments list` lists them"
        )
    sessions: dict[tuple[str, int], SessionResult] = {}
    kinds = ("session.created", "cost") if spent is not None else ("session.created",)
    last_seen: datetime | None = None
    for info in await store.sessions(experiment_id=experiment_id):
        if spent is not None:
            updated = datetime.fromisoformat(info.updated_at)
            last_seen = updated if last_seen is None else max(last_seen, updated)
        async for record in store.records(info.id, RecordFilter(kinds=kinds)):
            if isinstance(record.payload, Cost):
                assert spent is not None
                spent.add(record.payload)
            elif (
                isinstance(record.payload, SessionCreated)
                and record.payload.config.trial is not None
            ):
                key = (info.scenario_id, record.payload.config.trial)
                sessions[key] = SessionResult(
                    id=info.id,
                    status=info.status,  # type: ignore[arg-type]
                    turns_completed=info.turns_completed,
                    reason=info.reason,
                )
    if spent is not None and running_since is not None and last_seen is not None:
        # A run that crashed recorded no end: it ran until its sessions last wrote.
        spent.seconds += max(0.0, (last_seen - running_since).total_seconds())
    return RecordedExperiment(config, status, head[0], head[1], sessions, spent)


def differences(recorded: SessionConfig | ExperimentConfig, current: SessionConfig) -> list[str]:
    """How the code about to run differs from the code the evidence recorded."""
    found = []
    was, now = recorded.environment, current.environment
    if (was.name, was.version) != (now.name, now.version):
        found.append(f"environment {was.name}@{was.version} is now {now.name}@{now.version}")
    for name, participant in recorded.participants.items():
        current_participant = current.participants.get(name)
        if current_participant is None:
            found.append(f"participant {name!r} is no longer in the roster")
        elif current_participant.implementation != participant.implementation:
            found.append(
                f"agent {name!r} was {participant.implementation!r}, "
                f"is now {current_participant.implementation!r}"
            )
    for name in current.participants.keys() - recorded.participants.keys():
        found.append(f"participant {name!r} was not in the recorded roster")
    if recorded.harness_version != current.harness_version:
        found.append(
            f"harness version was {recorded.harness_version!r}, is now {current.harness_version!r}"
        )
    return found


def restore_state(data: bytes, state_type: type[Any] | None) -> Any:
    """The recorded state, typed again when the environment declares ``state_type``."""
    value = msgspec.json.decode(data)
    return msgspec.convert(value, state_type) if state_type is not None else value


def scenario_input(config: SessionConfig, input_type: type[Any]) -> Any:
    return msgspec.convert(config.scenario.input, input_type)


async def _feed_lineage(store: AnyStore, reader: MemoryReader, branch: Branch) -> None:
    """What the hooks knew at the checkpoint a branch was taken from, read from the parent's
    history (which the branch references instead of copying): recent steps and hints still to
    show, so the branch's hooks go on from where the parent's were, not from nothing."""
    wanted = RecordFilter(kinds=("branch", *MEMORY_KINDS), until=branch.checkpoint_seq)
    async for record in store.records(branch.parent_session, wanted):
        if isinstance(record.payload, Branch):
            await _feed_lineage(store, reader, record.payload)
        else:
            reader.feed(record)
