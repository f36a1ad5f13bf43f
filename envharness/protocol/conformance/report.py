"""What a conformance check runs under (timeouts, environment) and what it reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from envharness.errors import ConfigurationError
from envharness.protocol.process import DEFAULT_INHERITED_ENV

DEFAULT_REPLY_TIMEOUT: Final = 10.0
"""Seconds an agent has for each answer (``ready``, ``action``, ``state``, ``restored``)."""
DEFAULT_SHUTDOWN_GRACE: Final = 3.0
"""Seconds an agent has to exit after ``shutdown`` (or the end of its input) before SIGTERM."""
DEFAULT_TERMINATE_GRACE: Final = 2.0
"""Seconds an agent has to exit after SIGTERM before its process group is killed."""

INHERITED_ENV: Final = DEFAULT_INHERITED_ENV
"""Variables the program gets from the caller's environment; everything else must be passed."""


CaseStatus = Literal["passed", "failed", "skipped"]


class Verdict(Protocol):
    """One result of a conformance kit: an agent program's case or an environment's check."""

    @property
    def status(self) -> CaseStatus: ...


class Tally:
    """The counts of a report's results (what its summary line says) and whether it passed;
    the agent suite's report and ``check-env``'s share them."""

    __slots__ = ()

    results: Sequence[Verdict]

    def count(self, status: CaseStatus) -> int:
        return sum(1 for result in self.results if result.status == status)

    @property
    def passed(self) -> int:
        return self.count("passed")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def ok(self) -> bool:
        """No result failed (a skipped one did not apply: an optional feature the agent did
        not declare, a check the environment has nothing for)."""
        return self.failed == 0


@dataclass(frozen=True, slots=True)
class CaseResult:
    """What one case found. ``detail`` says what was seen (or why it was skipped); for a failure
    it names the step, the rule and the offending line, and ``stderr`` holds the end of what the
    program wrote there (often the real explanation: a traceback, a missing module)."""

    name: str
    status: CaseStatus
    detail: str
    seconds: float
    stderr: str = ""


@dataclass(frozen=True, slots=True)
class ConformanceReport(Tally):
    """Every case's result, in the order the cases ran, and what the agent said it is."""

    argv: tuple[str, ...]
    results: tuple[CaseResult, ...]
    implementation: str | None = None
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConformanceSettings:
    """The timeouts a check runs under; tests shrink them, slow (model-backed) agents raise
    ``reply_timeout``."""

    reply_timeout: float = DEFAULT_REPLY_TIMEOUT
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    terminate_grace: float = DEFAULT_TERMINATE_GRACE

    def __post_init__(self) -> None:
        for name in ("reply_timeout", "shutdown_grace", "terminate_grace"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds")
