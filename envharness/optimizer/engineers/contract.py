"""The engineer contract: what the optimizer shows an engineer, and what comes back.

An engineer reads a :class:`FailurePacket` (failures mined from recorded evidence, with the state
and predicate keys hooks can read) and returns proposals: raw answers in the patch protocol
(``<think>…</think><patch>…</patch>``). Parsing, validation and sandboxing happen afterwards, the
same way for every engineer, so a scripted, a mining and a model-backed engineer are judged alike.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from envharness.records import Cost

__all__ = [
    "Engineer",
    "FailureCluster",
    "FailureExample",
    "FailurePacket",
    "FailureStep",
    "Proposal",
]


class FailureStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step of one participant, with what hooks could have read at that moment."""

    step: int
    participant: str
    action: Any = None
    outcome: Any = None
    blocked: str | None = None
    state: dict[str, Any] = {}
    predicates: dict[str, bool] = {}
    admissible: list[Any] | None = None


class FailureExample(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded session, told as its steps (failed ones, and passing ones for contrast)."""

    session_id: str
    scenario_id: str
    trial: int | None = None
    task: str | None = None
    passed: bool | None = None
    reward: float | None = None
    steps: tuple[FailureStep, ...] = ()


class FailureCluster(msgspec.Struct, frozen=True, kw_only=True):
    """Failures that look alike (same signature), one example of them, and how many there were."""

    signature: str
    description: str
    sessions: tuple[str, ...]
    example: FailureExample


class FailurePacket(msgspec.Struct, frozen=True, kw_only=True):
    """Everything an engineer is shown for one iteration.

    ``state_keys`` and ``predicate_keys`` are exactly what hook code can read (an engineer cannot
    write ``state.verified`` if it never saw that key); ``current_patch`` is the accepted harness
    the proposal will be stacked on (JSON of a ``HarnessPatch``), ``forbidden_terms`` the strings
    the environment says hook code must not contain (answer leakage).
    """

    environment: str
    hooks: tuple[str, ...]
    state_keys: tuple[str, ...] = ()
    predicate_keys: tuple[str, ...] = ()
    action_examples: tuple[Any, ...] = ()
    clusters: tuple[FailureCluster, ...] = ()
    passing: tuple[FailureExample, ...] = ()
    current_patch: dict[str, Any] | None = None
    forbidden_terms: tuple[str, ...] = ()
    task: str | None = None


class Proposal(msgspec.Struct, frozen=True, kw_only=True):
    """One raw engineer answer; ``error`` says why there is none (endpoint down, garbage, …)."""

    engineer: str
    text: str = ""
    cost: Cost | None = None
    error: str | None = None


@runtime_checkable
class Engineer(Protocol):
    """Proposes patches; ``version`` (e.g. its prompt's version) is recorded with each proposal."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        """``count`` proposals (fewer only when it has no more distinct ideas)."""
        ...
