"""Handing an item to a memory stream with no pass of the event loop while it has room.

anyio's ``send`` passes the loop once before it looks for room. Where items are handed on one
after another (the batches a worker's frames bring, the frames a worker sends at once), that
pass costs more than the hand-over, and it lets the consumer take each item alone where it
could have taken them together. The journal's ``hand_over`` does the same for the writer's
requests.
"""

from __future__ import annotations

from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream

__all__ = ["send_promptly"]

T = TypeVar("T")


async def send_promptly(stream: MemoryObjectSendStream[T], item: T) -> None:
    """Put ``item`` in ``stream`` at once if it has room, else wait for room (back-pressure).

    Not a cancellation point while there is room: a caller that must stop when cancelled
    checks first (``anyio.lowlevel.checkpoint_if_cancelled``). An item sent while others wait
    for room waits behind them, so items keep their order whoever sends them.
    """
    try:
        stream.send_nowait(item)
    except anyio.WouldBlock:
        await stream.send(item)
