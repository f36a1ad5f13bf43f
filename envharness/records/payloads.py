"""One msgspec Struct per evidence kind, joined in the tagged union :data:`Payload`.

The ``kind`` tag lives inside the payload so that a record decodes in one pass with one decoder.
Schema evolution follows msgspec's rules: new fields get defaults, existing fields never change
type, and old payloads are never re-encoded (digests cover the bytes as they were written).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "TERMINAL_STATUSES",
    "ActionAttempted",
    "ActionBlocked",
    "ActionExecuted",
    "Artifact",
    "Branch",
    "CandidateVerdict",
    "Checkpoint",
    "Cost",
    "DecisionRequested",
    "DecisionSelected",
    "EnvironmentRef",
    "ErrorInfo",
    "ExperimentConfig",
    "ExperimentCreated",
    "ExperimentStatus",
    "Finding",
    "Hint",
    "HookCalled",
    "Intervention",
    "Log",
    "Observation",
    "OptimizerAccepted",
    "OptimizerConfigRef",
    "OptimizerDecision",
    "OptimizerMeasured",
    "OptimizerProposal",
    "OptimizerStarted",
    "OptimizerStatus",
    "OperationReceipt",
    "OperationRef",
    "Outcome",
    "ParticipantOutcome",
    "ParticipantRef",
    "Payload",
    "ProtocolViolation",
    "RunnerRef",
    "ScenarioRef",
    "Score",
    "SegmentEnded",
    "SegmentStarted",
    "SessionConfig",
    "SessionCreated",
    "SessionStatus",
    "Status",
    "Transcript",
]

Status = Literal["created", "running", "paused", "completed", "failed", "stopped", "interrupted"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "stopped", "interrupted"})


class _Part(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """A value nested inside a payload (not a record kind of its own)."""


class _Payload(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of every record payload; subclasses set ``tag`` to their kind."""


# -- parts -------------------------------------------------------------------------------------


class ErrorInfo(_Part, frozen=True):
    """Why something failed, kept whole: never just an exception class name."""

    type: str
    message: str
    traceback: str | None = None
    stderr_tail: str | None = None


class EnvironmentRef(_Part, frozen=True):
    """The frozen identity of an environment: enough to refuse running different rules later."""

    name: str
    version: str
    turn_order: Literal["simultaneous", "sequential", "environment"]
    roles: tuple[str, ...]
    input_type: str
    action_type: str | None = None
    observation_type: str | None = None
    input_schema: dict[str, Any] | None = None
    action_schema: dict[str, Any] | None = None


class ParticipantRef(_Part, frozen=True):
    role: str
    implementation: str


class ScenarioRef(_Part, frozen=True):
    id: str
    input: Any
    reference: Any = None
    metadata: dict[str, Any] = {}


class OperationRef(_Part, frozen=True):
    name: str
    version: str
    config: dict[str, Any] = {}


class RunnerRef(_Part, frozen=True):
    """The process that runs a segment: enough to tell at once, after a crash, that it is gone
    (its pid is free, or now belongs to a process that started at another time)."""

    host: str
    pid: int
    started: str | None = None


class SessionConfig(_Part, frozen=True):
    """Everything frozen when a session starts; a resume compares itself against this."""

    environment: EnvironmentRef
    participants: dict[str, ParticipantRef]
    scenario: ScenarioRef
    seed: int
    turns: int
    envharness_version: str
    harness_version: str | None = None
    scoring_version: str | None = None
    experiment_id: str | None = None
    trial: int | None = None
    operations: tuple[OperationRef, ...] = ()
    action_timeout: float | None = None
    hook_budget: float | None = None
    """Seconds one hook call may take (only when the session runs hooks)."""
    max_blocks: int | None = None
    """Vetoes in a row after which the block limit acts (only with hooks)."""
    on_block_limit: Literal["skip", "run_last"] | UnsetType = UNSET
    """What the block limit does: skip the participant's turn, or run its last answer
    (recorded with hooks since it existed; absent in older sessions, which skipped)."""


class ExperimentConfig(_Part, frozen=True):
    """An experiment's frozen configuration, recorded once in the experiment's own chain.

    Every session of the experiment records the same environment, participants and versions
    in its ``session.created``, plus its scenario, trial and derived seed.
    """

    name: str
    scenarios: tuple[ScenarioRef, ...]
    trials: int
    seed: int
    turns: int
    max_concurrency: int
    environment: EnvironmentRef
    participants: dict[str, ParticipantRef]
    envharness_version: str
    harness_version: str | None = None
    scoring_version: str | None = None
    operations: tuple[OperationRef, ...] = ()
    action_timeout: float | None = None


# -- experiment lifecycle ----------------------------------------------------------------------


class ExperimentCreated(_Payload, tag="experiment.created", frozen=True):
    """First record of an experiment's chain (the chain's id is the experiment id)."""

    config: ExperimentConfig


class ExperimentStatus(_Payload, tag="experiment.status", frozen=True):
    """The experiment's status with its session counts when it changed."""

    status: Status
    total: int
    completed: int = 0
    failed: int = 0
    stopped: int = 0
    reason: str | None = None
    runner: RunnerRef | None = None


# -- session lifecycle -------------------------------------------------------------------------


class SessionCreated(_Payload, tag="session.created", frozen=True):
    config: SessionConfig


class SessionStatus(_Payload, tag="session.status", frozen=True):
    status: Status
    reason: str | None = None
    error: ErrorInfo | None = None


class SegmentStarted(_Payload, tag="segment.started", frozen=True):
    """Start of an uninterrupted stretch of execution; ``previous`` links a resume to its cause."""

    segment: int
    cause: Literal["start", "resume", "branch"] = "start"
    previous: int | None = None
    state: str | None = None
    turn: int = 0
    """The last complete turn the segment starts after."""
    until: int | None = None
    """The turn this segment is planned to reach, when it differs from the recorded plan."""
    runner: RunnerRef | None = None
    changes: tuple[str, ...] = ()
    """Declared differences from the recorded configuration (a resume with changed code)."""


class SegmentEnded(_Payload, tag="segment.ended", frozen=True):
    segment: int
    status: Status


# -- the turn ----------------------------------------------------------------------------------


class Observation(_Payload, tag="observation", frozen=True):
    """What one participant was shown; private to that participant.

    ``text`` is the environment's text view of it (:class:`~envharness.contracts.RendersText`),
    absent when the environment has none.
    """

    observation: Any
    text: str | UnsetType = UNSET


class ActionAttempted(_Payload, tag="action.attempted", frozen=True):
    """What the participant's policy returned, before anything judged it."""

    action: Any
    seconds: float | None = None


class ActionExecuted(_Payload, tag="action.executed", frozen=True):
    """An action the environment resolved, with that participant's outcome and, where the
    environment gives one, its reward for the step."""

    action: Any
    outcome: Any = None
    reward: float | UnsetType | None = UNSET


class ActionBlocked(_Payload, tag="action.blocked", frozen=True):
    """An action that was never executed, and who stopped it."""

    action: Any
    reason: str
    by: Literal["environment", "validation", "hook", "operator"] = "validation"


class Outcome(_Payload, tag="outcome", frozen=True):
    """The resolution of a step: the new state (by digest, stored once), done flag, signals.

    A non-finite number (NaN, infinity) has no JSON form: it is recorded as ``null``.
    """

    state: str
    done: bool = False
    signals: dict[str, float | None] = {}
    truncated: bool | UnsetType = UNSET
    """The episode was cut short from outside its rules (a time limit), not over."""


class ParticipantOutcome(_Payload, tag="outcome.participant", frozen=True):
    """What a step meant for a participant who did not act in it: the outcome and the reward
    the environment addressed to it (the player who did not make the last move learns who
    won). Private to that participant."""

    outcome: Any = None
    reward: float | UnsetType | None = UNSET


class Transcript(_Payload, tag="transcript", frozen=True):
    """The chat messages one answer added to a model-backed agent's conversation, in OpenAI's
    chat format (``{"role": "user", "content": ...}``, assistant ``tool_calls``, ``tool``
    results), kept as the agent sent them; private to that participant.

    Recorded right after the ``action.attempted`` it belongs to, and only what that answer
    added: the agent's whole conversation is the concatenation of its transcripts, so a long
    one is never written twice. Datasets take it instead of rebuilding a conversation from
    observations and actions (docs/trajectories.md).
    """

    messages: tuple[dict[str, Any], ...]


class Hint(_Payload, tag="hint", frozen=True):
    text: str
    source: str | None = None


class HookCalled(_Payload, tag="hook", frozen=True):
    """A harness hook that intervened, changed the notebook, or failed (a hook that returned no
    effect and left the notebook as it was leaves none).

    ``effect`` is the effect's name (``allow``, ``rewrite``, ``block_and_prompt``, ``hint``) and
    ``detail`` its JSON; a hook that raised or overran its budget has ``error`` set and counted as
    no intervention. ``harness_version`` says which patch ran.
    """

    hook: str
    effect: str | None = None
    detail: Any = None
    error: ErrorInfo | None = None
    seconds: float | None = None
    harness_version: str | None = None
    notebook: str | None = None
    """The digest of the notebook as the call left it, when it changed it (stored once, like
    states): a resume restores the notebook from the last such record."""


class Cost(_Payload, tag="cost", frozen=True):
    """What a decision cost; every field is optional because providers report different things."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    usd: float | None = None
    seconds: float | None = None
    model: str | None = None


class Score(_Payload, tag="score", frozen=True):
    """A versioned score report for the session."""

    version: str
    metrics: dict[str, float | None] = {}
    passed: bool | None = None
    uncertainty: dict[str, float | None] = {}
    per_participant: dict[str, dict[str, float | None]] | UnsetType = UNSET
    """Each participant's own metrics, where the environment scores them apart."""


class Finding(_Payload, tag="finding", frozen=True):
    """A judgement about the session that points at the records it rests on (``cites`` = seqs)."""

    title: str
    detail: str = ""
    severity: Literal["info", "low", "medium", "high"] = "info"
    cites: tuple[int, ...] = ()


class Artifact(_Payload, tag="artifact", frozen=True):
    """A file kept beside the evidence, content-addressed by ``sha256``."""

    name: str
    sha256: str
    size: int
    media_type: str = "application/octet-stream"


class Checkpoint(_Payload, tag="checkpoint", frozen=True):
    """Environment state (by digest), agent states where given, and the hooks' notebook."""

    label: str
    state: str
    agents: dict[str, Any] = {}
    notebook: Any = None
    turn: int = 0
    """The last complete turn whose resulting state this is."""


class Branch(_Payload, tag="branch", frozen=True):
    """Lineage of a branched session: where it came from and what was changed."""

    parent_session: str
    checkpoint_seq: int
    intervention: Any
    reason: str = ""
    checkpoint_digest: str = ""
    """The checkpoint record's digest: the branch is bound to exactly that evidence."""


class Intervention(_Payload, tag="intervention", frozen=True):
    intervention: Any
    reason: str = ""
    state: str | None = None
    rejected: str | None = None
    """Why the environment refused it (then no branch was created)."""


class OperationReceipt(_Payload, tag="operation.receipt", frozen=True):
    """One call of an environment operation: what was asked, what came back, the new state."""

    operation: str
    version: str
    request: Any = None
    result: Any = None
    error: ErrorInfo | None = None
    state: str | None = None
    seconds: float | None = None


class DecisionRequested(_Payload, tag="decision.requested", frozen=True):
    decision: str
    options: tuple[Any, ...] = ()
    operations: tuple[int, ...] = ()


class DecisionSelected(_Payload, tag="decision.selected", frozen=True):
    decision: str
    selected: Any
    operations: tuple[int, ...] = ()


class ProtocolViolation(_Payload, tag="protocol.violation", frozen=True):
    problem: str
    artifact: str | None = None
    excerpt: str = ""


class Log(_Payload, tag="log", frozen=True):
    message: str
    level: Literal["debug", "info", "warning", "error"] = "info"
    stream: str | None = None


# -- optimizer runs ----------------------------------------------------------------------------
# An optimizer run is a chain of its own (id ``opt_…``), indexed like an experiment's: what it was
# asked to do, each engineer answer, each measurement (with the experiment that made it), each
# decision, and each accepted harness version. A resumed run reads this chain and re-measures
# nothing it holds (docs/optimizer.md).


class OptimizerConfigRef(_Part, frozen=True):
    """An optimizer run's frozen configuration (scenario inputs live in its experiments)."""

    name: str
    environment: EnvironmentRef
    engineer: str
    engineer_version: str
    scenarios: tuple[str, ...]
    participants: dict[str, ParticipantRef] = {}
    held_out: tuple[str, ...] = ()
    regression: tuple[str, ...] = ()
    candidates: int = 8
    iterations: int = 3
    turns: int = 1
    trials: int = 1
    seed: int = 0
    capacity: int = 1
    sandbox: str = "subprocess"
    alpha: float | None = None
    confidence: float = 0.95
    metric: str | None = None
    solved: float = 1.0
    min_improvement: float = 0.0
    resamples: int = 2000
    smoke_test: bool = True
    stop_when_solved: bool = True
    max_concurrency: int | None = None
    base_version: str | None = None
    base_digest: str | None = None
    directory: str = ""
    envharness_version: str = ""


class OptimizerStarted(_Payload, tag="optimizer.started", frozen=True):
    """First record of an optimizer run's chain."""

    config: OptimizerConfigRef


class OptimizerStatus(_Payload, tag="optimizer.status", frozen=True):
    status: Status
    reason: str | None = None
    error: ErrorInfo | None = None
    runner: RunnerRef | None = None


class OptimizerProposal(_Payload, tag="optimizer.proposal", frozen=True):
    """One engineer answer, and what validation made of it (``problem`` when it was refused).

    ``digest`` is the digest of the patch stacked on the accepted harness — the patch cache's
    key; ``patch`` the candidate's own patch (JSON of a ``HarnessPatch``).
    """

    iteration: int
    candidate: int
    engineer: str
    text: str = ""
    error: str | None = None
    problem: str | None = None
    patch: dict[str, Any] | None = None
    digest: str | None = None


class OptimizerMeasured(_Payload, tag="optimizer.measured", frozen=True):
    """One measurement: an experiment over the scenarios with one harness (or none).

    ``values`` is each scenario's score (pass rate over trials, or the chosen metric);
    ``failures`` says why a scenario's sessions failed: ``patch`` (the patch's hooks failed or
    broke the session — counted as a failure), ``session`` (the agent or environment failed,
    as in the baseline) or ``infrastructure`` (the measurement itself could not be made).
    ``hooks`` counts what fired (``on_before_action:block_and_prompt`` → n).
    """

    iteration: int
    role: Literal["baseline", "candidate", "held_out", "regression"]
    candidate: int | None = None
    digest: str | None = None
    version: str | None = None
    experiment_id: str | None = None
    values: dict[str, float | None] = {}
    failures: dict[str, str] = {}
    hooks: dict[str, int] = {}
    hook_errors: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: ErrorInfo | None = None
    cut: int | UnsetType = UNSET
    """How many of its sessions the turn limit ended rather than the environment (unset when
    none did, so a measurement written before this field seals the same bytes)."""


class CandidateVerdict(_Part, frozen=True):
    """What became of one candidate in one iteration, and why."""

    candidate: int
    status: Literal["invalid", "failed", "infrastructure", "rejected", "accepted"]
    reason: str
    digest: str | None = None
    mean_reward: float | None = None
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    improved: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()


class OptimizerDecision(_Payload, tag="optimizer.decision", frozen=True):
    """One iteration's outcome: every candidate's verdict, the one selected (if any), and what
    the iteration spent (engineer and rerun tokens, wall-clock seconds)."""

    iteration: int
    verdicts: tuple[CandidateVerdict, ...] = ()
    selected: int | None = None
    reason: str = ""
    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0


class OptimizerAccepted(_Payload, tag="optimizer.accepted", frozen=True):
    """A harness version: the accepted patches stacked so far, and what justified it."""

    version: str
    iteration: int
    candidate: int
    digest: str
    patch: dict[str, Any]
    parent: str | None = None
    experiment_id: str | None = None
    mean_reward: float = 0.0
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    score: float | None = None
    engineer_tokens: int = 0
    rerun_tokens: int = 0
    seconds: float = 0.0


Payload = (
    ExperimentCreated
    | ExperimentStatus
    | SessionCreated
    | SessionStatus
    | SegmentStarted
    | SegmentEnded
    | Observation
    | ActionAttempted
    | ActionExecuted
    | ActionBlocked
    | Outcome
    | ParticipantOutcome
    | Transcript
    | Hint
    | HookCalled
    | Cost
    | Score
    | Finding
    | Artifact
    | Checkpoint
    | Branch
    | Intervention
    | OperationReceipt
    | DecisionRequested
    | DecisionSelected
    | ProtocolViolation
    | Log
    | OptimizerStarted
    | OptimizerStatus
    | OptimizerProposal
    | OptimizerMeasured
    | OptimizerDecision
    | OptimizerAccepted
)
