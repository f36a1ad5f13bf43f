"""What a session is asked to do, decided before it starts, and how it ended.

Kept apart from the runner so that planners (the harness, experiments, resume and branch) and
readers of results depend on these plain values, not on the turn loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from msgspec import UNSET

from envharness._version import __version__
from envharness.contracts.agent import Agent, implementation_of
from envharness.contracts.budget import Budget, Spending
from envharness.contracts.environment import Environment
from envharness.contracts.operations import EnvironmentOperation, operation_ref
from envharness.contracts.scenario import Scenario
from envharness.hooks import HarnessHooks
from envharness.records import ErrorInfo, ParticipantRef, SessionConfig, Status
from envharness.runtime.budgets import BudgetWatch
from envharness.runtime.hook_memory import HookMemory
from envharness.runtime.hooking import (
    DEFAULT_HOOK_BUDGET,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_ON_BLOCK_LIMIT,
    OnBlockLimit,
)

if TYPE_CHECKING:
    from envharness.store.journal import Pending

__all__ = [
    "PAUSED_REASON",
    "EpisodeEnd",
    "PauseRequest",
    "ProgressCallback",
    "Resumption",
    "SessionPlan",
    "SessionResult",
    "turn_limit_note",
]

ProgressCallback = Callable[[str, int, int], None]
"""Called with (session id, turns completed, turns planned): once when the session's start is
committed (so a caller learns its id), then after each turn — whose commit may still be in
flight: a crash loses at most the turns held and the commits in flight (see
:mod:`envharness.runtime.recorder`), which a resume replays."""


class PauseRequest:
    """Asks the sessions that hold it to pause at their next turn boundary.

    A paused session finishes the turn it is playing, commits it, and ends its segment
    ``paused`` (no score yet); ``resume`` continues it from there. One request can serve many
    sessions (an experiment's).
    """

    __slots__ = ("_reason", "_requested", "stop_reason")

    def __init__(self) -> None:
        self._requested = False
        self._reason: str | None = None
        self.stop_reason: str | None = None
        """Why the run is about to be cancelled, when the canceller says (another process
        asked: ``envharness stop``); the sessions and the experiment record it as their
        ``stopped`` reason."""

    @property
    def requested(self) -> bool:
        return self._requested

    @property
    def reason(self) -> str:
        """The ``paused`` reason to record: the first requester's, else :data:`PAUSED_REASON`."""
        return self._reason or PAUSED_REASON

    def request(self, reason: str | None = None) -> None:
        if not self._requested:
            self._reason = reason
        self._requested = True


PAUSED_REASON = "paused on request; resume it to go on"


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """Everything one session needs, decided before it starts."""

    session_id: str
    environment: Environment[Any, Any]
    agents: Mapping[str, Agent]
    roster: Mapping[str, str]
    scenario: Scenario[Any]
    input: Any
    turns: int
    seed: int
    action_timeout: float | None = None
    experiment_id: str | None = None
    trial: int | None = None
    operations: Mapping[str, EnvironmentOperation] = field(default_factory=dict)
    checkpoint_every: int | None = None
    hooks: HarnessHooks | None = None
    """The harness hooks around the participants' policies; their ``version`` is the
    session's ``harness_version``."""
    hook_budget: float | None = DEFAULT_HOOK_BUDGET
    max_blocks: int = DEFAULT_MAX_BLOCKS
    on_block_limit: OnBlockLimit = DEFAULT_ON_BLOCK_LIMIT
    """After ``max_blocks`` vetoes in a row: skip the participant's turn, or run its last
    answer (see :data:`~envharness.runtime.hooking.OnBlockLimit`)."""
    pause: PauseRequest | None = None
    """When given, the session pauses at the next turn boundary after it is requested."""
    settling: Callable[[], None] | None = None
    """Called once the session has handed its last records to the journal and only waits for
    their commit: an experiment frees the session's concurrency slot there, so the next
    session plays while this one's commit is written (its result still counts only after)."""
    budget: Budget | None = None
    """What this session may spend (its agents' reported costs and its wall time, earlier
    segments included); checked at each turn boundary, it stops the session ``stopped`` with a
    ``budget:`` reason (see :mod:`envharness.runtime.budgets`)."""
    shared_budget: BudgetWatch | None = None
    """The experiment's budget, which all its sessions spend from and watch."""
    progress_follows_commits: bool = False
    """Whoever the runner's ``progress`` reports to hears of the session only once its start
    is committed (a remote worker's driver does so): the start is handed over at once, and the
    session goes on without waiting for that commit. A plan's, not the runner's constructor's,
    so that a runner subclass with its own ``__init__`` runs in a worker as it does here."""

    commits_to: Callable[[tuple[Pending, ...]], None] | None = None
    """Given, a session that ends (rather than being interrupted) does not wait for its last
    commits: it hands them here and returns its result at once (it never settles: it is
    done). Whoever takes them waits for
    them, in order, and raises a failure before relying on the result — an experiment lists a
    session only once they are committed, and records its own end after all of them. A
    session waiting for its commit cost the loop's thread more than the commit itself (its
    suspension and wake-up, and its objects kept alive across collections)."""

    @property
    def harness_version(self) -> str | None:
        return self.hooks.version if self.hooks is not None else None

    def run_by(
        self,
        pause: PauseRequest | None,
        settling: Callable[[], None] | None,
        shared_budget: BudgetWatch | None,
        commits_to: Callable[[tuple[Pending, ...]], None] | None = None,
    ) -> SessionPlan:
        """This plan with an experiment's controls: what ``dataclasses.replace`` gives, at half
        its cost (it looks every field up by name), since an experiment does it once a
        session. A test checks that it keeps every other field."""
        return SessionPlan(
            self.session_id,
            self.environment,
            self.agents,
            self.roster,
            self.scenario,
            self.input,
            self.turns,
            self.seed,
            self.action_timeout,
            self.experiment_id,
            self.trial,
            self.operations,
            self.checkpoint_every,
            self.hooks,
            self.hook_budget,
            self.max_blocks,
            self.on_block_limit,
            pause,
            settling,
            self.budget,
            shared_budget,
            self.progress_follows_commits,
            commits_to,
        )

    def config(self) -> SessionConfig:
        spec = self.environment.spec
        return SessionConfig(
            environment=spec.reference(),
            participants={
                name: ParticipantRef(
                    role=self.roster[name], implementation=implementation_of(agent, name)
                )
                for name, agent in self.agents.items()
            },
            scenario=self.scenario.reference_record(self.input),
            seed=self.seed,
            turns=self.turns,
            envharness_version=__version__,
            harness_version=self.harness_version,
            scoring_version=spec.scoring_version,
            experiment_id=self.experiment_id,
            trial=self.trial,
            action_timeout=self.action_timeout,
            hook_budget=self.hook_budget if self.hooks is not None else None,
            max_blocks=self.max_blocks if self.hooks is not None else None,
            on_block_limit=self.on_block_limit if self.hooks is not None else UNSET,
            operations=tuple([operation_ref(o) for o in self.operations.values()]),
        )


EpisodeEnd = Literal["done", "truncated", "turn_limit"]
"""How a completed session's episode ended: the environment said it was over (``done``) or cut
it short (``truncated``, a time limit), or the session's ``turns`` ran out (``turn_limit``, also
a truncation) — the trajectory's termination cause, known as the session ends."""


def turn_limit_note(
    ended_by: Iterable[EpisodeEnd | None], turns: int, fix: str = "pass --turns to play longer"
) -> str | None:
    """What to tell a user whose sessions ran out of turns before their environment ended
    them (``None`` when none did): such an episode was cut, not finished — a default of
    ``turns`` silently shortens every longer game. ``fix`` says how to give more turns."""
    cut = sum(1 for end in ended_by if end == "turn_limit")
    if not cut:
        return None
    sessions = "1 session" if cut == 1 else f"{cut} sessions"
    return f"{sessions} ended by the turn limit (turns={turns}), not by the environment; {fix}"


@dataclass(frozen=True, slots=True)
class SessionResult:
    """How a run ended. ``reason`` and ``error`` say why when it did not complete."""

    id: str
    status: Status
    turns_completed: int
    reason: str | None = None
    error: ErrorInfo | None = field(default=None, repr=False)
    ended_by: EpisodeEnd | None = None
    """For a completed session, how its episode ended (see :data:`EpisodeEnd`)."""


@dataclass(frozen=True, slots=True)
class Resumption:
    """Where a resumed session picks up: its chain's head, its last complete turn and the
    state after it, and the segment that ended (see :mod:`envharness.runtime.resume`)."""

    head_seq: int
    head_digest: str
    previous_segment: int
    turn: int
    state: Any
    outcome_seqs: Mapping[int, Sequence[int]]
    changes: tuple[str, ...] = ()
    until: int | None = None
    cause: Literal["resume", "branch"] = "resume"
    memory: HookMemory | None = None
    """What the hooks remembered after ``turn`` (notebook, pending hints, recent steps)."""
    agent_states: Mapping[str, Any] = field(default_factory=dict)
    """Agents' own states to restore before the first turn (a branch's checkpoint)."""
    spent: Spending | None = None
    """What the session spent before this segment (its ``cost`` records and the wall time of
    its earlier segments), which its budget counts."""
