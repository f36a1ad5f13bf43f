"""The link between the driver and one worker, whatever carries it (issue 14).

A remote executor runs sessions in worker processes — a local process pool, or Ray actors —
and keeps the store in the driver: the worker plays the turns and seals the records, the
driver's single writer commits them. Everything the two say to each other goes as *frames*
(bytes, msgspec-encoded messages) over a :class:`Channel`, so the driver's logic (dispatch,
commits and acknowledgements, retries when a worker dies) is written once and each carrier
only moves bytes: pipes for the pool, actor calls for Ray.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Channel", "WorkerSpawner"]


class Channel(Protocol):
    """One worker's link, as one side sees it: frames in order, each delivered once.

    ``receive`` raises :class:`anyio.EndOfStream` once the other side has closed its end,
    and :class:`anyio.BrokenResourceError` when the other side died (a worker killed with
    SIGKILL, a Ray node removed): the driver then retries that worker's sessions.
    """

    async def send(self, frame: bytes) -> None: ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


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
