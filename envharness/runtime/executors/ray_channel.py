"""The driver's end of a Ray worker actor, and the actor: frames over actor calls.

Frames travel batched both ways: the driver hands over every frame waiting to go in one
``push`` call, and waits for the worker's frames with a long-poll ``pull`` that returns every
frame queued by then — never one call per record. An :class:`~ray.ObjectRef` can be awaited
only on asyncio, so the driver waits for them in worker threads on either backend (one thread
per link waiting on its pull, not one per call). A Ray async actor does not promise to run
calls in the order they were made, so one push is in flight per link at a time.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from envharness.runtime.executors.channel import Channel
from envharness.runtime.executors.ray_cluster import import_ray

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = ["OUTBOX_FRAMES", "REAP_SECONDS", "RayChannel", "Serve", "WorkerActor", "first_line"]

Serve = Callable[[Channel], Awaitable[None]]
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


def first_line(exc: BaseException) -> str:
    """Ray's errors run to dozens of lines; the first says what happened."""
    said = str(exc).strip().split("\n")[0]
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


@final
class RayChannel:
    """The driver's end of one worker actor.

    A send returns once its frame is queued to go, as a socket's does once its bytes are in the
    kernel's buffer: the sender that finds no push in flight pushes, in order and one call at a
    time, every frame queued until none is left, and the others return at once. (The queue
    needs no bound of its own: the driver sends only what the worker's own frames and the
    experiment's concurrency call for.) A worker that died makes the next send raise, and the
    receives, which tell the driver which sessions to retry. Receives pull every frame the
    worker queued in one call; a pull whose receive was cancelled is kept and collected by the
    next receive, so no frame is lost.
    """

    def __init__(self, actor: ActorHandle[Any], name: str, host: str, pid: int) -> None:
        self._actor = actor
        self.name = name
        self._host = host
        self.pid = pid
        self._outgoing: list[bytes] = []
        self._pushed: anyio.Event | None = None
        """Set once the push loop in flight, if any, has sent every frame queued."""
        self._incoming: deque[bytes] = deque()
        self._pulling = threading.Lock()
        self._pull_ref: Any = None
        self._receiving = False
        self._ended: anyio.EndOfStream | anyio.BrokenResourceError | None = None
        self._broken: anyio.BrokenResourceError | None = None
        self._closed = False

    async def send(self, frame: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._broken is not None:
            raise self._broken
        self._outgoing.append(frame)
        if self._pushed is None:
            await self._push_all()
        if self._broken is not None:
            raise self._broken

    async def _push_all(self, close: bool = False) -> None:
        """Push until nothing is queued. Shielded: a cancelled sender still hands over what
        the others queued behind it (each push is one actor call, or Ray's word it died)."""
        pushed = self._pushed = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):
                while (self._outgoing or close) and self._broken is None:
                    frames, self._outgoing = self._outgoing, []
                    failure = await anyio.to_thread.run_sync(self._push, frames, close)
                    close = False
                    if failure is not None:
                        self._broken = anyio.BrokenResourceError(f"{self.name} died: {failure}")
        finally:
            self._pushed = None
            pushed.set()

    def _push(self, frames: list[bytes], close: bool) -> str | None:
        ray = import_ray()
        try:
            ray.get(self._actor.push.remote(frames, close))
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
                frames, ended, failure = await anyio.to_thread.run_sync(
                    self._pull, abandon_on_cancel=True
                )
                self._pull_ref = None  # collected: the next receive asks for more
                self._incoming.extend(frames)
                if failure is not None:
                    self._ended = anyio.BrokenResourceError(f"{self.name} {failure}")
                elif ended:
                    self._ended = anyio.EndOfStream()
            return self._incoming.popleft()
        finally:
            self._receiving = False

    def _pull(self) -> tuple[list[bytes], bool, str | None]:
        ray = import_ray()
        with self._pulling:  # one pull in flight: a cancelled receive's is collected again
            if self._pull_ref is None:
                self._pull_ref = self._actor.pull.remote()
            ref = self._pull_ref
        try:
            frames, ended, failure = ray.get(ref)
        except ray.exceptions.RayError as exc:
            self._await_reaping()
            return [], True, f"died: {first_line(exc)}"
        return frames, ended, None if failure is None else f"failed: {failure}"

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
        self._outbox, self._to_driver = anyio.create_memory_object_stream[bytes](OUTBOX_FRAMES)
        self._failure: str | None = None

    async def whereabouts(self) -> tuple[str, int]:
        """The host and pid of the worker's process (named so in messages and records)."""
        return socket.gethostname(), os.getpid()

    async def run(self) -> None:
        try:
            await self._serve(_ActorEnd(self._inbox, self._outbox))
        except Exception as exc:  # noqa: BLE001 - reported to the driver by the next pull
            self._failure = "".join(traceback.format_exception_only(exc)).strip()
        finally:
            self._outbox.close()
            self._inbox.close()

    async def push(self, frames: list[bytes], close: bool) -> None:
        for frame in frames:
            try:
                self._to_worker.send_nowait(frame)
            except anyio.BrokenResourceError:  # the worker has ended: nothing reads these
                return
        if close:
            self._to_worker.close()

    async def pull(self) -> tuple[list[bytes], bool, str | None]:
        """Every frame the worker queued, waiting for the first; ``True`` once it ended."""
        try:
            frames = [await self._to_driver.receive()]
        except anyio.EndOfStream:
            return [], True, self._failure
        while True:
            try:
                frames.append(self._to_driver.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return frames, False, None


@final
class _ActorEnd:
    """The worker's end of the channel, inside the actor."""

    __slots__ = ("_inbox", "_outbox")

    def __init__(
        self,
        inbox: MemoryObjectReceiveStream[bytes],
        outbox: MemoryObjectSendStream[bytes],
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox

    async def send(self, frame: bytes) -> None:
        await self._outbox.send(frame)

    async def receive(self) -> bytes:
        return await self._inbox.receive()

    async def aclose(self) -> None:
        self._outbox.close()
        self._inbox.close()
