"""The agent-side conformance suite: does a program speak protocol v1 the way the spec says?

``envharness protocol check -- PROGRAM ARGS...`` runs it; this module is its engine, usable from
any test suite (``await check_agent(["node", "my_agent.mjs"])``). It is how an agent author in
another language learns that their program will work in a session before running one.

Each case starts a **fresh process**, so a failure in one case can neither hide nor cause a
failure in another, and every process is stopped the way a session stops it: protocol
``shutdown``, then SIGTERM to its process group after a grace period, then SIGKILL, under a
shielded scope — whatever happens, nothing is left running and nothing is left unreaped. The
program gets the minimal environment a session gives it (:data:`INHERITED_ENV` plus what the
caller passes), so a check that passes here does not pass only thanks to the caller's variables.

Cases talk through :class:`~envharness.protocol.channel.AgentChannel`, the host's own
implementation of the protocol, so "conformant" means exactly "works with the host"; every
answer is awaited under ``anyio.fail_after`` with the configured timeout. When the handshake
fails, the remaining cases are skipped: they would fail the same way, each after a timeout.
"""

from envharness.protocol.conformance.cases import CASES
from envharness.protocol.conformance.program import ConformanceCase
from envharness.protocol.conformance.report import (
    DEFAULT_REPLY_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
    INHERITED_ENV,
    CaseResult,
    CaseStatus,
    ConformanceReport,
    ConformanceSettings,
)
from envharness.protocol.conformance.suite import check_agent

__all__ = [
    "CASES",
    "DEFAULT_REPLY_TIMEOUT",
    "DEFAULT_SHUTDOWN_GRACE",
    "DEFAULT_TERMINATE_GRACE",
    "INHERITED_ENV",
    "CaseResult",
    "CaseStatus",
    "ConformanceCase",
    "ConformanceReport",
    "ConformanceSettings",
    "check_agent",
]
