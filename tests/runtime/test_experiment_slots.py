"""How an experiment hands its concurrency slots from session to session.

Through a scripted executor (the seam every executor keeps), so that each test decides when a
session settles and when its last commit lands: sessions start in order, at most
``max_concurrency`` play at once, a settled session's slot goes to the next session before
that session's commit, the tasks that play them are reused, and neither a stop nor a pause
starts anything more.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import sniffio
import trio

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import Status
from envharness.runtime.executors.seam import ExperimentWork, PlanSession, ResumeHere, SessionWork
from envharness.runtime.experiment import ExperimentResult
from envharness.runtime.plan import SessionResult
from envharness.store.journal import Pending

pytestmark = pytest.mark.anyio


def current_task() -> Any:
    if sniffio.current_async_library() == "trio":
        return trio.lowlevel.current_task()
    return asyncio.current_task()


class Scripted:
    """Sessions that play until ``playing_until`` (if given) says so, settle, and then wait for
    their commit, which lands for every waiting session at once when ``commit_every`` of them
    wait (or once none other may settle)."""

    def __init__(self, total: int, commit_every: int) -> None:
        self.total = total
        self.commit_every = commit_every
        self.started: list[tuple[int, int]] = []
        self.tasks: set[object] = set()
        """Every task a session ran in (held, so that no id is reused)."""
        self.playing = 0
        self.peak = 0
        self.settled = 0
        self.waiting: list[anyio.Event] = []
        self.both_started = anyio.Event()
        self.playing_until: Callable[[SessionWork], anyio.Event] | None = None
        self.work: ExperimentWork | None = None

    def check(self, plan_session: PlanSession, parts: Sequence[tuple[str, object]]) -> None:
        """Runs anything."""

    def serving(self, work: ExperimentWork) -> AbstractAsyncContextManager[Scripted]:
        self.work = work
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[Scripted]:
        yield self

    async def run(
        self,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        commits_to: Callable[[tuple[Pending, ...]], None] | None = None,
    ) -> SessionResult:
        self.started.append((session.scenario, session.trial))
        if len(self.started) == 2:
            self.both_started.set()
        self.tasks.add(current_task())
        session_id = f"ses_scripted_{session.scenario}_{session.trial}"
        named(session_id)
        self.playing += 1
        self.peak = max(self.peak, self.playing)
        status: Status = "completed"
        try:
            if self.playing_until is None:
                await anyio.lowlevel.checkpoint()
            else:
                await self.playing_until(session).wait()
                assert self.work is not None
                if self.work.pause.requested:
                    status = "paused"
        except anyio.get_cancelled_exc_class():
            self.playing -= 1
            free()  # as a stopped session does, once it recorded how it ended
            raise
        self.playing -= 1
        free()
        await self._committed()
        return SessionResult(session_id, status, turns_completed=1)

    async def _committed(self) -> None:
        self.settled += 1
        landed = anyio.Event()
        self.waiting.append(landed)
        if len(self.waiting) >= self.commit_every or self.settled == self.total:
            for waiting in self.waiting:
                waiting.set()
            self.waiting.clear()
        await landed.wait()

    async def resume(
        self,
        session_id: str,
        session: SessionWork,
        free: Callable[[], None],
        named: Callable[[str], None],
        here: ResumeHere,
    ) -> SessionResult:
        raise AssertionError("nothing is resumed here")


def harness_at(store: Path) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )


SCENARIOS = [
    Scenario(id=f"s{index}", input=SyntheticScenarioInput(starting_total=index))
    for index in range(3)
]
GRID = [(scenario, trial) for scenario in range(3) for trial in range(10)]


async def test_sessions_start_in_order_at_most_the_limit_at_once_in_reused_tasks(
    store_path: Path,
) -> None:
    scripted = Scripted(total=len(GRID), commit_every=4)
    async with harness_at(store_path) as harness:
        experiment = harness.experiment(
            "slots", SCENARIOS, turns=1, trials=10, max_concurrency=3, executor=scripted
        )
        with anyio.fail_after(10):
            result = await experiment.run()
    assert (result.status, result.completed) == ("completed", len(GRID))
    assert scripted.started == GRID
    assert scripted.peak <= 3
    # Never a task per session: one per slot, and one for each session that waited for its
    # commit (or was just told of it) when a slot was handed on.
    assert len(scripted.tasks) <= 3 + 2 * scripted.commit_every < len(GRID)


async def test_a_settled_session_s_slot_goes_on_before_its_commit(store_path: Path) -> None:
    """At concurrency 1, every session settles before any commit lands: the experiment
    would wait forever if a slot were handed on only after a commit."""
    scripted = Scripted(total=5, commit_every=5)
    async with harness_at(store_path) as harness:
        experiment = harness.experiment(
            "settling", SCENARIOS[:1], turns=1, trials=5, max_concurrency=1, executor=scripted
        )
        with anyio.fail_after(10):
            result = await experiment.run()
    assert (result.status, result.completed) == ("completed", 5)
    assert scripted.started == [(0, trial) for trial in range(5)]
    assert scripted.peak == 1


async def test_a_stop_starts_no_other_session(store_path: Path) -> None:
    """A stopped session settles on its way out, like any other; its slot must not start the
    next session."""
    scripted = Scripted(total=len(GRID), commit_every=1)
    never = anyio.Event()
    scripted.playing_until = lambda session: never
    async with harness_at(store_path) as harness:
        experiment = harness.experiment(
            "stopped", SCENARIOS, turns=1, trials=10, max_concurrency=2, executor=scripted
        )
        results: list[ExperimentResult] = []

        async def run() -> None:
            results.append(await experiment.run())

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await scripted.both_started.wait()
                experiment.stop()
    assert scripted.started == GRID[:2]
    (result,) = results
    assert (result.status, result.stopped) == ("stopped", len(GRID))


async def test_a_pause_ends_the_idle_players_and_starts_nothing_more(store_path: Path) -> None:
    """Four sessions end (their tasks then wait idle for a slot); the next two play until
    the pause: they end paused, nothing else starts, and the run returns."""
    scripted = Scripted(total=len(GRID), commit_every=1)
    go = anyio.Event()
    playing = anyio.Event()

    def until(session: SessionWork) -> anyio.Event:
        if len(scripted.started) == 6:
            playing.set()
        return go if len(scripted.started) > 4 else done

    done = anyio.Event()
    done.set()
    scripted.playing_until = until
    async with harness_at(store_path) as harness:
        experiment = harness.experiment(
            "paused", SCENARIOS, turns=1, trials=10, max_concurrency=2, executor=scripted
        )
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                results: list[ExperimentResult] = []

                async def run() -> None:
                    results.append(await experiment.run())

                group.start_soon(run)
                await playing.wait()
                experiment.pause()
                go.set()
    assert scripted.started == GRID[:6]
    (result,) = results
    assert (result.status, result.completed) == ("paused", 4)
