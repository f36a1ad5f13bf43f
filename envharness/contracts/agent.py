"""The agent contract: ``act(observation) -> dict`` (sync or async) and an ``implementation``.

``implementation`` is a versioned identifier recorded with the evidence, so that a resumed
session cannot silently run different agent code. An agent may return an :class:`AgentReply`
instead of a bare dict to report what the decision cost.

Optional capabilities let an agent take part in the session's lifecycle — what an agent that
is a separate program needs (see ``CommandAgent``). Each is a typed Protocol the runtime checks
once per session (:meth:`AgentCapabilities.of`), never by probing attributes turn by turn:

- ``lifespan(context)`` returns an async context manager entered before the first turn and
  exited when the session ends, however it ends; ``context`` says where the agent is — its
  participant and role, the scenario's id and input, the seed — and lets it add ``log``
  records to the evidence.
- ``feedback(turn, outcome, blocked)`` (sync or async) is called after each turn's evidence is
  committed, with the participant's executed outcome, or the reason its action was blocked. A
  ``feedback`` that also takes an ``action`` keyword is told what was executed, which differs
  from what the agent answered when a harness hook rewrote it.
- ``can_snapshot`` with ``snapshot()`` and ``restore(state)`` (:class:`Snapshotting`): the
  agent's own state is kept in checkpoints and given back to a branch or a resume.
- ``vetoed(turn, action, reason)`` (:class:`TakesVetoes`, sync or async): told, before it is
  asked again in the same turn, that a harness hook vetoed its answer, and why.
- ``runs_inline = True`` (:class:`RunsInline`): a sync ``act`` that is quick pure computation
  is called on the event loop instead of a worker thread (no timeout can interrupt it there).
"""

from __future__ import annotations

import abc
import functools
import inspect
import sys
import typing
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Literal, NamedTuple, Protocol, TypeGuard, TypeVar, cast, runtime_checkable

from envharness.errors import ConfigurationError
from envharness.records import Cost, EnvironmentRef

__all__ = [
    "Agent",
    "AgentCapabilities",
    "AgentContext",
    "AgentFactory",
    "AgentReply",
    "AgentStart",
    "Cost",
    "HasLifespan",
    "LogLevel",
    "RunsInline",
    "Snapshotting",
    "TakesFeedback",
    "TakesVetoes",
    "implementation_of",
    "is_async_agent",
    "provides",
    "takes_start",
]

LogLevel = Literal["debug", "info", "warning", "error"]


@runtime_checkable
class Agent(Protocol):
    implementation: str

    def act(self, observation: Any) -> dict[str, Any] | AgentReply | Awaitable[Any]: ...


AgentFactory = Callable[..., Agent]
"""A class or callable, called once per session (a fresh agent each time): with no argument,
or — when it has a parameter named ``context`` — with ``context=`` the session's
:class:`AgentStart` for the participant (see :func:`takes_start`)."""


@dataclass(frozen=True, slots=True)
class AgentStart:
    """What an agent is told of its task as its session starts: who it plays, the scenario's id
    and input, and the seed — so a per-task policy needs nothing smuggled into observations.

    Everything here is in the session's ``session.created`` record (its ``config``: the
    participant's role, ``scenario.id``, ``scenario.input``, ``seed``), so what the agent was
    told can be read back from the evidence. The scenario's ``reference`` (an answer key) and
    ``metadata`` are never shown. ``input`` is the JSON form of the validated input, a copy of
    the agent's own.
    """

    session_id: str
    participant: str
    role: str
    scenario_id: str
    input: Any
    seed: int


def takes_start(factory: Callable[..., object]) -> bool:
    """Whether an agent factory wants its :class:`AgentStart`: it has a parameter named
    ``context`` that can be passed by keyword (a class: its ``__init__``)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it the plain way
        return False
    found = parameters.get("context")
    return found is not None and found.kind in (found.KEYWORD_ONLY, found.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True, slots=True)
class AgentReply:
    """An action together with its cost (tokens, money, time — every field optional) and, for
    a model-backed agent, the messages this answer added to its conversation.

    ``transcript`` holds those messages in OpenAI's chat format (``{"role": "user",
    "content": ...}``, assistant ``tool_calls``, ``tool`` results): the runtime records them,
    private to the participant, so datasets take the real conversation instead of rebuilding
    one from observations and actions.
    """

    action: dict[str, Any]
    cost: Cost | None = None
    transcript: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Where an agent is acting and on what task, handed to its ``lifespan``; frozen, like all
    hook inputs."""

    session_id: str
    participant: str
    role: str
    seed: int
    turns: int
    environment: EnvironmentRef
    log: Callable[[str, LogLevel, str | None], None]
    """Add a ``log`` record (message, level, stream) to the session's evidence."""
    first_turn: int = 1
    """The turn this segment plays first (after a resume or for a branch, not 1)."""
    current_turn: Callable[[], int | None] = lambda: None
    """The turn being played now (``None`` between turns): an agent that is not asked every
    turn (``turn_order="environment"``) learns from it which turn asks it."""
    scenario_id: str = ""
    """The scenario being played (as recorded in ``session.created``)."""
    input: Any = None
    """The scenario's input, in its JSON form (the agent's own copy; never its reference)."""

    @property
    def start(self) -> AgentStart:
        """The same start an agent factory that takes ``context`` is given."""
        return AgentStart(
            session_id=self.session_id,
            participant=self.participant,
            role=self.role,
            scenario_id=self.scenario_id,
            input=self.input,
            seed=self.seed,
        )


def implementation_of(agent: object, participant: str) -> str:
    """The agent's declared implementation, or a clear error naming the participant."""
    value = getattr(agent, "implementation", None)
    if not isinstance(value, str) or not value:
        raise ConfigurationError(
            f"agent for participant {participant!r} ({type(agent).__name__}) has no "
            "`implementation` string; set e.g. implementation = 'my-agent@1' so evidence "
            "records which code acted"
        )
    if not callable(getattr(agent, "act", None)):
        raise ConfigurationError(
            f"agent for participant {participant!r} ({type(agent).__name__}) has no "
            "act(observation) method"
        )
    return value


def is_async_agent(agent: object) -> bool:
    return inspect.iscoroutinefunction(getattr(agent, "act", None))


def cost_of_failure(error: BaseException) -> Cost | None:
    """What a failed ``act`` spent, when the exception says: an agent that pays per call (a
    model agent asked three times for a valid action) sets ``error.cost`` to a :class:`Cost`
    before raising, so the spending is recorded — and counted against budgets — though no
    action came of it."""
    cost = getattr(error, "cost", None)
    return cost if isinstance(cost, Cost) else None


_P = TypeVar("_P")
_MISSING = object()


def provides(value: object, protocol: Callable[..., _P]) -> TypeGuard[_P]:
    """``isinstance(value, protocol)`` for a runtime-checkable protocol, the same answer at a
    tenth of the cost on Python 3.11, whose check lists the protocol's members anew at every
    call (twice): every session asks eight of these. Elsewhere it is ``isinstance`` itself.

    ``protocol`` is typed as a callable only because mypy refuses a protocol class where a
    ``type[...]`` is expected; it must be a ``@runtime_checkable`` protocol class."""
    kind: abc.ABCMeta = protocol  # type: ignore[assignment]  # (no cast: a call per ask)
    members = _members(kind)
    if members is None:
        return isinstance(value, kind)
    # The steps of Python 3.11's _ProtocolMeta.__instancecheck__, with the members listed once
    # and its first step (for a protocol of methods only, ``issubclass`` of the value's class)
    # left to the last: a value with every member is an instance either way, and for one
    # without, the ABC check asks that subclass question itself. Most answers are "no".
    for name, is_method in members:
        found = getattr(value, name, _MISSING)
        if found is _MISSING or (is_method and found is None):
            return abc.ABCMeta.__instancecheck__(kind, value)
    return True


@functools.cache
def _members(protocol: type) -> tuple[tuple[str, bool], ...] | None:
    """The protocol's members (name, whether a method), where this Python's own check is the
    one :func:`provides` repeats (3.11); else ``None``."""
    members_of = getattr(typing, "_get_protocol_attrs", None)
    if sys.version_info[:2] != (3, 11) or members_of is None:
        return None
    if not getattr(protocol, "_is_runtime_protocol", False):
        return None
    return tuple(
        (name, callable(getattr(protocol, name, None))) for name in sorted(members_of(protocol))
    )


@runtime_checkable
class HasLifespan(Protocol):
    """An agent with something to start before the first turn and stop after the last."""

    def lifespan(self, context: AgentContext) -> AbstractAsyncContextManager[object]: ...


@runtime_checkable
class TakesFeedback(Protocol):
    """An agent told how its action went after each turn is committed (sync or async)."""

    def feedback(self, turn: int, outcome: Any, blocked: str | None, /) -> object: ...


@runtime_checkable
class TakesVetoes(Protocol):
    """An agent told, before it is asked again in the same turn, that its last answer was
    vetoed (a harness hook's ``block_and_prompt``) and why — instead of inferring it from being
    asked twice. Sync or async."""

    def vetoed(self, turn: int, action: Any, reason: str, /) -> object: ...


@runtime_checkable
class Snapshotting(Protocol):
    """An agent whose own state checkpoints keep, when ``can_snapshot`` is true."""

    @property
    def can_snapshot(self) -> bool: ...

    def snapshot(self) -> Awaitable[Any]: ...

    def restore(self, state: Any) -> object: ...


@runtime_checkable
class RunsInline(Protocol):
    """A sync agent whose ``act`` may run on the event loop (``runs_inline = True``)."""

    @property
    def runs_inline(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class AgentCapabilities:
    """What one agent can do beyond ``act``, found once when its session starts."""

    is_async: bool
    runs_inline: bool
    lifespan: HasLifespan | None = None
    feedback: TakesFeedback | None = None
    feedback_with_action: bool = False
    """Whether ``feedback`` takes the ``action`` keyword (what was executed)."""
    snapshots: Snapshotting | None = None
    """The agent, when it has the snapshot methods (else ``None``). Whether it can snapshot
    now is asked at each use: an external program declares it only once it has started."""
    vetoes: TakesVetoes | None = None

    @classmethod
    def of(cls, agent: Agent) -> AgentCapabilities:
        key = _class_key(agent)
        token = abc.get_cache_token()
        kept = _FOUND_BY_CLASS.get(type(agent)) if key is not None else None
        if kept is not None and kept.key == key and kept.token == token:
            if kept.shared is not None and cls is AgentCapabilities:
                return kept.shared
            found = kept.found
        else:
            found = _found(agent)
            if key is not None and _cacheable(key):
                is_async, runs_inline, lifespan, feedback, _, snapshots, vetoes = found
                # Capabilities that name no agent are the same value for every instance.
                alone = not (lifespan or feedback or snapshots or vetoes)
                shared = AgentCapabilities(is_async, runs_inline) if alone else None
                _FOUND_BY_CLASS[type(agent)] = _Kept(key, token, found, shared)
        is_async, runs_inline, lifespan, feedback, with_action, snapshots, vetoes = found
        return cls(
            is_async=is_async,
            runs_inline=runs_inline,
            lifespan=cast(HasLifespan, agent) if lifespan else None,
            feedback=cast(TakesFeedback, agent) if feedback else None,
            feedback_with_action=with_action,
            snapshots=cast(Snapshotting, agent) if snapshots else None,
            vetoes=cast(TakesVetoes, agent) if vetoes else None,
        )


_Found = tuple[bool, bool, bool, bool, bool, bool, bool]
"""is_async, runs_inline, then whether the agent has a lifespan, feedback, feedback that takes
``action``, the snapshot methods, vetoes: the fields of :class:`AgentCapabilities`."""

_CAPABILITY_NAME_SET = frozenset(
    {"act", "runs_inline", "lifespan", "feedback", "vetoed", "can_snapshot", "snapshot", "restore"}
)
"""The attributes :func:`_found` reads (those of :class:`Agent` and of each capability)."""
_LOOKUP_NAMES = frozenset({"__getattr__", "__getattribute__", "__class__"})
_DECIDING_NAME_SET = _CAPABILITY_NAME_SET | _LOOKUP_NAMES
_PLAIN_VALUE_TYPES = frozenset({bool, int, str, type(None)})


class _Kept(NamedTuple):
    key: tuple[tuple[str, object], ...]
    token: object
    found: _Found
    shared: AgentCapabilities | None


_FOUND_BY_CLASS: weakref.WeakKeyDictionary[type, _Kept] = weakref.WeakKeyDictionary()
"""What :func:`_found` answered for an agent of each class, kept with the class attributes
it depended on and the ABC registry's token, which a registration changes. Most of an agent's
protocol checks fail, and a failing check falls back to the ABC machinery: per session that was
~35k instructions of ~2,100k. Classes are held weakly: one made per test or per run is not kept
alive."""


def _found(agent: Agent) -> _Found:
    """The checks themselves, on this very agent."""
    is_async = is_async_agent(agent)
    feedback = provides(agent, TakesFeedback) and callable(agent.feedback)
    return (
        is_async,
        not is_async and provides(agent, RunsInline) and bool(agent.runs_inline),
        provides(agent, HasLifespan) and callable(agent.lifespan),
        feedback,
        feedback and _takes_action(cast(TakesFeedback, agent).feedback),
        provides(agent, Snapshotting),
        provides(agent, TakesVetoes) and callable(agent.vetoed),
    )


def _class_key(agent: object) -> tuple[tuple[str, object], ...] | None:
    """The class attributes that decide an agent's capabilities, read from the dictionaries of
    its class and bases (asking the class itself for a missing name raises inside, which costs
    more than the checks it would save). ``None`` when something else can decide: a capability
    set on the instance itself, a custom attribute lookup, a ``__class__`` that is not its type.
    """
    kind = type(agent)
    if agent.__class__ is not kind:
        return None
    own = getattr(agent, "__dict__", None)
    if own and not _CAPABILITY_NAME_SET.isdisjoint(own):
        return None
    key: list[tuple[str, object]] = []
    for owner in kind.__mro__[:-1]:  # the last is ``object``, whose lookups are the default
        attributes = owner.__dict__
        for name in _DECIDING_NAME_SET.intersection(attributes):
            if name in _LOOKUP_NAMES:
                return None
            key.append((name, attributes[name]))
    return tuple(key)


def _cacheable(key: tuple[tuple[str, object], ...]) -> bool:
    """Whether every attribute reads the same from each instance: a plain function or a plain
    value, never a property, slot or other descriptor whose answer depends on the instance."""
    return all(type(value) is FunctionType or type(value) in _PLAIN_VALUE_TYPES for _, value in key)


def _takes_action(feedback: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(feedback).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: call it the plain way
        return False
    return any(
        (p.name == "action" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        or p.kind is p.VAR_KEYWORD
        for p in parameters
    )
