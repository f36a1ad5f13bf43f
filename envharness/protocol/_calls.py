"""The call discipline both host-side channels keep: the agent's and the environment program's.

One call at a time, each in the phase it belongs to (the handshake on a new channel, requests
on an open one); a call that fails or is cancelled midway leaves the streams out of step, so it
breaks the channel for good, and after that only ``shutdown`` is allowed. The bookkeeping lives
here once; what a call sends and reads stays each channel's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

import anyio

from envharness.protocol.errors import ChannelUsageError, ProtocolViolationError

__all__ = ["CallDiscipline", "Phase"]

Phase = Literal["new", "open", "closed"]


class CallDiscipline:
    """A channel's phase, whether a call is in progress, and why it broke (if it did).

    ``reported`` is the error the program raises by answering ``error`` (named ``reported_as``
    in :attr:`broken`); ``survives`` says which failures leave the channel in step (an
    environment program's ``error`` that answered its request).
    """

    __slots__ = ("_reported", "_reported_as", "_survives", "broken", "busy", "phase")

    def __init__(
        self,
        reported: type[Exception],
        reported_as: str,
        *,
        survives: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self._reported = reported
        self._reported_as = reported_as
        self._survives = survives
        self.phase: Phase = "new"
        self.busy = False
        self.broken: str | None = None
        """Why the channel can no longer be used, or ``None`` while it can."""

    @contextmanager
    def call(self, call: str, phase: Phase) -> Iterator[None]:
        """Run one call: refuse overlap and misuse; a failure breaks the channel."""
        if self.busy:
            raise ChannelUsageError(
                f"{call} while another call is in progress; calls must not overlap"
            )
        if self.broken is not None:
            raise ChannelUsageError(f"{call} on a broken channel ({self.broken}); shut it down")
        if self.phase != phase:
            needs = "before the handshake" if phase == "new" else "after a successful handshake"
            raise ChannelUsageError(f"{call} is only allowed {needs} (the channel is {self.phase})")
        self.busy = True
        try:
            yield
        except BaseException as exc:
            if self._survives is None or not self._survives(exc):
                self.break_with(exc)
            raise
        finally:
            self.busy = False

    @contextmanager
    def closing(self) -> Iterator[bool | None]:
        """Run ``shutdown``, allowed in any phase (also broken) but not during another call:
        ``None`` when the channel was closed already, else whether it was healthy (open and
        unbroken: worth reading to the end)."""
        if self.busy:
            raise ChannelUsageError("shutdown while another call is in progress")
        if self.phase == "closed":
            yield None
            return
        healthy = self.phase == "open" and self.broken is None
        self.phase = "closed"
        self.busy = True
        try:
            yield healthy
        except BaseException as exc:
            self.break_with(exc)
            raise
        finally:
            self.busy = False

    def break_with(self, exc: BaseException) -> None:
        """Record why the channel broke (the first reason stands)."""
        self.broken = self.broken or self._describe(exc)

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, ProtocolViolationError):
            return f"protocol violation {exc.code}"
        if isinstance(exc, self._reported):
            return self._reported_as
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            return "a call was cancelled or timed out midway"
        return f"a call failed with {type(exc).__name__}"
