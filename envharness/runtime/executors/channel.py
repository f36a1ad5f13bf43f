"""The link between the driver and one worker, whatever carries it (issue 14).

A remote executor runs sessions in worker processes — a local process pool, or Ray actors —
and keeps the store in the driver: the worker plays the turns and seals the records, the
driver's single writer commits them. Everything the two say to each other goes as *frames*
(bytes, msgspec-encoded messages) over a :class:`Channel`, so the driver's logic (dispatch,
commits and acknowledgements, retries when a worker dies) is written once and each carrier
only moves bytes: pipes for the pool, actor calls for Ray.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Channel", "LazySends", "SendsMany", "TellsWaiting", "WorkerChannel", "WorkerSpawner"]


class Channel(Protocol):
    """One worker's link, as one side sees it: frames in order, each delivered once.

    ``receive`` raises :class:`anyio.EndOfStream` once the other side has closed its end,
    and :class:`anyio.BrokenResourceError` when the other side died (a worker killed with
    SIGKILL, a Ray node removed): the driver then retries that worker's sessions.
    """

    async def send(self, frame: bytes) -> None: ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LazySends(Protocol):
    """A driver's end whose every send is a call of its own (Ray's): a frame no session needs
    at once (an acknowledgement) may wait to ride on the next call that goes anyway.

    ``send_soon`` queues the frame and returns; the frame goes with the next call, and by
    itself only once the worker has nothing left to do but wait for the driver (it says so,
    see :class:`TellsWaiting`) or after a short hold — a worker is never left waiting on a
    frame the driver keeps back.
    """

    async def send_soon(self, frame: bytes) -> None: ...


@runtime_checkable
class SendsMany(Protocol):
    """An end that sends several frames as one operation (one write, one wakeup of the other
    side), in order, where sending them one by one would cost one each."""

    async def send_many(self, frames: list[bytes]) -> None: ...


class WorkerChannel(Channel, SendsMany, Protocol):
    """A worker's end. It sends what it held back as one operation, in order, and keeps that
    order between senders, so the worker needs no lock of its own: with one, the sender that
    writes would hold every other back for its write (measured: two pool workers lost up to a
    fifth of their sessions a second so)."""


@runtime_checkable
class TellsWaiting(Protocol):
    """A worker's end that wants to know when the worker can go no further without the driver:
    every session it runs waits for the driver's word (an acknowledgement), or it runs none."""

    def waiting(self, stuck: bool) -> None: ...


class WorkerSpawner(Protocol):
    """Starts workers of one kind; each serves the worker side of the protocol
    (``envharness.runtime.executors.worker.serve(channel)``) on its end of the channel."""

    @property
    def kind(self) -> str:
        """What the workers are, for messages: ``"process pool"``, ``"Ray"``."""
        ...

    async def start(self, index: int) -> Channel:
        """A fresh worker, ready to receive frames; ``index`` names it in messages."""
        ...

    async def aclose(self) -> None:
        """Stop every worker this spawner started (their channels break)."""
        ...
