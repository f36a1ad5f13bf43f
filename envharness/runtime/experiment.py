"""Experiments: one frozen configuration expanded over scenarios x trials.

An experiment is a chain of its own (id ``exp_…``) holding its frozen configuration and its
status changes; each of its sessions is an ordinary session whose ``session.created`` names the
experiment, the scenario, the trial and the seed derived from (experiment seed, scenario id,
trial). Sessions run in one task group, at most ``max_concurrency`` at a time; they share the
store's single writer, so concurrent sessions share commits. Where each session's turn loop
runs is the executor's choice (:mod:`envharness.runtime.executors`): in this process by default,
or in worker processes whose evidence comes back to this process's writer.

An experiment's budget is spent by all its sessions together (their agents' reported costs)
and by its wall time: once it is spent, each running session stops at its next turn boundary,
no other starts, and the experiment records ``stopped`` with a ``budget:`` reason — resumable,
with a larger budget. Sessions stopped by their own budget leave it ``stopped`` the same way.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast, get_args

import anyio
from anyio.abc import TaskGroup

from envharness.contracts.budget import Spending
from envharness.contracts.scenario import Scenario
from envharness.errors import NotFoundError, StoreError, collapse
from envharness.records import (
    ExperimentConfig,
    ExperimentCreated,
    ExperimentStatus,
    SessionChain,
    Status,
)
from envharness.runtime.budgets import BUDGET_PREFIX, BudgetWatch
from envharness.runtime.executors.in_process import InProcessExecutor
from envharness.runtime.executors.seam import (
    Executor,
    ExperimentWork,
    PlanSession,
    SessionRuns,
    SessionWork,
)
from envharness.runtime.session import (
    PauseRequest,
    ProgressCallback,
    SessionResult,
    SessionRunner,
)
from envharness.store.journal import Pending
from envharness.store.locate import AnyStore
from envharness.store.owners import this_process

__all__ = [
    "ExperimentProgress",
    "ExperimentResumption",
    "ExperimentResult",
    "ExperimentRunner",
    "ExperimentSession",
    "PlanSession",
    "derive_seed",
]

_SEED_BITS = 63
_STATUSES = frozenset(get_args(Status))


def derive_seed(seed: int, scenario_id: str, trial: int) -> int:
    """A session's seed from the experiment's: stable across runs, machines and Python versions
    (sha256, not ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{seed}\x00{scenario_id}\x00{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - _SEED_BITS)


ResumeSession = Callable[[str, Callable[[], None]], Awaitable[SessionResult]]
"""Resumes one of the experiment's sessions by id (with the open store); the callable is the
session's ``settling`` (see :class:`SessionPlan`)."""


@dataclass(frozen=True, slots=True)
class ExperimentResumption:
    """Where a resumed experiment picks up: its chain's head and the sessions it already has,
    keyed by (scenario id, trial)."""

    head_seq: int
    head_digest: str
    sessions: Mapping[tuple[str, int], SessionResult]
    resume_session: ResumeSession
    spent: Spending | None = None
    """What the experiment spent before (its sessions' costs, its wall time), when a budget
    is to count it."""
    changes: tuple[str, ...] = ()
    """How today's code differs from the recorded one, as declared (each resumed session
    records them); only a remote executor needs them here, the in-process resume finds them."""


@dataclass(frozen=True, slots=True)
class ExperimentSession:
    """One session of an experiment, with the labels that place it."""

    scenario_id: str
    trial: int
    seed: int
    result: SessionResult


@dataclass(frozen=True, slots=True)
class ExperimentProgress:
    total: int
    completed: int = 0
    failed: int = 0
    stopped: int = 0
    running: int = 0

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.stopped


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    id: str
    name: str
    status: Status
    total: int
    completed: int
    failed: int
    stopped: int
    sessions: tuple[ExperimentSession, ...] = field(repr=False)


class ExperimentRunner:
    """Runs every (scenario, trial) of one experiment under a concurrency limit."""

    def __init__(
        self,
        store: AnyStore,
        experiment_id: str,
        config: ExperimentConfig,
        scenarios: Sequence[Scenario[Any]],
        plan_session: PlanSession,
        progress: ProgressCallback | None = None,
        resumption: ExperimentResumption | None = None,
        runner_class: type[SessionRunner] = SessionRunner,
        pause: PauseRequest | None = None,
        budget: BudgetWatch | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.id = experiment_id
        self.budget = budget
        """The experiment's budget, which every session of it spends from and watches."""
        self.pause_request = pause or PauseRequest()
        """Requested, running sessions pause at their next turn boundary and no new one
        starts; the experiment then records ``paused`` (resumable)."""
        self._runner_class = runner_class
        self._executor: Executor = executor or InProcessExecutor()
        self._runs: SessionRuns | None = None
        """Where sessions run, while :meth:`run` holds the executor open."""
        self._store = store
        self._config = config
        self._scenarios = scenarios
        self._positions = {scenario.id: i for i, scenario in enumerate(scenarios)}
        self._plan_session = plan_session
        self._session_progress = progress
        self._resumption = resumption
        if resumption is None:
            self._chain = SessionChain(experiment_id)
        else:
            self._chain = SessionChain(
                experiment_id, next_seq=resumption.head_seq + 1, prev=resumption.head_digest
            )
        self._sessions: list[ExperimentSession] = []
        self._unsettled: collections.deque[tuple[ExperimentSession, tuple[Pending, ...]]] = (
            collections.deque()
        )
        """Sessions that ended, with the commits they left to the experiment to wait for, in
        the order they ended: each is listed (and counted) only once they are committed."""
        self._settler_idle: anyio.Event | None = None
        """Set to wake the settler (:meth:`_settle_as_committed`) while it waits for work."""
        self._players = 0
        """Players that have not ended (the settler ends after the last)."""
        self._started: set[tuple[str, int]] = set()
        """The sessions a resumed run started (or resumed), by (scenario id, trial)."""
        self._running = 0
        self._to_start = self._not_kept()
        """The sessions still to start, in order: each one is taken by the player that holds
        the slot it starts in (see :meth:`_play`)."""
        self._closed = False
        """Whether no other session starts (none left, a pause, a spent budget)."""
        self._idle: list[anyio.Event] = []
        """The players waiting for a slot, each woken by setting its event."""
        self._group: TaskGroup | None = None
        """Where the players run, while :meth:`_run` holds it open."""
        self.recorded = False
        """Whether the experiment's chain exists in the store (it can then be resumed)."""
        self.result: ExperimentResult | None = None
        """Set once the experiment's final status is recorded (completed or stopped)."""

    @property
    def progress(self) -> ExperimentProgress:
        counts = {"completed": 0, "failed": 0, "stopped": 0}
        for session in self._sessions:
            status = session.result.status
            counts[status if status in counts else "stopped"] += 1
        return ExperimentProgress(total=self.total, running=self._running, **counts)

    @property
    def total(self) -> int:
        return len(self._scenarios) * self._config.trials

    async def run(self) -> ExperimentResult:
        """Run to the end; cancelled, it records ``stopped`` (sessions too) and re-raises.

        A resumed experiment keeps its completed and failed sessions, resumes the interrupted
        and stopped ones, and starts those that never started. The executor is opened first:
        a worker that cannot start leaves nothing recorded.
        """
        work = ExperimentWork(
            store=self._store,
            experiment_id=self.id,
            scenarios=self._scenarios,
            plan_session=self._plan_session,
            runner_class=self._runner_class,
            progress=self._session_progress,
            pause=self.pause_request,
            budget=self.budget,
            changes=self._resumption.changes if self._resumption is not None else (),
        )
        async with self._executor.serving(work) as runs:
            self._runs = runs
            try:
                return await self._run()
            finally:
                self._runs = None

    async def _run(self) -> ExperimentResult:
        running = ExperimentStatus(
            status="running",
            total=self.total,
            runner=this_process(),
            reason="resumed" if self._resumption is not None else None,
        )
        rows = (
            [] if self._resumption else [self._chain.seal(ExperimentCreated(config=self._config))]
        )
        await self._store.append([*rows, self._chain.seal(running)])
        self.recorded = True
        if self.budget is not None:
            self.budget.start()
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                self._players = min(self._config.max_concurrency, self.total)
                for _ in range(self._players):
                    group.start_soon(self._play)  # a player for each slot
                group.start_soon(self._settle_as_committed)
            # Still inside: a stop that lands after the players (trio hears it only at the
            # next checkpoint, the end's append) still records the experiment stopped.
            return await self._ended_as_planned()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._settle_the_rest()
                asked = self.pause_request.stop_reason
                await self._finish("stopped", asked or "the experiment was stopped")
            raise
        except BaseException as exc:
            # Whatever ended it, the experiment must not stay "running": it stops, resumable.
            with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                await self._settle_the_rest()
                cause = collapse(exc)  # the error itself, not the task group's wrapping
                await self._finish("stopped", f"stopped by {type(cause).__name__}: {cause}")
            raise
        finally:
            self._group = None

    async def _ended_as_planned(self) -> ExperimentResult:
        """Record how the experiment ended once every session it started has: paused, stopped
        by its budget, or completed."""
        progress = self.progress
        unfinished = progress.completed + progress.failed < self.total
        if self.pause_request.requested and unfinished:
            return await self._finish("paused", self.pause_request.reason)
        spent = self._over_budget() if unfinished else None
        if spent is not None:
            return await self._finish("stopped", spent)
        return await self._finish("completed", None)

    def _over_budget(self) -> str | None:
        """Why a budget ended the experiment before every session finished, if one did: its
        own, or its sessions' own budgets."""
        if self.budget is not None and (reason := self.budget.exceeded()) is not None:
            return reason
        stopped = sum(
            1
            for session in self._sessions
            if session.result.status == "stopped"
            and (session.result.reason or "").startswith(BUDGET_PREFIX)
        )
        if not stopped:
            return None
        return (
            f"{BUDGET_PREFIX}{stopped} session{'' if stopped == 1 else 's'} stopped at "
            f"{'its' if stopped == 1 else 'their'} own budget; resume with a larger one"
        )

    async def _play(self) -> None:
        """One player: plays the sessions it takes, one after another, each in the slot it
        holds; a session that settles (only waits for its last commit) hands that slot on at
        once, and once it ended the player waits idle until one is handed to it. A session
        that ends without settling (it left its commits to the experiment) keeps its slot, and
        the player goes on with it.

        So sessions start in order, at most ``max_concurrency`` play at a time, and tasks are
        reused: a task and a limiter slot per session cost the loop's thread ~120k
        instructions a session (~6% of a five-turn session) more than this.
        """
        try:
            while True:
                # A stop is heard before a session starts: a stopped session hands its slot
                # on as it settles, like any other.
                await anyio.lowlevel.checkpoint_if_cancelled()
                if (session := self._take()) is None:
                    return
                if await self._one(*session):
                    continue  # the slot is still this player's
                if self._closed:
                    return
                woken = anyio.Event()  # handed a slot, or told that no other session starts
                self._idle.append(woken)
                await woken.wait()
        finally:
            self._players -= 1
            if not self._players:
                self._wake_settler()  # the last player ended: the settler ends too

    def _take(self) -> tuple[Scenario[Any], int] | None:
        """The next session to start in the caller's slot, or ``None`` when none starts any
        more (paused, or the budget spent, before the rest: they are listed as they stand)."""
        if not self._closed:
            if self.pause_request.requested or self._spent():
                self._keep_the_rest()
            elif (session := next(self._to_start, None)) is not None:
                self._running += 1
                if self._resumption is not None:
                    self._started.add((session[0].id, session[1]))
                return session
            self._close()
        return None

    def _not_kept(self) -> Iterator[tuple[Scenario[Any], int]]:
        """Every (scenario, trial) in order, but those a resumed experiment keeps (listed as
        they are passed)."""
        for scenario in self._scenarios:
            for trial in range(self._config.trials):
                if not self._kept(scenario, trial):
                    yield scenario, trial

    def _hand_on(self) -> None:
        """A session runs no more: its slot goes to an idle player, or to a new one."""
        self._running -= 1
        if self._closed:
            return
        if self._idle:
            self._idle.pop().set()
        else:
            assert self._group is not None, "sessions run only while _run holds the group"
            self._players += 1
            self._group.start_soon(self._play)

    def _close(self) -> None:
        """No other session starts: the idle players end."""
        self._closed = True
        for woken in self._idle:
            woken.set()
        self._idle.clear()

    def _spent(self) -> bool:
        """Whether the experiment's budget is spent (then no other session starts)."""
        return self.budget is not None and self.budget.exceeded() is not None

    def _keep_the_rest(self) -> None:
        """Paused before the remaining sessions (re)started: list those that exist as they
        ended; the resume starts them."""
        if self._resumption is None:
            return
        listed = {(session.scenario_id, session.trial) for session in self._sessions}
        listed |= self._started  # those running list themselves as they end
        for (scenario_id, trial), earlier in self._resumption.sessions.items():
            if (scenario_id, trial) not in listed:
                seed = derive_seed(self._config.seed, scenario_id, trial)
                self._sessions.append(ExperimentSession(scenario_id, trial, seed, earlier))

    def _kept(self, scenario: Scenario[Any], trial: int) -> bool:
        """Whether a resumed experiment keeps this session as it ended (completed or failed)."""
        earlier = self._earlier(scenario, trial)
        if earlier is None or earlier.status not in ("completed", "failed"):
            return False
        seed = derive_seed(self._config.seed, scenario.id, trial)
        self._sessions.append(ExperimentSession(scenario.id, trial, seed, earlier))
        return True

    def _earlier(self, scenario: Scenario[Any], trial: int) -> SessionResult | None:
        if self._resumption is None:
            return None
        return self._resumption.sessions.get((scenario.id, trial))

    async def _one(self, scenario: Scenario[Any], trial: int) -> bool:
        """Run (or resume) one session in the caller's slot, which it hands on once the
        session settles (see :meth:`_hand_on`); whether the caller still holds it (the
        session ended without settling)."""
        seed = derive_seed(self._config.seed, scenario.id, trial)
        earlier = self._earlier(scenario, trial)
        held = True
        runs = self._runs
        assert runs is not None, "sessions start only while run() holds the executor"

        def free() -> None:
            """The session runs no more (it waits for its last commit, or it ended)."""
            nonlocal held
            if held:
                held = False
                self._hand_on()

        session_id: str | None = None
        commits: tuple[Pending, ...] = ()

        def named(known: str) -> None:
            nonlocal session_id
            session_id = known

        def left(handed: tuple[Pending, ...]) -> None:
            nonlocal commits
            commits = handed

        work = SessionWork(self._positions[scenario.id], trial, seed)
        try:
            if earlier is not None and self._resumption is not None:
                session_id = earlier.id
                here = self._resumption.resume_session
                result = await runs.resume(earlier.id, work, free, named, here)
            else:
                result = await runs.run(work, free, named, left)
        except BaseException as exc:
            if held:  # stopped, or it could not run: the experiment ends, nobody takes its slot
                held = False
                self._running -= 1
            with anyio.CancelScope(shield=True):
                for pending in commits:  # handed over before it was stopped: known all the same
                    await pending.committed()
            if session_id is not None and isinstance(exc, anyio.get_cancelled_exc_class()):
                # The session recorded how it ended (``stopped``) and re-raised the
                # cancellation: list it with that ending, so the result names every session
                # that started.
                with anyio.CancelScope(shield=True):
                    ended = await self._ended(session_id)
                if ended is not None:
                    self._sessions.append(ExperimentSession(scenario.id, trial, seed, ended))
            raise
        self._unsettled.append((ExperimentSession(scenario.id, trial, seed, result), commits))
        self._wake_settler()
        if held:  # ended without settling: the caller goes on in its slot
            self._running -= 1
        return held

    async def _settle_as_committed(self) -> None:
        """The settler: lists each ended session once its commits are done, in the order
        they ended, until the last player ended. A failed commit fails the experiment at
        once, as the session's own wait did; one task waits, not one per session."""
        while True:
            while self._unsettled:
                session, commits = self._unsettled.popleft()
                for pending in commits:
                    await pending.committed()
                self._sessions.append(session)
            if not self._players:
                return
            self._settler_idle = anyio.Event()
            await self._settler_idle.wait()

    def _wake_settler(self) -> None:
        if self._settler_idle is not None:
            self._settler_idle.set()
            self._settler_idle = None

    async def _settle_the_rest(self) -> None:
        """After the players ended abnormally: wait for the commits the settler had not, and
        list the sessions whose commits are done (one that failed is not listed)."""
        while self._unsettled:
            session, commits = self._unsettled.popleft()
            try:
                for pending in commits:
                    await pending.committed()
            except StoreError:
                continue
            self._sessions.append(session)

    async def _ended(self, session_id: str) -> SessionResult | None:
        """How a session cancelled mid-run ended, as its index records it."""
        try:
            info = await self._store.session(session_id)
        except NotFoundError:  # never recorded (cancelled before its first commit)
            return None
        status = info.status if info.status in _STATUSES else "stopped"
        return SessionResult(
            id=info.id,
            status=cast(Status, status),
            turns_completed=info.turns_completed,
            reason=info.reason,
        )

    async def _finish(self, status: Status, reason: str | None) -> ExperimentResult:
        progress = self.progress
        stopped = progress.stopped + (self.total - progress.finished)  # never started
        row = self._chain.seal(
            ExperimentStatus(
                status=status,
                total=self.total,
                completed=progress.completed,
                failed=progress.failed,
                stopped=stopped,
                reason=reason,
            )
        )
        try:
            pending = await self._store.submit([row])
        except BaseException:  # nothing handed over: the next end takes this row's place
            self._chain = SessionChain(self.id, next_seq=row.seq, prev=row.prev)
            raise
        await pending.committed()
        ordered = sorted(self._sessions, key=lambda s: (self._order(s.scenario_id), s.trial))
        self.result = ExperimentResult(
            id=self.id,
            name=self._config.name,
            status=status,
            total=self.total,
            completed=progress.completed,
            failed=progress.failed,
            stopped=stopped,
            sessions=tuple(ordered),
        )
        return self.result

    def _order(self, scenario_id: str) -> int:
        return self._positions[scenario_id]
