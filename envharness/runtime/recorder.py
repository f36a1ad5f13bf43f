"""A session's evidence on its way to the store: sealing, holding and committing its records.

The turn loop only says what happened; this decides when the records go to the journal. A fast
session holds finished turns briefly so that many share one commit, a slow one hands each turn
over as it ends, and only a durable flush — the end of a run, feedback to an agent — waits for
the disk. Flushes happen at turn boundaries only, so a commit never holds part of a turn.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import anyio.lowlevel
import msgspec

from envharness.records import Payload, RecordRow, SessionChain, canonical
from envharness.runtime.checks import SessionFailure, sha256
from envharness.runtime.loop_passes import LoopPasses, loop_passes
from envharness.store.journal import Pending
from envharness.store.locate import AnyStore

__all__ = ["HOLD_ROWS", "HOLD_SECONDS", "IN_FLIGHT", "YIELD_SECONDS", "SessionRecorder"]

IN_FLIGHT = 32
"""Commits of one session that may be pending while the next turns are played."""
HOLD_SECONDS = 0.05
"""How long a session may hold its finished turns' records before handing them to the journal:
a fast session then commits many turns at once (one fsync instead of one per turn), and a slow
one — whose turns take longer than this — still hands over every turn as it ends."""
HOLD_ROWS = 512
"""Records a session holds at most before handing them over, whatever the time."""
YIELD_SECONDS = 0.001
"""How long a session may keep the event loop between two turns while no task but other
sessions is ready to run (then a yield would only poll for I/O and timers, or take turns with
sessions). A task that becomes ready meanwhile —
one an agent or a progress callback woke, say, to stop the session — gets the loop at the next
turn boundary, and a cancellation already asked is heard there. At concurrency 1 a yield per
turn cost ~40% of a trivial turn's CPU: each pass of the loop polls for I/O, and so gives up
the GIL to the journal's thread and waits to take it back."""


class SessionRecorder:
    """Seals one session's records into its chain and hands them to the store's journal."""

    __slots__ = (
        "_blobs",
        "_flush_due",
        "_in_flight",
        "_passes",
        "_pending",
        "_seal",
        "_store",
        "_yield_due",
        "chain",
    )

    def __init__(self, store: AnyStore, chain: SessionChain) -> None:
        self._store = store
        self.chain = chain
        self._seal = chain.seal
        self._pending: list[RecordRow] = []
        self._blobs: dict[str, bytes] = {}
        self._in_flight: collections.deque[Pending] = collections.deque()
        started = time.monotonic()
        self._flush_due = started + HOLD_SECONDS
        self._passes: LoopPasses | None = None
        """This loop's sessions passing it (found at the first held turn)."""
        self._yield_due = started + YIELD_SECONDS
        """When a held turn next passes the loop (a session's first turns need not: it was
        just started by another task, which had the loop)."""

    def record(
        self, payload: Payload, *, turn: int | None = None, participant: str | None = None
    ) -> RecordRow:
        row = self._seal(payload, turn=turn, participant=participant)
        self._pending.append(row)
        return row

    def keep_blob(self, data: bytes) -> str:
        """Store ``data`` once, content-addressed (the notebook a hook left, say)."""
        digest = sha256(data)
        self._blobs[digest] = data
        return digest

    def keep_state(self, state: Any) -> str:
        """Encode the state once; the blob is stored content-addressed and shared."""
        try:
            data = canonical(state)
        except (TypeError, msgspec.EncodeError) as exc:
            raise SessionFailure(
                f"the environment state ({type(state).__name__}) is not encodable by msgspec: "
                f"{exc}; use a msgspec Struct, a dataclass or plain JSON types",
                exc,
            ) from exc
        return self.keep_blob(data)

    async def flush(self, *, durable: bool = True, hold: bool = True) -> None:
        """Hand what is pending to the journal; ``durable`` waits for every commit so far.

        Cancelled before the journal took the rows, they stay pending and go out with the
        final status — a chain never has a gap. Not ``durable``, the rows may be held up to
        :data:`HOLD_SECONDS` (or :data:`HOLD_ROWS`) so that consecutive turns share a commit,
        and the session goes on while up to :data:`IN_FLIGHT` commits are pending. Nothing is
        acknowledged by that: only a durable flush says the records are stored. A held turn
        yields the loop when a task other than the sessions is ready to run, or else every
        :data:`YIELD_SECONDS`, and is always a cancellation point.
        """
        if not durable and hold:
            now = time.monotonic()
            if now < self._flush_due and len(self._pending) < HOLD_ROWS:
                passes = self._passes
                if passes is None:
                    passes = self._passes = loop_passes()
                if now >= self._yield_due or passes.others_ready():
                    passes.passing += 1
                    try:
                        await anyio.lowlevel.checkpoint()
                    finally:
                        passes.passing -= 1
                    self._yield_due = time.monotonic() + YIELD_SECONDS  # from getting it back
                else:
                    await anyio.lowlevel.checkpoint_if_cancelled()
                return
            self._flush_due = now + HOLD_SECONDS
        if not self._pending and not self._blobs:
            if durable:
                await self.settle()
            return
        submitted = await self._store.submit(self._pending, self._blobs)
        self._pending, self._blobs = [], {}
        self._in_flight.append(submitted)
        while self._in_flight and self._in_flight[0].done:  # learn of a failure at once
            await self._in_flight.popleft().committed()
        if durable:
            await self.settle()
        elif len(self._in_flight) > IN_FLIGHT:
            await self._in_flight.popleft().committed()

    def holding(self) -> bool:
        """Whether a flush that is not durable would hold the records now (their time to go
        to the journal has not come)."""
        return time.monotonic() < self._flush_due and len(self._pending) < HOLD_ROWS

    def take_in_flight(self) -> tuple[Pending, ...]:
        """The commits handed over and not yet known to be done, for a caller that waits for
        them instead of this session (then this recorder forgets them)."""
        taken = tuple(self._in_flight)
        self._in_flight.clear()
        return taken

    async def settle(self) -> None:
        """Wait until everything recorded so far is committed."""
        if self._pending or self._blobs:
            await self.flush()
            return
        while self._in_flight:
            await self._in_flight[0].committed()
            self._in_flight.popleft()
