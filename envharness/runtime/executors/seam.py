"""Where an experiment's sessions run: the protocol every executor keeps (issue 14).

An experiment decides *which* sessions run and when (its concurrency slots, pause, budget);
an executor decides *where*. The experiment opens its executor once with everything its
sessions share (:class:`ExperimentWork`) and then asks it for one session at a time
(:class:`SessionWork`). In process, that is today's call of the turn loop; a remote executor
ships the shared part to each worker once, then only the (scenario, trial, seed) of each
session, and commits the evidence its workers send back through the driver's store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from envharness.contracts.scenario import Scenario
from envharness.runtime.budgets import BudgetWatch
from envharness.runtime.plan import PauseRequest, ProgressCallback, SessionPlan, SessionResult
from envharness.runtime.session import SessionRunner
from envharness.store.journal import Pending
from envharness.store.locate import AnyStore

__all__ = [
    "Executor",
    "ExperimentWork",
    "PlanSession",
    "ResumeHere",
    "SessionRuns",
    "SessionWork",
]


class PlanSession(Protocol):
    """Makes a fresh session plan (new environment, new agents) for (scenario, trial, seed);
    ``session_id`` names it (a retry goes on with the id its first attempt had)."""

    def __call__(
        self, scenario: Scenario[Any], trial: int, seed: int, /, session_id: str | None = None
    ) -> SessionPlan: ...


ResumeHere = Callable[[str, Callable[[], None]], Awaitable[SessionResult]]
"""Resumes a session by id in this process (with the open store); the callable is the
session's ``settling`` (see :class:`~envharness.runtime.plan.SessionPlan`)."""


@dataclass(frozen=True, slots=True)
class ExperimentWork:
    """What every session of one experiment shares, given to the executor once."""

    store: AnyStore
    experiment_id: str
    scenarios: Sequence[Scenario[Any]]
    plan_session: PlanSession
    """A remote executor pickles it (with the user's factories inside) once per worker."""
    runner_class: type[SessionRunner]
    progress: ProgressCallback | None
    pause: PauseRequest
    budget: BudgetWatch | None
    """The experiment's budget, which all its sessions spend from, wherever they run."""
    changes: tuple[str, ...] = ()
    """How today's code differs from the recorded one, declared by a resumed experiment's
    caller: each session it resumes records them."""


@dataclass(frozen=True, slots=True)
class SessionWork:
    """One session of the experiment: its place in the grid and its derived seed."""

    scenario: int
    """The scenario's index in :attr:`ExperimentWork.scenarios` (an int crosses cheaply)."""
    trial: int
    seed: int


class SessionRuns(Protocol):
    """An executor opened for one experiment."""

    async def run(
        self,
        work: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        commits_to: Callable[[tuple[Pending, ...]], None] | None = None,
    ) -> SessionResult:
        """Run one session to its end, after the commit of its last status.

        ``named`` is told the session's id as soon as it is known (cancelled, the caller reads
        how it ended from the store); ``free`` is called once the session only waits for its
        last commit (the experiment frees its slot there). Cancelled, the session records
        ``stopped`` before this re-raises. Given ``commits_to``, an executor may return before
        that commit instead, having handed it the commits to wait for (see
        :attr:`~envharness.runtime.plan.SessionPlan.commits_to`); one that does not simply
        waits for them itself.
        """
        ...

    async def resume(
        self,
        session_id: str,
        work: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        here: ResumeHere,
    ) -> SessionResult:
        """Resume one of a resumed experiment's sessions after its last complete turn;
        ``here`` is how this process would (the in-process executor calls it)."""
        ...


class Executor(Protocol):
    """Where sessions run: :class:`~envharness.runtime.executors.InProcessExecutor` (the
    default), a process pool, Ray."""

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        """Refuse, before anything is recorded, a recipe this executor cannot run (a
        :class:`~envharness.errors.ConfigurationError` naming the part of ``parts`` — the
        user's factories, by what they are — that cannot travel)."""
        ...

    def serving(self, work: ExperimentWork) -> AbstractAsyncContextManager[SessionRuns]:
        """Open for one experiment's sessions; on exit, every worker it started is gone."""
        ...
