"""The worker side of a remote executor: runs many sessions at once on one event loop.

A worker is told the experiment's recipe once (:class:`~.frames.Open`), then one
:class:`~.frames.Run` per session; once told :class:`~.frames.Close` it waits for the next
experiment's recipe (an open executor keeps its workers), until its channel ends. Each
session is the ordinary turn loop (:class:`~envharness.runtime.session.SessionRunner`); only
where its recorder hands sealed records over changes: to :class:`_Evidence`, which sends each
commit window as one :class:`~.frames.Batch` to the driver and resolves when the driver
acknowledges its commit. A session's end is reported only after the commit of its last status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import sys
import traceback
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from itertools import count
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup

from envharness.contracts.budget import Budget
from envharness.contracts.scenario import Scenario
from envharness.errors import ConfigurationError, StoreError
from envharness.records import RecordRow
from envharness.runtime.budgets import BudgetWatch
from envharness.runtime.executors.channel import TellsWaiting, WorkerChannel
from envharness.runtime.executors.frames import (
    PROTOCOL,
    Ack,
    Acks,
    Artifact,
    Batch,
    Cancel,
    Close,
    Closed,
    Ended,
    Named,
    News,
    Open,
    Pause,
    Ready,
    Refused,
    Resume,
    Run,
    Spent,
    Stored,
    Turns,
    decode_driver_frame,
    encode,
)
from envharness.runtime.executors.recipe import PickledRecipe, unpickled_recipe
from envharness.runtime.executors.seam import PlanSession
from envharness.runtime.plan import PauseRequest, Resumption
from envharness.runtime.resume import ResumePoint, restore_state
from envharness.runtime.session import SessionRunner
from envharness.store import Store
from envharness.store.journal import Pending
from envharness.store.owners import this_process

__all__ = ["HELD_FRAMES", "HOLD_SECONDS", "Recipe", "serve"]

HOLD_SECONDS = 0.02
"""How long a frame no session waits for may be held for one that must go now, before it
goes by itself: the driver still hears of a session's start, its progress and the batches of
a session that waits for nothing within this."""
HELD_FRAMES = 64
"""Frames held or not yet taken by the channel before a batch goes at once, its session
waiting for the channel to take it (back-pressure): a driver that falls behind slows the
sessions down, instead of its worker queueing ever more of their batches (as many as the
pool's channel queues, ``streams.QUEUED_FRAMES``)."""

_DRIVER_GONE = "the driver went away: this worker can commit nothing more"
_CLOSED = "the driver closed the experiment before this batch was acknowledged"

Recipe = tuple[Sequence[Scenario[Any]], PlanSession, type[SessionRunner], Budget | None]
"""What :class:`~.frames.Open` carries, pickled: scenarios, the planner, the runner class and
the experiment's budget."""


_LATE = Ack | Acks | Stored | Pause | Spent | Cancel
"""Frames of an experiment that may reach the worker after it closed (an acknowledgement of a
batch of a session cancelled by the close): there is nothing left to tell."""


async def serve(channel: WorkerChannel) -> None:
    """Serve one driver, one experiment after another, until it closes its end (or goes
    away). A worker is reused by an open executor: each :class:`~.frames.Open` brings the next
    experiment's recipe, and each :class:`~.frames.Close` ends one with :class:`~.frames.Closed`.
    """
    while True:
        try:
            opened = decode_driver_frame(await channel.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return
        if isinstance(opened, _LATE):
            continue
        if not isinstance(opened, Open) or opened.protocol != PROTOCOL:
            found = opened.protocol if isinstance(opened, Open) else type(opened).__name__
            await channel.send(
                encode(Refused(f"this worker speaks protocol {PROTOCOL}, the driver {found}"))
            )
            return
        if not await _experiment(channel, opened):
            return
        try:
            await channel.send(encode(Closed()))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return


async def _experiment(channel: WorkerChannel, opened: Open) -> bool:
    """Serve one experiment; ``False`` when the worker is done (refused, or the driver left).
    Raises what broke its channel (the driver then retries its sessions elsewhere)."""
    for entry in opened.sys_path:
        if entry not in sys.path:
            sys.path.append(entry)
    async with AsyncExitStack() as stack:
        try:
            pickled = PickledRecipe(opened.recipe, opened.reopened)
            recipe: Recipe = await stack.enter_async_context(unpickled_recipe(pickled))
        except Exception as exc:  # noqa: BLE001 - whatever the user's modules raise on import
            why = f"{type(exc).__name__}: {exc}"
            await channel.send(encode(Refused(f"the recipe did not load in the worker: {why}")))
            return False
        await channel.send(encode(Ready(os.getpid(), this_process())))
        closed = False
        async with anyio.create_task_group() as group:
            worker = _Worker(channel, group, recipe, opened.progress)
            closed = await worker.listen()
            group.cancel_scope.cancel()
        if worker.failure is not None:
            raise worker.failure
    return closed


class _ForcedBudget(BudgetWatch):
    """The experiment's budget as one worker sees it: its own sessions' spending, and the
    driver's word once every worker's together spent it."""

    __slots__ = ("forced",)

    def __init__(self, budget: Budget) -> None:
        super().__init__(budget, whose="the experiment ")
        self.forced: str | None = None

    def exceeded(self) -> str | None:
        return self.forced or super().exceeded()


class _Acknowledged:
    """A batch handed to the driver: done once it says the batch is committed (or not).

    Behaves as the journal's :class:`~envharness.store.journal.Pending` does for the recorder.
    While a session waits for one, its worker counts it among those waiting for the driver.
    """

    __slots__ = ("_done", "_worker", "error")

    def __init__(self, worker: _Worker) -> None:
        self._done = anyio.Event()
        self._worker = worker
        self.error: StoreError | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def resolve(self, error: str | None) -> None:
        self.error = None if error is None else StoreError(error)
        self._done.set()
        self._worker.awaited(self, False)

    async def committed(self) -> None:
        if not self._done.is_set():
            with anyio.CancelScope(shield=True):  # handed over: learn whether it is stored
                await self._worker.flush()  # a session waits: nothing is held back any more
        if not self._done.is_set():  # (its acknowledgement may have come during the flush)
            self._worker.awaited(self, True)
            try:
                with anyio.CancelScope(shield=True):
                    await self._done.wait()
            finally:
                self._worker.awaited(self, False)
        if self.error is not None:
            raise self.error


class _Evidence:
    """What a worker's session runner sees as its store: the driver's writer, over the
    channel. The runner calls only ``submit`` and ``put_artifact``.

    A batch is held with the worker's other frames until one must go or a session waits for
    it (see :meth:`_Worker.post`): sent at once, each session's first batch cost the driver a
    commit and an acknowledgement of its own (measured: ~2 commits a session instead of ~0.1,
    twice the driver's CPU)."""

    __slots__ = ("_key", "_worker")

    def __init__(self, worker: _Worker, key: int) -> None:
        self._worker = worker
        self._key = key

    async def submit(
        self, rows: Sequence[RecordRow], blobs: Mapping[str, bytes] | None = None
    ) -> Pending:
        worker = self._worker
        if worker.gone:
            raise StoreError(worker.why_gone())
        waiting = _Acknowledged(worker)
        batch = next(worker.numbers)
        worker.acks[batch] = waiting
        worker.post(Batch(self._key, batch, list(rows), dict(blobs or {})))
        if worker.pressed:
            # Handed over: shielded inside, so the recorder learns its outcome all the same.
            await worker.flush()
        return cast(Pending, waiting)

    async def put_artifact(self, data: bytes) -> str:
        waiting = _Acknowledged(self._worker)
        request = next(self._worker.numbers)
        self._worker.acks[request] = waiting
        await self._worker.send(Artifact(request, data))
        await waiting.committed()
        return self._worker.stored.pop(request)


class _Worker:
    def __init__(
        self, channel: WorkerChannel, group: TaskGroup, recipe: Recipe, progress: bool
    ) -> None:
        self._channel = channel
        self._group = group
        self._scenarios, self._plan_session, self._runner_class, budget = recipe
        self._budget = _ForcedBudget(budget) if budget is not None else None
        self._progress = progress
        self.numbers = count()
        """Batch and artifact request numbers, unique in this worker."""
        self.acks: dict[int, _Acknowledged] = {}
        self.stored: dict[int, str] = {}
        self._sessions: dict[int, tuple[anyio.CancelScope, PauseRequest]] = {}
        self._paused: tuple[str | None] | None = None
        self.gone = False
        """Whether the driver went away (or the channel broke): nothing more can be committed."""
        self.failure: Exception | None = None
        """What broke the channel, other than the driver going away: the worker ends with it."""
        self._tell = channel.waiting if isinstance(channel, TellsWaiting) else None
        self._awaited: set[_Acknowledged] = set()
        """What sessions wait for now: the driver's word on these."""
        self._stuck = False
        """What the channel was last told: every session waits for the driver (or none runs)."""
        self._starting = 0
        """Sessions the driver sent whose task has not begun yet (they will send frames)."""
        self._held: list[bytes] = []
        """Frames no session waits for yet, held for one that must go now (see :meth:`post`)."""
        self._in_channel = 0
        """Frames the channel has not taken yet: those of its sends under way."""
        self._progress_said: list[Turns] = []
        self._settled: list[int] = []
        self._holding = False
        """Whether a task sends what is held once :data:`HOLD_SECONDS` have passed."""

    def awaited(self, waiting: _Acknowledged, awaits: bool) -> None:
        """A session began or stopped waiting for the driver's word on ``waiting``."""
        if awaits:
            self._awaited.add(waiting)
        else:
            self._awaited.discard(waiting)
        self._tell_if_stuck()

    def _tell_if_stuck(self, again: bool = False) -> None:
        """Tell a channel that wants to know (Ray's, which holds acknowledgements back for the
        next call) when the worker can go no further without the driver: on a change, and
        ``again`` after each frame of the driver's that left it stuck (the channel may have
        held its word back while that frame was on its way)."""
        if self._tell is not None:
            stuck = len(self._awaited) >= len(self._sessions) + self._starting
            if stuck != self._stuck or (again and stuck):
                self._stuck = stuck
                self._tell(stuck)

    async def send(self, frame: Any) -> None:
        """Send ``frame`` now, after what is held; once the driver is gone, a
        :class:`StoreError` — to a session, the store it writes to cannot be written any more."""
        await self._send([encode(frame)])

    async def flush(self) -> None:
        """Send what is held now (a session waits for the driver's word on it)."""
        await self._send([])

    def post(self, frame: Any) -> None:
        """Queue ``frame``, which no session waits for yet (a batch whose commit nobody awaits
        so far, a session's name): it goes with the next frame that must go now, or after
        :data:`HOLD_SECONDS`. Every write of the worker's wakes the driver, and those writes
        cost the driver more than the frames they carry."""
        self._held.append(encode(frame))
        self._hold()

    @property
    def pressed(self) -> bool:
        """Whether a batch just held must go now, its session waiting for the channel: what is
        held and what the channel has not taken yet come to :data:`HELD_FRAMES`. Once the
        channel stops taking frames (the driver reads nothing more), every session then adds
        one batch at most before it waits too, as it did when each batch went by itself."""
        return len(self._held) + self._in_channel >= HELD_FRAMES

    def _note(self, progress: Turns | None = None, settled: int | None = None) -> None:
        """Gather news for the driver (callbacks are sync): it goes as one :class:`News` frame
        with whatever is sent next."""
        if progress is not None:
            self._progress_said.append(progress)
        if settled is not None:
            self._settled.append(settled)
        self._hold()

    def _hold(self) -> None:
        if not self._holding:
            self._holding = True
            self._group.start_soon(self._send_held_later)

    async def _send_held_later(self) -> None:
        await anyio.sleep(HOLD_SECONDS)
        self._holding = False
        with contextlib.suppress(StoreError):  # the driver is gone, or the channel broke
            await self.flush()

    async def _send(self, frames: list[bytes]) -> None:
        """Send what is held, then ``frames``, in one operation (the channel keeps the order
        of its senders' frames, see :class:`~.channel.WorkerChannel`). Shielded: what is taken
        from the held frames must reach the channel (a batch handed over is acknowledged or
        refused, never dropped), as a write under way must end. Should the channel fail
        otherwise, those frames are lost: the worker ends (:attr:`failure`), so that the
        driver retries its sessions rather than wait for them."""
        with anyio.CancelScope(shield=True):
            if self.gone:
                raise StoreError(self.why_gone())
            held, self._held = self._held, []
            if self._progress_said or self._settled:
                held.append(encode(News(self._progress_said, self._settled)))
                self._progress_said, self._settled = [], []
            held += frames
            if not held:
                return
            self._in_channel += len(held)
            try:
                await self._channel.send_many(held)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._lose_driver()
                raise StoreError(_DRIVER_GONE) from None
            except Exception as exc:
                self._break(exc)
                raise StoreError(self.why_gone()) from exc
            finally:
                self._in_channel -= len(held)

    def _break(self, failure: Exception) -> None:
        """The channel failed and frames taken from the hold are lost with it: end every
        session and the experiment; :func:`serve` raises ``failure``, which ends the worker."""
        self.failure = failure
        self._lose_driver()
        self._group.cancel_scope.cancel()

    def why_gone(self) -> str:
        """What a session told it can commit nothing more learns."""
        if self.failure is None:
            return _DRIVER_GONE
        return f"this worker's channel to the driver failed: {self.failure!r}"

    def _lose_driver(self) -> None:
        """The driver is gone: every batch still waiting for its acknowledgement never gets
        one, and its session learns so instead of waiting for ever."""
        self.gone = True
        self._resolve_all(self.why_gone())

    def _resolve_all(self, why: str) -> None:
        for waiting in self.acks.values():
            waiting.resolve(why)
        self.acks.clear()

    async def listen(self) -> bool:
        """Follow the driver's frames until it closes the experiment (``True``) or goes away."""
        self._tell_if_stuck()  # no session yet: it waits for the driver's first
        while True:
            try:
                frame = decode_driver_frame(await self._channel.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self._lose_driver()
                return False
            if isinstance(frame, Ack):
                if (waiting := self.acks.pop(frame.batch, None)) is not None:
                    waiting.resolve(frame.error)
            elif isinstance(frame, Acks):
                for batch in frame.batches:
                    if (waiting := self.acks.pop(batch, None)) is not None:
                        waiting.resolve(None)
            elif isinstance(frame, Run | Resume):
                self._starting += 1
                self._group.start_soon(self._session, frame)
            elif isinstance(frame, Stored):
                if frame.sha256 is not None:
                    self.stored[frame.request] = frame.sha256
                if (waiting := self.acks.pop(frame.request, None)) is not None:
                    waiting.resolve(frame.error)
            elif isinstance(frame, Pause):
                self._paused = (frame.reason,)
                for _, pause in self._sessions.values():
                    pause.request(frame.reason)
            elif isinstance(frame, Spent):
                if self._budget is not None:
                    self._budget.forced = frame.reason
            elif isinstance(frame, Cancel):
                if (found := self._sessions.get(frame.key)) is not None:
                    scope, pause = found
                    pause.stop_reason = frame.reason
                    scope.cancel()
            elif isinstance(frame, Close):
                self._resolve_all(_CLOSED)  # a session still waiting is cancelled next
                return True
            self._tell_if_stuck(again=True)

    async def _session(self, run: Run | Resume) -> None:
        key = run.key
        pause = PauseRequest()
        if self._paused is not None:
            pause.request(self._paused[0])
        ended: Ended | None = None
        with anyio.CancelScope() as scope:
            self._sessions[key] = (scope, pause)
            self._starting -= 1
            self._tell_if_stuck()
            try:
                ended = await self._play(run, pause)
            except StoreError as exc:
                ended = Ended(key, crash=str(exc), store_error=True)
            except ConfigurationError as exc:  # a factory that failed, say: the user's to fix
                ended = Ended(key, crash=str(exc), configuration=True)
            except Exception as exc:  # noqa: BLE001 - a bug, reported to the driver, raised there
                ended = Ended(key, crash=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            finally:
                del self._sessions[key]
                self._tell_if_stuck()
        with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
            await self.send(ended or Ended(key))

    async def _play(self, run: Run | Resume, pause: PauseRequest) -> Ended:
        key = run.key
        scenario = self._scenarios[run.scenario]
        plan = self._plan_session(scenario, run.trial, run.seed, session_id=run.session_id)
        resumption: Resumption | None = None
        if isinstance(run, Resume):
            point: ResumePoint = pickle.loads(run.point)
            state = restore_state(run.state, plan.environment.spec.state_type)
            resumption = point.resumption(state, tuple(run.changes))
        self.post(Named(key, plan.session_id))
        # When progress is watched, the driver tells it only once the session's start is
        # committed, so the session need not wait for that commit before it plays. A retry
        # then still waits for it, as it would in this process (where a session waits for its
        # start only when progress is watched or an agent has a lifespan): its segment then
        # shows in the chain even if it is lost at once.
        plan = dataclasses.replace(
            plan,
            pause=pause,
            settling=lambda: self._note(settled=key),
            shared_budget=self._budget,
            progress_follows_commits=resumption is None,
        )
        progress = None
        if self._progress:

            def progress(session_id: str, turns: int, planned: int) -> None:
                self._note(progress=Turns(key, session_id, turns, planned))

        store = cast(Store, _Evidence(self, key))
        runner = self._runner_class(store, plan, progress, resumption)
        result = await runner.run()
        return Ended(
            key,
            status=result.status,
            turns_completed=result.turns_completed,
            reason=result.reason,
            error=result.error,
            ended_by=result.ended_by,
        )
