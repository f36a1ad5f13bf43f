"""What ``check-env`` reports: one result per check, the methods' timings, and the counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from envharness.protocol.conformance.report import Tally

__all__ = [
    "CHECKS",
    "DEFAULT_TURNS",
    "CallTiming",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "CheckStatus",
    "ConformanceReport",
]

CHECKS: Final = (
    "spec",
    "encoding",
    "determinism",
    "checkpoint",
    "observe-private",
    "resolve-failure",
)
"""The checks, in the order they run (and are reported)."""

DEFAULT_TURNS: Final = 6
"""Turns each probe session plays at most: enough to checkpoint halfway, quick to run."""

CheckStatus = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict: what was seen (or why it was skipped) and, for a failure, how to
    fix it."""

    name: str
    status: CheckStatus
    detail: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class CallTiming:
    """One environment method's mean time over the calls the checks made."""

    method: str
    calls: int
    mean_us: float


@dataclass(frozen=True, slots=True)
class ConformanceReport(Tally):
    """Every check's result in :data:`CHECKS` order, the environment's name and version, the
    participants it was run with and the methods' timings; its counts are :class:`Tally`'s."""

    environment: str
    participants: Mapping[str, str]
    results: tuple[CheckResult, ...]
    timings: tuple[CallTiming, ...]


class CheckFailed(Exception):
    """Raised inside a check that found a problem: what was seen, and the fix."""

    def __init__(self, detail: str, fix: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix


class CheckSkipped(Exception):
    """Raised inside a check that does not apply here; the message says why."""
