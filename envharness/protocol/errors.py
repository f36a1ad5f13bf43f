"""What goes wrong between the host and an external agent, as exceptions under one root.

These belong in the tree of :mod:`envharness.errors`; they live here until that module gains
them (the protocol layer is the only one that raises them so far)::

    EnvharnessError
    └── ProtocolError               talking to an external agent failed
        ├── ProtocolViolationError  the agent sent what the protocol forbids (or nothing at all)
        ├── AgentReportedError      the agent answered with an ``error`` message
        └── ChannelUsageError       the host used a channel wrongly (a bug in the caller)

A violation carries a stable ``code`` (the same strings the spec and the conformance vectors
use), a ``problem`` written for the agent's author, and the ``offending`` bytes (truncated) so
the runtime can keep them as an artifact: evidence of exactly what the agent sent.
"""

from __future__ import annotations

from typing import Literal, get_args

from envharness.errors import EnvharnessError

__all__ = [
    "OFFENDING_LIMIT",
    "VIOLATION_CODES",
    "AgentReportedError",
    "ChannelUsageError",
    "ProtocolError",
    "ProtocolViolationError",
    "ViolationCode",
]

ViolationCode = Literal[
    "invalid_utf8",
    "invalid_json",
    "not_an_object",
    "missing_type",
    "unknown_type",
    "invalid_field",
    "line_too_long",
    "truncated_line",
    "unexpected_message",
    "wrong_id",
    "duplicate_id",
    "version_mismatch",
    "log_flood",
    "closed",
    "timeout",
]
"""Every way an agent can break the protocol; ``timeout`` is raised by callers, not the channel."""

VIOLATION_CODES: tuple[ViolationCode, ...] = get_args(ViolationCode)

OFFENDING_LIMIT = 4096
"""Bytes of an offending line kept as evidence: enough to diagnose, never a memory risk."""


class ProtocolError(EnvharnessError):
    """Talking to an external agent failed; the session using that agent cannot go on."""


class ProtocolViolationError(ProtocolError):
    """The agent sent something the protocol forbids, or stopped sending when it owed an answer.

    ``offending`` holds at most :data:`OFFENDING_LIMIT` bytes of what was received;
    ``offending_size`` says how many bytes there were in all (a flood is measured, not kept).
    """

    def __init__(self, code: ViolationCode, problem: str, offending: bytes = b"") -> None:
        super().__init__(f"{code}: {problem}")
        self.code: ViolationCode = code
        self.problem = problem
        self.offending = bytes(offending[:OFFENDING_LIMIT])
        self.offending_size = len(offending)

    @classmethod
    def sized(
        cls, code: ViolationCode, problem: str, offending: bytes, size: int
    ) -> ProtocolViolationError:
        """A violation whose offending bytes are a prefix of ``size`` bytes never fully kept."""
        violation = cls(code, problem, offending)
        violation.offending_size = size
        return violation


class AgentReportedError(ProtocolError):
    """The agent answered with an ``error`` message: it is alive and well-behaved, but failed.

    ``id`` is the request it answered, or ``None`` when the agent gave up on its own.
    """

    def __init__(self, message: str, id: str | None = None) -> None:
        where = f" (answering request {id!r})" if id is not None else ""
        super().__init__(f"the agent reported an error{where}: {message}")
        self.message = message
        self.id = id


class ChannelUsageError(ProtocolError):
    """The host used a channel out of order: before the handshake, after a failure, or
    concurrently. This is a bug in the caller, never something an agent can cause."""
