"""``envharness stop`` and ``envharness pause`` from another process: the runner's side.

Only the process running a session can stop or pause it. While a harness runs sessions (or an
experiment), each is *reachable*: registered with the harness's :class:`RemoteControl` with the
in-process pause and stop it already has (its :class:`~envharness.runtime.plan.PauseRequest`,
the cancel scope around it). One watcher per harness — whichever reachable run holds the lead
— reads the store every :data:`POLL_INTERVAL_S` for requests addressed to this process
(:mod:`envharness.store.control`), takes those for its targets, and hands each to its target;
the target's own task then pauses or stops it, exactly as the in-process call would, so the
session records ``paused`` or ``stopped`` the same way, with a reason naming who asked.

Every watcher task is owned by the task group of the run it serves and cancelled when that run
ends; the lead passes to another run's watcher. Watchers that do not lead only look at their
own target between sleeps, so many concurrent runs cost one query per interval, not one each,
and none per turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from os import PathLike
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from envharness.errors import StoreError, collapsing
from envharness.records import utc_now_text
from envharness.runtime.plan import PauseRequest
from envharness.store.control import ControlRequest, ControlRequests
from envharness.store.locate import postgres_url
from envharness.store.owners import this_process
from envharness.store.postgres.backend import PostgresBackend

__all__ = ["POLL_INTERVAL_S", "Reach", "RemoteControl"]

POLL_INTERVAL_S = 0.5
"""How often the lead watcher reads the store for requests (tests may shrink it)."""


class Reach:
    """One run that another process can stop or pause, and what it was asked."""

    __slots__ = ("_delivered", "_pause", "_stop", "since", "taken", "target")

    def __init__(self, target: str, pause: PauseRequest, stop: Callable[[], None]) -> None:
        self.target = target
        self.since = utc_now_text()
        """Only requests asked from now on are this run's: one left over from an earlier run
        of the same session in this process (asked as that run ended) is not."""
        self._pause = pause
        self._stop = stop
        self._delivered: list[ControlRequest] = []
        """Taken by the lead watcher (maybe on another thread's loop), not yet acted on."""
        self.taken: list[ControlRequest] = []
        """The requests carried out, in order: who asked, and when."""

    def deliver(self, request: ControlRequest) -> None:
        self._delivered.append(request)

    def act(self) -> None:
        """Carry out what was delivered, on the run's own event loop."""
        while self._delivered:
            request = self._delivered.pop(0)
            asker = f"on request of {request.asked_by}; resume it to go on"
            if request.verb == "pause":
                self._pause.request(f"paused {asker}")
            else:
                self._pause.stop_reason = f"stopped {asker}"
                self._stop()
            self.taken.append(request)


class RemoteControl:
    """The runs of one harness that ``envharness stop`` / ``pause`` can reach."""

    def __init__(self, store: str | PathLike[str], *, interval: float | None = None) -> None:
        url = postgres_url(store)
        self._requests = ControlRequests(
            Path(store) if url is None else PostgresBackend(url, keep=True)
        )
        self._interval = POLL_INTERVAL_S if interval is None else interval
        self._reaches: dict[str, Reach] = {}
        self._lead: object | None = None

    @asynccontextmanager
    async def reachable(
        self, target: str, *, pause: PauseRequest, stop: Callable[[], None]
    ) -> AsyncIterator[Reach]:
        """Make ``target`` (a full session or experiment id) reachable for the block.

        ``pause`` is the request the run pauses by, and ``stop`` its in-process stop (it
        cancels the run), called on the run's own loop once the request's ``stop_reason``
        names who asked. An error the block raises comes out as itself, not wrapped in the
        watcher's task group.
        """
        reach = Reach(target, pause, stop)
        before = self._reaches.get(target)
        self._reaches[target] = reach
        try:
            with collapsing():
                async with anyio.create_task_group() as group:
                    await group.start(self._watch, reach)
                    try:
                        yield reach
                    finally:
                        group.cancel_scope.cancel()
        finally:
            if self._reaches.get(target) is reach:
                if before is None:
                    del self._reaches[target]
                else:
                    self._reaches[target] = before
            if not self._reaches:  # nothing left to watch for: no connection kept idle
                await self._requests.aclose()

    async def _watch(self, reach: Reach, *, task_status: TaskStatus[None]) -> None:
        me = object()
        task_status.started()
        try:
            while True:
                await anyio.sleep(self._interval)
                if self._lead is None:
                    self._lead = me
                if self._lead is me:
                    await self._poll()
                reach.act()
        finally:
            if self._lead is me:
                self._lead = None

    async def _poll(self) -> None:
        """Take the requests addressed to this process for the runs registered here."""
        try:
            pending = await self._requests.pending(this_process())
            ours = [
                request.id
                for request in pending
                if (reach := self._reaches.get(request.target)) is not None
                and request.asked_at >= reach.since
            ]
            taken = await self._requests.take(ours) if ours else []
        except StoreError:
            return  # busy or briefly unreadable: the request waits for the next poll
        for request in taken:
            found = self._reaches.get(request.target)
            if found is not None:
                found.deliver(request)
