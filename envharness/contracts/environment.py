"""The environment contract: four ordinary methods and a stable spec.

An environment is rules over a state value. The runtime owns everything else — turns, evidence,
timeouts — so the rules stay plain, testable Python. State must be encodable by msgspec (a
Struct, a dataclass, or plain JSON types): that is what makes checkpoints, branches and resume
exact, and the runtime fails a session clearly when it is not.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from random import Random
from typing import Any, Literal, Protocol, TypeVar, get_origin, runtime_checkable

import msgspec

from envharness.errors import ConfigurationError
from envharness.records import EnvironmentRef

__all__ = [
    "Environment",
    "EnvironmentSpec",
    "Resolution",
    "ScoreReport",
    "FindingSpec",
    "ChecksActions",
    "DecidesWhoActs",
    "HoldsResources",
    "RendersText",
]

StateT = TypeVar("StateT")
InputT = TypeVar("InputT", contravariant=True)


@dataclass(frozen=True, slots=True)
class EnvironmentSpec:
    """What an environment is, frozen into every session's evidence.

    ``turn_order``: ``"simultaneous"`` — every participant observes the same state and acts
    concurrently, then one ``resolve`` takes all actions; ``"sequential"`` — participants act
    one after another in roster order, each resolved before the next observes;
    ``"environment"`` — the environment says who acts: each turn the runtime calls its
    ``acting(state)`` (see :class:`DecidesWhoActs`) and observes, asks and resolves only those
    participants (a card game's player to act, a board game's side to move). The others are
    not called and nothing is recorded for them that turn, unless ``resolve`` addresses them
    an outcome or a reward.

    ``invalid_actions``: ``"fail"`` ends the session when an action does not validate against
    ``action_type`` (or is not a JSON object); ``"block"`` records an ``action.blocked`` and
    goes on without it.
    """

    name: str
    version: str
    input_type: type[Any]
    action_type: type[Any] | None = None
    observation_type: type[Any] | None = None
    roles: tuple[str, ...] = ("agent",)
    turn_order: Literal["simultaneous", "sequential", "environment"] = "simultaneous"
    invalid_actions: Literal["fail", "block"] = "fail"
    scoring_version: str | None = None
    state_type: type[Any] | None = None
    """The state's type (a msgspec Struct or dataclass): a resumed or branched session gets its
    state back as this type; without it, as plain JSON values (dicts and lists)."""

    def __post_init__(self) -> None:
        for field_name in ("name", "version"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(
                    f"EnvironmentSpec {field_name} must be a non-empty string, not {value!r}"
                )
        for field_name in ("input_type", "action_type", "observation_type", "state_type"):
            value = getattr(self, field_name)
            if value is not None and not (isinstance(value, type) or get_origin(value)):
                raise ConfigurationError(
                    f"EnvironmentSpec {self.name!r}: {field_name} must be a type (e.g. a "
                    f"msgspec Struct class), not {value!r}"
                )
        if self.turn_order not in ("simultaneous", "sequential", "environment"):
            raise ConfigurationError(
                f"EnvironmentSpec {self.name!r}: turn_order must be 'simultaneous', "
                f"'sequential' or 'environment', not {self.turn_order!r}"
            )
        if self.invalid_actions not in ("fail", "block"):
            raise ConfigurationError(
                f"EnvironmentSpec {self.name!r}: invalid_actions must be 'fail' or 'block', "
                f"not {self.invalid_actions!r}"
            )
        if not self.roles:
            raise ConfigurationError(
                f"EnvironmentSpec {self.name!r}: roles must name at least one role"
            )

    def reference(self) -> EnvironmentRef:
        """The spec as evidence: names and JSON Schema instead of Python types (computed once
        per spec: generating a schema is far slower than a turn)."""
        return _reference(self)


@functools.lru_cache(maxsize=256)
def _reference(spec: EnvironmentSpec) -> EnvironmentRef:
    return EnvironmentRef(
        name=spec.name,
        version=spec.version,
        turn_order=spec.turn_order,
        roles=spec.roles,
        input_type=_type_name(spec.input_type),
        action_type=_type_name(spec.action_type) if spec.action_type else None,
        observation_type=_type_name(spec.observation_type) if spec.observation_type else None,
        input_schema=_schema(spec.input_type),
        action_schema=_schema(spec.action_type) if spec.action_type else None,
    )


@dataclass(frozen=True, slots=True)
class Resolution:
    """What one ``resolve`` produced.

    ``outcomes`` holds private outcomes by participant: an acting participant's is recorded
    with its executed action, one addressed to a participant who did not act (the player who
    did not make the last move learns who won) as that participant's ``outcome.participant``
    record; each is sent back as feedback once the turn is committed.

    ``done``: the episode is over (the goal was reached, the game decided); ``truncated``: it
    was cut short from outside its rules (a time limit) — RL users treat the two differently,
    so the evidence keeps them apart. Either ends the session.

    ``signals`` are shared numbers worth plotting per turn; ``rewards`` are this step's reward
    per participant (private to each, like its outcome); ``artifacts`` are files (name →
    bytes) kept content-addressed beside the evidence.
    """

    state: Any
    outcomes: Mapping[str, Any] = field(default_factory=dict)
    done: bool = False
    signals: Mapping[str, float] = field(default_factory=dict)
    artifacts: Mapping[str, bytes] = field(default_factory=dict)
    truncated: bool = False
    rewards: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FindingSpec:
    """A judgement a scorer makes, citing the turns whose records support it."""

    title: str
    detail: str = ""
    severity: Literal["info", "low", "medium", "high"] = "info"
    turns: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ScoreReport:
    """A versioned score for a finished session; ``version`` defaults to the spec's.

    ``per_participant`` scores each participant on its own (a zero-sum game's winner and
    loser): datasets take a participant's reward from its own metrics, and aggregates report
    each participant apart. ``metrics`` stays the session's shared score (it may be empty when
    every metric is per participant).
    """

    metrics: Mapping[str, float]
    passed: bool | None = None
    findings: tuple[FindingSpec, ...] = ()
    uncertainty: Mapping[str, float] = field(default_factory=dict)
    version: str | None = None
    per_participant: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol[StateT, InputT]):
    """Rules over a msgspec-encodable state. A fresh instance serves each session.

    ``score(state, scenario)`` is optional: define it to have a score report recorded at the
    end of every session. So are ``acting`` (:class:`DecidesWhoActs`), ``check_action``
    (:class:`ChecksActions`), ``render_text`` (:class:`RendersText`) and ``lifespan``
    (:class:`HoldsResources`).

    Any of these methods may be ``async def``: the runtime awaits what it returns, so an
    environment that answers over a pipe or a socket never blocks the event loop.
    """

    spec: EnvironmentSpec

    def initialize(
        self, input: InputT, rng: Random, roster: Mapping[str, str]
    ) -> StateT | Awaitable[StateT]:
        """The initial state; ``roster`` maps each participant to its role."""
        ...

    def observe(self, state: StateT, participant: str) -> Any:  # or an awaitable of it
        """What ``participant`` may see of ``state`` — and nothing it may not."""
        ...

    def resolve(
        self, state: StateT, actions: Mapping[str, Any]
    ) -> Resolution | Awaitable[Resolution]:
        """Apply the participants' actions; never mutate ``state`` in place."""
        ...

    def intervene(
        self, state: StateT, intervention: Mapping[str, Any]
    ) -> StateT | Awaitable[StateT]:
        """Apply a declared outside change (used by branches)."""
        ...


@runtime_checkable
class DecidesWhoActs(Protocol):
    """What an environment with ``turn_order="environment"`` adds: who acts next."""

    def acting(self, state: Any) -> Sequence[str] | Awaitable[Sequence[str]]:
        """The participants who act on ``state`` (asked together, resolved in one step); an
        empty sequence resolves a step no participant acts in (a chance event)."""
        ...


@runtime_checkable
class ChecksActions(Protocol):
    """An environment whose rules say which well-typed actions are legal now (an action
    outside a Gymnasium space, a masked move, a command the game does not know)."""

    def check_action(
        self, state: Any, participant: str, action: Any
    ) -> str | Awaitable[str | None] | None:
        """``None`` for a legal action; otherwise why it is not, naming what would be legal.
        The runtime then blocks the action (``by="environment"``) or fails the session, as
        ``spec.invalid_actions`` says."""
        ...


@runtime_checkable
class RendersText(Protocol):
    """An environment that can show an observation as text (like Gymnasium's ``ansi``
    render): the text is recorded beside the observation and shown by the viewer and
    ``envharness show``, with the JSON one click away."""

    def render_text(self, state: Any, participant: str) -> str | Awaitable[str | None] | None:
        """What ``participant`` sees of ``state`` as text (ANSI colours allowed), or ``None``;
        it must reveal no more than :meth:`Environment.observe` does."""
        ...


@runtime_checkable
class HoldsResources(Protocol):
    """An environment with something to start before a session's first call and stop after
    its last (a program it talks to, a live simulator): the runtime holds each session —
    ``initialize`` or the resumed state through ``score`` — inside ``lifespan()``, and leaves
    it however the session ends."""

    def lifespan(self) -> AbstractAsyncContextManager[object]: ...


def _schema(kind: type[Any]) -> dict[str, Any] | None:
    """JSON Schema of a type, when msgspec can describe it (plain classes it cannot)."""
    try:
        return msgspec.json.schema(kind)
    except TypeError:
        return None


def _type_name(kind: type[Any]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"
