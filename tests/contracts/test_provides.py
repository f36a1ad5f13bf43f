"""``provides`` answers exactly what ``isinstance`` answers for the runtime's protocols."""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from envharness.contracts.agent import (
    HasLifespan,
    RunsInline,
    Snapshotting,
    TakesFeedback,
    TakesVetoes,
    provides,
)
from envharness.contracts.environment import (
    ChecksActions,
    DecidesWhoActs,
    HoldsResources,
    RendersText,
)
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment

PROTOCOLS: list[Any] = [
    HasLifespan,
    RunsInline,
    Snapshotting,
    TakesFeedback,
    TakesVetoes,
    ChecksActions,
    DecidesWhoActs,
    HoldsResources,
    RendersText,
]


class Everything:
    runs_inline = True
    can_snapshot = True

    def lifespan(self, *args: Any) -> Any: ...
    def feedback(self, *args: Any) -> None: ...
    def vetoed(self, *args: Any) -> None: ...
    async def snapshot(self) -> Any: ...
    def restore(self, state: Any) -> None: ...
    def check_action(self, *args: Any) -> None: ...
    def acting(self, state: Any) -> list[str]: ...
    def render_text(self, *args: Any) -> None: ...


class Blocked(Everything):
    """Methods blocked by ``None``, on the class and on the instance."""

    feedback = None  # type: ignore[assignment]

    def __init__(self) -> None:
        self.render_text = None  # type: ignore[assignment]


class GivenLater:
    """Capabilities set on the instance only."""

    def __init__(self) -> None:
        self.runs_inline = False
        self.acting = lambda state: []


class Declared(TakesVetoes):
    """Subclasses the protocol and inherits its (empty) method."""


class DeclaredBlocked(TakesVetoes, RendersText):
    """Subclasses protocols and blocks their methods by ``None``: an instance all the same."""

    vetoed = None  # type: ignore[assignment]

    def __init__(self) -> None:
        self.render_text = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    "value",
    [
        SyntheticAgent(),
        SyntheticEnvironment(),
        Everything(),
        Blocked(),
        GivenLater(),
        Declared(),
        DeclaredBlocked(),
        object(),
        None,
        {"feedback": 1},
    ],
    ids=lambda value: type(value).__name__,
)
def test_provides_answers_like_isinstance(value: object) -> None:
    for protocol in PROTOCOLS:
        assert provides(value, protocol) == isinstance(value, protocol), protocol.__name__


def test_anything_but_a_runtime_checkable_protocol_is_left_to_isinstance() -> None:
    class Plain:
        pass

    class Unchecked(Protocol):
        def act(self) -> None: ...

    assert provides(Plain(), Plain)
    assert not provides(object(), Plain)
    with pytest.raises(TypeError, match="runtime_checkable"):
        provides(object(), Unchecked)
