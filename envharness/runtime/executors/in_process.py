"""The default executor: sessions run on the caller's event loop, as they always have.

Nothing is encoded and nothing is copied: the plan is made and run right here, so choosing
no executor costs nothing (``tests/runtime/test_evidence_pin.py`` and
``tools/bench/experiment.py`` run through it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import final

from envharness.runtime.executors.seam import (
    ExperimentWork,
    PlanSession,
    ResumeHere,
    SessionWork,
)
from envharness.runtime.plan import SessionResult
from envharness.store.journal import Pending

__all__ = ["InProcessExecutor"]


@final
class InProcessExecutor:
    """Runs every session in this process, on the caller's event loop."""

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        """Anything runs in process: lambdas and local functions too."""

    def serving(self, work: ExperimentWork) -> AbstractAsyncContextManager[_LocalRuns]:
        return _serving(work)

    def __repr__(self) -> str:
        return "InProcessExecutor()"


@asynccontextmanager
async def _serving(work: ExperimentWork) -> AsyncIterator[_LocalRuns]:
    yield _LocalRuns(work)


@final
class _LocalRuns:
    __slots__ = ("_work",)

    def __init__(self, work: ExperimentWork) -> None:
        self._work = work

    async def run(
        self,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        commits_to: Callable[[tuple[Pending, ...]], None] | None = None,
    ) -> SessionResult:
        work = self._work
        plan = work.plan_session(work.scenarios[session.scenario], session.trial, session.seed)
        named(plan.session_id)
        plan = plan.run_by(work.pause, free, work.budget, commits_to)
        return await work.runner_class(work.store, plan, work.progress).run()

    async def resume(
        self,
        session_id: str,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        here: ResumeHere,
    ) -> SessionResult:
        named(session_id)
        return await here(session_id, free)
