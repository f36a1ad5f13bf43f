"""``AgentCapabilities.of`` keeps what it found per class, and sees every change that would
make an agent's answer differ: the class gaining or losing a method, a capability set on the
instance, a property read per instance, a subclass, a registration with a protocol."""

from __future__ import annotations

from typing import Any

import pytest

from envharness.contracts.agent import _FOUND_BY_CLASS, AgentCapabilities, Snapshotting, _found
from envharness.fixtures import SyntheticAgent


def fields(capabilities: AgentCapabilities, agent: object) -> tuple[object, ...]:
    """The capabilities with the agent itself written as ``"agent"`` (it is never another)."""
    return tuple(
        "agent" if value is agent else value
        for value in (
            capabilities.is_async,
            capabilities.runs_inline,
            capabilities.lifespan,
            capabilities.feedback,
            capabilities.feedback_with_action,
            capabilities.snapshots,
            capabilities.vetoes,
        )
    )


def found_afresh(agent: Any) -> tuple[object, ...]:
    """What the checks answer on this very agent, with nothing kept."""
    is_async, inline, lifespan, feedback, with_action, snapshots, vetoes = _found(agent)

    def agent_if(flag: bool) -> str | None:
        return "agent" if flag else None

    return (
        is_async,
        inline,
        agent_if(lifespan),
        agent_if(feedback),
        with_action,
        agent_if(snapshots),
        agent_if(vetoes),
    )


class Plain:
    implementation = "plain@1"

    def act(self, observation: Any) -> dict[str, Any]:
        return {}


class Rich(Plain):
    runs_inline = True
    can_snapshot = True

    def lifespan(self, context: Any) -> Any: ...
    def feedback(self, turn: int, outcome: Any, blocked: str | None, *, action: Any) -> None: ...
    def vetoed(self, turn: int, action: Any, reason: str, /) -> None: ...
    async def snapshot(self) -> Any: ...
    def restore(self, state: Any) -> None: ...


class AsyncRich(Rich):
    async def act(self, observation: Any) -> dict[str, Any]:  # type: ignore[override]
        return {}


class Blocked(Rich):
    feedback = None  # type: ignore[assignment]


class InlineByInstance(Plain):
    def __init__(self, inline: bool) -> None:
        self.runs_inline = inline


class InlineByProperty(Plain):
    def __init__(self, inline: bool) -> None:
        self.inline = inline

    @property
    def runs_inline(self) -> bool:
        return self.inline


class Slotted(Plain):
    __slots__ = ("runs_inline",)

    def __init__(self, inline: bool) -> None:
        self.runs_inline = inline


class Forwarding(Plain):
    def __getattr__(self, name: str) -> Any:
        if name == "feedback":
            return lambda *args: None
        raise AttributeError(name)


@pytest.mark.parametrize(
    "make",
    [
        SyntheticAgent,
        Plain,
        Rich,
        AsyncRich,
        Blocked,
        lambda: InlineByInstance(True),
        lambda: InlineByInstance(False),
        lambda: InlineByProperty(True),
        lambda: InlineByProperty(False),
        lambda: Slotted(True),
        lambda: Slotted(False),
        Forwarding,
    ],
)
def test_a_kept_answer_is_the_answer_found_afresh(make: Any) -> None:
    for _ in range(3):  # the first finds, the others reuse what was kept
        agent = make()
        assert fields(AgentCapabilities.of(agent), agent) == found_afresh(agent)


def test_instances_of_one_class_differ_where_the_instance_decides() -> None:
    for inline in (True, False, True):
        for agent in (InlineByInstance(inline), InlineByProperty(inline), Slotted(inline)):
            assert AgentCapabilities.of(agent).runs_inline is inline


def test_a_method_added_to_or_removed_from_the_class_later_is_seen() -> None:
    class Growing(Plain):
        pass

    assert AgentCapabilities.of(Growing()).feedback is None
    Growing.feedback = lambda self, turn, outcome, blocked, action=None: None  # type: ignore[attr-defined]
    grown = Growing()
    capabilities = AgentCapabilities.of(grown)
    assert capabilities.feedback is grown
    assert capabilities.feedback_with_action
    del Growing.feedback  # type: ignore[attr-defined]
    assert AgentCapabilities.of(Growing()).feedback is None


def test_a_capability_set_on_one_instance_is_that_instance_s_alone() -> None:
    class Told(Plain):
        pass

    AgentCapabilities.of(Told())
    special = Told()
    special.vetoed = lambda turn, action, reason: None  # type: ignore[attr-defined]
    assert AgentCapabilities.of(special).vetoes is special
    assert AgentCapabilities.of(Told()).vetoes is None


def test_a_subclass_is_checked_as_itself() -> None:
    class Base(Plain):
        pass

    class WithLifespan(Base):
        def lifespan(self, context: Any) -> Any: ...

    class Silenced(Rich):
        lifespan = None  # type: ignore[assignment]

    assert AgentCapabilities.of(Base()).lifespan is None
    agent = WithLifespan()
    assert AgentCapabilities.of(agent).lifespan is agent
    assert AgentCapabilities.of(Rich()).lifespan is not None
    assert AgentCapabilities.of(Silenced()).lifespan is None


def test_a_class_registered_with_a_protocol_later_is_seen() -> None:
    class Registered(Plain):
        pass

    assert AgentCapabilities.of(Registered()).snapshots is None
    Snapshotting.register(Registered)
    agent = Registered()
    assert AgentCapabilities.of(agent).snapshots is agent


def test_only_classes_whose_instances_cannot_differ_are_kept() -> None:
    for make in (Rich, lambda: InlineByProperty(True), lambda: Slotted(True), Forwarding):
        AgentCapabilities.of(make())
    assert Rich in _FOUND_BY_CLASS
    for kind in (InlineByProperty, Slotted, Forwarding):
        assert kind not in _FOUND_BY_CLASS
