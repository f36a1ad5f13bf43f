"""Whether anything but the sessions themselves is ready to run on the current event loop.

A session playing fast turns passes the loop only when that does something: when another task
is ready (a watcher an agent woke, a request the service must answer), not merely to poll for
I/O, which on asyncio gives up the GIL on every pass
(:data:`~envharness.runtime.recorder.YIELD_SECONDS`). Other sessions passing the loop do not
count: sessions taking turns every turn cost a concurrent experiment ~10% of its CPU, and they
take turns at least every millisecond anyway.

anyio cannot say what is ready. asyncio's loop keeps its ready callbacks in a deque
(``_ready``: private, but there since Python 3.4), each taken out only as it runs, and a
session passing the loop leaves exactly one there (its task's next step) until it resumes.
Elsewhere the answer is always yes, and a session yields every turn, as it always may: trio
counts as runnable only the tasks outside the batch it is running, so a task woken earlier in
that batch would be missed, and other loops (uvloop) do not show theirs.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from typing import Any

__all__ = ["LoopPasses", "loop_passes"]


class LoopPasses:
    """The sessions of one loop passing it: how many wait to resume right now."""

    __slots__ = ("_ready", "passing")

    def __init__(self, ready: collections.deque[Any] | None) -> None:
        self._ready = ready
        self.passing = 0
        """Sessions that passed the loop and have not resumed yet."""

    def others_ready(self) -> bool:
        """Whether a task or callback other than those sessions is ready to run (always, on
        a loop that does not show what is ready)."""
        return self._ready is None or len(self._ready) > self.passing


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPasses] = (
    weakref.WeakKeyDictionary()
)


_UNSEEN = LoopPasses(None)
"""For every loop that does not show what is ready: its answer is always yes."""


def loop_passes() -> LoopPasses:
    """The running loop's :class:`LoopPasses`, shared by all its sessions."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio's loop (trio's)
        return _UNSEEN
    passes = _by_loop.get(loop)
    if passes is None:
        ready = getattr(loop, "_ready", None)
        if not isinstance(ready, collections.deque):
            return _UNSEEN
        passes = LoopPasses(ready)
        try:
            _by_loop[loop] = passes
        except TypeError:  # a loop that cannot be weakly referenced: not kept, nor shared
            return _UNSEEN
    return passes
