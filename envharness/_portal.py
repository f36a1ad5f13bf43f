"""The one way blocking code reaches the async core: an anyio blocking portal.

Every blocking face (:class:`~envharness.EnvironmentHarness`, its experiments and sources,
the blocking client, the optimizer's blocking calls) is a thin portal over the async
implementation, never a second one (docs/architecture.md). :class:`Portal` keeps one portal
while its owner is open (``with harness:``) and starts one per call otherwise; :func:`call`
and :func:`iterate` are the two ways through it.

Works in scripts and inside notebooks whose own loop is running; from async code, await the
async API instead of blocking its loop.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, ParamSpec, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

__all__ = ["BATCH", "Portal", "call", "call_blocking", "iterate"]

BATCH = 1000
"""Items a blocking iteration takes from the event loop per trip."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Portal:
    """A blocking face's way onto an event loop: shared while open, else one per call."""

    __slots__ = ("_portal", "_stack")

    def __init__(self) -> None:
        self._portal: BlockingPortal | None = None
        self._stack: ExitStack | None = None

    @property
    def shared(self) -> BlockingPortal | None:
        """The portal kept open by :meth:`open` (``None`` while closed)."""
        return self._portal

    def open(self, *contexts: Any) -> BlockingPortal:
        """Start the shared portal and enter ``contexts`` (async context managers) in it;
        :meth:`close` leaves them in reverse order and stops the portal."""
        with ExitStack() as stack:
            portal = stack.enter_context(start_blocking_portal())
            for context in contexts:
                stack.enter_context(portal.wrap_async_context_manager(context))
            self._stack = stack.pop_all()
        self._portal = portal
        return portal

    def close(self) -> None:
        stack, self._stack, self._portal = self._stack, None, None
        if stack is not None:
            stack.close()

    def acquire(self, stack: ExitStack) -> BlockingPortal:
        """The shared portal, or a new one that ``stack`` stops: for work that outlives one
        call (a session or an experiment started in the background)."""
        if self._portal is not None:
            return self._portal
        return stack.enter_context(start_blocking_portal())

    @contextmanager
    def lease(self) -> Iterator[BlockingPortal]:
        """The shared portal, or a portal for the duration of the block."""
        with ExitStack() as stack:
            yield self.acquire(stack)

    def call(
        self, function: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run ``function`` to its end; Ctrl-C cancels it and waits while it records how it
        ended (a session's ``stopped``) before ``KeyboardInterrupt`` reaches the caller."""
        with self.lease() as portal:
            return call(portal, function, *args, **kwargs)

    def iterate(
        self, make: Callable[[], AsyncIterator[_T]], batch: int = BATCH
    ) -> Generator[_T, None, None]:
        """Iterate an async iterator from blocking code, ``batch`` items per trip."""
        with self.lease() as portal:
            yield from iterate(portal, make, batch)


def call(
    portal: BlockingPortal,
    function: Callable[_P, Awaitable[_T]],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """``portal.call`` that, on Ctrl-C, cancels the call and waits for its cleanup."""

    async def run() -> _T:
        return await function(*args, **kwargs)

    future = portal.start_task_soon(run)
    try:
        return future.result()
    except KeyboardInterrupt:
        # Cancel the call and wait while it records how it ended, also when the portal
        # outlives this call (``with EnvironmentHarness(...)``).
        future.cancel()
        concurrent.futures.wait([future])
        raise


def iterate(
    portal: BlockingPortal, make: Callable[[], AsyncIterator[_T]], batch: int = BATCH
) -> Generator[_T, None, None]:
    """Iterate an async iterator from blocking code through ``portal``, ``batch`` at a time.

    A producer task in the portal fills a stream of one batch (back-pressure: a slow consumer
    slows the producer instead of growing a buffer); stopping early cancels it.
    """
    send, receive = anyio.create_memory_object_stream[list[_T]](1)

    async def produce() -> None:
        async with send:
            iterator = make()
            items: list[_T] = []
            try:
                async for item in iterator:
                    items.append(item)
                    if len(items) >= batch:
                        await send.send(items)
                        items = []
            except Exception:
                if items:  # what came before the failure still arrives, then the failure
                    await send.send(items)
                raise
            else:
                if items:
                    await send.send(items)
            finally:
                aclose = getattr(iterator, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()

    future = portal.start_task_soon(produce)
    try:
        while True:
            try:
                items = portal.call(receive.receive)
            except anyio.EndOfStream:
                break
            yield from items
        future.result()  # the producer's error, if it failed
    finally:
        if not future.done():
            future.cancel()
            concurrent.futures.wait([future])
        portal.call(receive.aclose)


def call_blocking(work: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``work`` to completion from blocking code, on an event loop in a helper thread."""
    with start_blocking_portal() as portal:
        return portal.call(work)
