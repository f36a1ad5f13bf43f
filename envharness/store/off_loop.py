"""The store's blocking steps (opening with retries, confirming a WAL scan) wait with
``time.sleep``: they belong in a worker thread, where every caller in envharness runs them
(``anyio.to_thread``). Called on an event loop they would stall every session there, so that
is refused as an error, not suffered as a slowdown."""

from __future__ import annotations

import anyio

__all__ = ["refuse_event_loop"]


def refuse_event_loop(what: str) -> None:
    """Raise when called from a task on an event loop; ``what`` names the blocking step."""
    try:
        anyio.get_current_task()
    except anyio.NoEventLoopError:
        return
    raise RuntimeError(f"{what} blocks; call it through anyio.to_thread, not on an event loop")
