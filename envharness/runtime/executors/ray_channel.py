"""The driver's end of a Ray worker actor, and the actor: frames over actor calls.

Frames travel batched both ways: the driver hands over every frame waiting to go in one
``push`` call, and waits for the worker's frames with a long-poll ``pull`` that returns every
frame queued by then — never one call per record. An actor call costs the driver about half a
millisecond of CPU, more than everything else it does for a frame, so frames no session needs
at once (acknowledgements) ride on the next pull rather than a push of their own; they go alone
only once the worker says it can go no further without them, or after a short hold. An
:class:`~ray.ObjectRef` can be awaited only on asyncio, so the driver waits for them in worker
threads on either backend (one thread per link waiting on its pull, not one per call). A Ray
async actor does not promise to run calls in the order they were made, so every call that
carries frames is numbered and the actor hands them to the worker in that order.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from itertools import count
from typing import TYPE_CHECKING, Any, final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.runtime.executors.channel import WorkerChannel
from envharness.runtime.executors.queueing import send_promptly
from envharness.runtime.executors.ray_cluster import import_ray

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = [
    "OUTBOX_FRAMES",
    "REAP_SECONDS",
    "RIDE_SECONDS",
    "RayChannel",
    "Serve",
    "WorkerActor",
    "first_line",
]

Serve = Callable[[WorkerChannel], Awaitable[None]]
"""The worker side a Ray actor runs on its end of the channel (``worker.serve``)."""

OUTBOX_FRAMES = 64
"""Frames a worker may queue for the driver before its sessions wait (back-pressure): with
batches of ``HOLD_ROWS`` records, a few megabytes at most."""
REAP_SECONDS = 5.0
"""How long a dead worker on this machine is given to be reaped before its channel breaks
anyway: a retry takes a session over only from a runner that is certainly gone, and a killed
process lingers (a zombie) until Ray's raylet, its parent, reaps it."""
REAP_POLL = 0.005
"""How often the driver looks whether that process is gone yet."""
RIDE_SECONDS = 0.02
"""How long a frame sent with ``send_soon`` waits for a call going anyway before it is pushed
by itself, when the worker has not said it waits for it: a worker busy with sessions that send
nothing for a while (their agents think) still gets its acknowledgements."""

_WAKE = None
"""Put in the actor's outbox to end a pull early: the worker now waits for the driver."""


def first_line(exc: BaseException) -> str:
    """Ray's errors run to dozens of lines; the first says what happened."""
    said = str(exc).strip().split("\n")[0]
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


@final
class RayChannel:
    """The driver's end of one worker actor.

    A send returns once its frame is queued to go, as a socket's does once its bytes are in the
    kernel's buffer: the sender that finds no push in flight pushes, one call at a time, every
    frame queued until none that must go now is left, and the others return at once. (The
    queue needs no bound of its own: the driver sends only what the worker's own frames and the
    experiment's concurrency call for.) ``send_soon`` queues a frame for the next call, push or
    pull, whichever goes first (see :class:`~.channel.LazySends`). A worker that died makes the
    next send raise, and the receives, which tell the driver which sessions to retry. Receives
    pull every frame the worker queued in one call; a pull whose receive was cancelled is kept
    and collected by the next receive, so no frame is lost either way.
    """

    def __init__(self, actor: ActorHandle[Any], name: str, host: str, pid: int) -> None:
        self._actor = actor
        self.name = name
        self._host = host
        self.pid = pid
        self._queued: list[bytes] = []
        self._urgent = False
        """Whether a frame queued must go now (by a push, if no pull takes it first)."""
        self._numbers = count()
        """Numbers the calls that carry frames: the actor hands them over in this order."""
        self._pushed: anyio.Event | None = None
        """Set once the push loop in flight, if any, has sent every frame that must go."""
        self._taken: anyio.Event | None = None
        """Set once a call takes the frames a ``send_soon`` holds for."""
        self._worker_waits = True
        """What the last pull said: the worker can go no further without the driver (so every
        frame goes at once). Until a pull said otherwise, it may."""
        self._incoming: deque[bytes] = deque()
        self._pull: _Pull | None = None
        self._receiving = False
        self._ended: anyio.EndOfStream | anyio.BrokenResourceError | None = None
        self._broken: anyio.BrokenResourceError | None = None
        self._closed = False

    def _sendable(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._broken is not None:
            raise self._broken

    async def send(self, frame: bytes) -> None:
        self._sendable()
        self._queued.append(frame)
        self._urgent = True
        if self._pushed is None:
            await self._push_all()
        if self._broken is not None:
            raise self._broken

    async def send_soon(self, frame: bytes) -> None:
        """Queue ``frame`` for the next call; push it only if the worker waits for the driver
        or no call took it within :data:`RIDE_SECONDS` (the sender waits that long at most)."""
        self._sendable()
        self._queued.append(frame)
        if self._worker_waits:
            self._urgent = True
        elif self._taken is not None:  # another sender waits for a call: it covers this frame
            return
        else:
            taken = self._taken = anyio.Event()
            # Shielded, as a push is: a cancelled sender's frame is queued all the same, and
            # its caller must not be told otherwise (a session started must be cancelled).
            with anyio.CancelScope(shield=True), anyio.move_on_after(RIDE_SECONDS):
                await taken.wait()
            if not taken.is_set():
                self._taken = None
                self._urgent = True
        if self._urgent and self._pushed is None:
            await self._push_all()
        if self._broken is not None:
            raise self._broken

    def _take(self) -> tuple[int, list[bytes]]:
        """Every frame queued, numbered, for the call about to go."""
        frames, self._queued = self._queued, []
        self._urgent = False
        if self._taken is not None:
            self._taken.set()
            self._taken = None
        return next(self._numbers), frames

    async def _push_all(self, close: bool = False) -> None:
        """Push until nothing that must go now is queued. Shielded: a cancelled sender still
        hands over what the others queued behind it (each push is one actor call, or Ray's word
        it died)."""
        pushed = self._pushed = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):
                while ((self._urgent and self._queued) or close) and self._broken is None:
                    number, frames = self._take()
                    failure = await anyio.to_thread.run_sync(self._push, number, frames, close)
                    close = False
                    if failure is not None:
                        self._broken = anyio.BrokenResourceError(f"{self.name} died: {failure}")
        finally:
            self._pushed = None
            pushed.set()

    def _push(self, number: int, frames: list[bytes], close: bool) -> str | None:
        ray = import_ray()
        try:
            ray.get(self._actor.push.remote(number, frames, close))
        except ray.exceptions.RayError as exc:
            self._await_reaping()
            return first_line(exc)
        return None

    async def receive(self) -> bytes:
        if self._receiving:
            raise anyio.BusyResourceError("receiving from")
        self._receiving = True
        try:
            while not self._incoming:
                if self._closed:
                    raise anyio.ClosedResourceError
                if self._ended is not None:
                    raise self._ended
                if self._pull is None:  # else a cancelled receive's, not collected yet
                    self._pull = _Pull(*self._take()) if self._queued else _Pull(None, [])
                pull = self._pull
                frames, ended, failure, waits = await anyio.to_thread.run_sync(
                    self._collect, pull, abandon_on_cancel=True
                )
                self._pull = None  # collected: the next receive asks for more
                self._worker_waits = waits
                self._incoming.extend(frames)
                if failure is not None:
                    self._ended = anyio.BrokenResourceError(f"{self.name} {failure}")
                elif ended:
                    self._ended = anyio.EndOfStream()
            return self._incoming.popleft()
        finally:
            self._receiving = False

    def _collect(self, pull: _Pull) -> tuple[list[bytes], bool, str | None, bool]:
        ray = import_ray()
        with pull.making:  # once: a cancelled receive's thread may still be making it
            if pull.ref is None:
                pull.ref = self._actor.pull.remote(pull.number, pull.frames)
        try:
            frames, ended, failure, waits = ray.get(pull.ref)
        except ray.exceptions.RayError as exc:
            self._await_reaping()
            return [], True, f"died: {first_line(exc)}", True
        return frames, ended, None if failure is None else f"failed: {failure}", waits

    def _await_reaping(self) -> None:
        """Once Ray says the worker died, wait (in this worker thread, bounded) until its
        process is gone, where this machine can tell: on another host Ray's word is all."""
        if self._host != socket.gethostname():
            return
        deadline = time.monotonic() + REAP_SECONDS
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except (ProcessLookupError, PermissionError):  # gone (its pid another user's)
                return
            time.sleep(REAP_POLL)

    async def aclose(self) -> None:
        """Close the driver's end: the worker's receive ends, and ``serve`` with it."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._pushed is not None:
                await self._pushed.wait()
            if self._broken is None and self._ended is None:
                await self._push_all(close=True)


@final
class _Pull:
    """One pull call: the frames it carries to the worker go once, however many receives (a
    cancelled one, then the next) wait for its answer."""

    __slots__ = ("frames", "making", "number", "ref")

    def __init__(self, number: int | None, frames: list[bytes]) -> None:
        self.number = number
        self.frames = frames
        self.making = threading.Lock()
        self.ref: Any = None


class WorkerActor:
    """A worker, as a Ray actor: its ``run`` call serves the driver until the driver closes.

    Made a Ray actor class by ``ray.remote`` when first used; async, so that ``push`` and
    ``pull`` run while ``run`` does, all on the actor's one asyncio loop.
    """

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self._to_worker, self._inbox = anyio.create_memory_object_stream[bytes](math.inf)
        """Unbounded on purpose: the driver sends only what the worker asked for by its own
        frames (its sessions, their acknowledgements), so it cannot flood the worker."""
        self._outbox, self._to_driver = anyio.create_memory_object_stream[bytes | None](
            OUTBOX_FRAMES
        )
        self._failure: str | None = None
        self._next = 0
        """The number of the next call whose frames go to the worker."""
        self._early: dict[int, tuple[list[bytes], bool]] = {}
        """Frames of calls that overtook an earlier one, held until it comes."""
        self._stuck = False
        """Whether the worker can go no further without the driver."""
        self._told = True
        """Whether the driver was last told so (it pushes every frame at once until told not)."""

    async def whereabouts(self) -> tuple[str, int]:
        """The host and pid of the worker's process (named so in messages and records)."""
        return socket.gethostname(), os.getpid()

    async def run(self) -> None:
        try:
            await self._serve(_ActorEnd(self._inbox, self._outbox, self._waiting))
        except Exception as exc:  # noqa: BLE001 - reported to the driver by the next pull
            self._failure = "".join(traceback.format_exception_only(exc)).strip()
        finally:
            self._outbox.close()
            self._inbox.close()

    def _waiting(self, stuck: bool) -> None:
        """The worker's word; with a frame of the driver's still in its inbox it is told
        again once that frame is taken, so a pull waits for that."""
        self._stuck = stuck
        if self._stuck_now() and not self._told:  # the driver may hold back what it waits for
            # A full outbox ends the pull anyway; a closed one, the worker.
            with contextlib.suppress(
                anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
            ):
                self._outbox.send_nowait(_WAKE)

    def _stuck_now(self) -> bool:
        """Stuck, and no frame of the driver's is on its way to the worker."""
        return self._stuck and self._inbox.statistics().current_buffer_used == 0

    def _deliver(self, number: int | None, frames: list[bytes], close: bool) -> None:
        if number is None:
            return
        self._early[number] = (frames, close)
        while self._next in self._early:
            frames, close = self._early.pop(self._next)
            self._next += 1
            try:
                for frame in frames:
                    self._to_worker.send_nowait(frame)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the worker has ended: nothing reads these
            if close:
                self._to_worker.close()

    async def push(self, number: int, frames: list[bytes], close: bool) -> None:
        self._deliver(number, frames, close)

    async def pull(
        self, number: int | None, frames: list[bytes]
    ) -> tuple[list[bytes], bool, str | None, bool]:
        """Hand over the frames the call carries, then return every frame the worker queued,
        waiting for the first — or until the worker can go no further without the driver, who
        was not told so; ``True`` once the worker ended."""
        self._deliver(number, frames, False)
        out: list[bytes] = []
        while not (self._stuck_now() and not self._told):
            try:
                frame = await self._to_driver.receive()
            except anyio.EndOfStream:
                return [], True, self._failure, True
            if frame is not None:
                out.append(frame)
                break
        while True:
            try:
                frame = self._to_driver.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            if frame is not None:
                out.append(frame)
        self._told = self._stuck_now()
        return out, False, None, self._told


@final
class _ActorEnd:
    """The worker's end of the channel, inside the actor."""

    __slots__ = ("_inbox", "_outbox", "_sending", "_tell")

    def __init__(
        self,
        inbox: MemoryObjectReceiveStream[bytes],
        outbox: MemoryObjectSendStream[bytes | None],
        tell: Callable[[bool], None],
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._tell = tell
        self._sending = anyio.Lock(fast_acquire=True)
        """Taken with no pass of the loop when free, as the frames go in (anyio 4.5 or later)."""

    def waiting(self, stuck: bool) -> None:
        """The worker says whether it can go no further without the driver
        (:class:`~.channel.TellsWaiting`): the actor's pending pull ends early if so."""
        self._tell(stuck)

    async def send(self, frame: bytes) -> None:
        await self._outbox.send(frame)

    async def send_many(self, frames: list[bytes]) -> None:
        """Queue ``frames`` without a pass of the loop between them, so that the pull waiting
        takes them all in one answer (:class:`~.channel.SendsMany`); wait only while the outbox
        is full, and then the next sender waits behind, so frames keep their order."""
        async with self._sending:
            for frame in frames:
                await send_promptly(self._outbox, frame)

    async def receive(self) -> bytes:
        return await self._inbox.receive()

    async def aclose(self) -> None:
        self._outbox.close()
        self._inbox.close()
