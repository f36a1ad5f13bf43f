"""An environment's ``lifespan()`` holds each session: entered before its first call, left after
its last, however the session ends (an environment program runs exactly that long)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.contracts.environment import HoldsResources, Resolution, ScoreReport
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
    SyntheticState,
)

pytestmark = pytest.mark.anyio

START = Scenario(id="start", input=SyntheticScenarioInput(starting_total=0))


class Held(SyntheticEnvironment):
    """The synthetic environment, noting its lifespan and every call in one shared log."""

    log: ClassVar[list[str]] = []
    fail: ClassVar[str | None] = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        if self.fail == "lifespan":
            raise RuntimeError("the simulator would not start")
        self.log.append("enter")
        try:
            yield
        finally:
            self.log.append("exit")

    def initialize(
        self, input: SyntheticScenarioInput, rng: Random, roster: Mapping[str, str]
    ) -> SyntheticState:
        self.log.append("initialize")
        return super().initialize(input, rng, roster)

    def resolve(self, state: SyntheticState, actions: Mapping[str, Any]) -> Resolution:
        self.log.append("resolve")
        if self.fail == "resolve":
            raise ValueError("the rules broke")
        return super().resolve(state, actions)

    def score(self, state: SyntheticState, scenario: Scenario[Any]) -> ScoreReport:
        self.log.append("score")
        return super().score(state, scenario)


@pytest.fixture
def held() -> type[Held]:
    Held.log = []
    Held.fail = None
    return Held


def harness(store: Path, environment: type[Held]) -> AsyncEnvironmentHarness:
    return AsyncEnvironmentHarness(store, environment=environment, agents={"alice": SyntheticAgent})


async def test_the_lifespan_holds_the_session_from_initialize_to_score(
    store_path: Path, held: type[Held]
) -> None:
    assert isinstance(held(), HoldsResources)
    assert not isinstance(SyntheticEnvironment(), HoldsResources)
    session = await harness(store_path, held).run(START, turns=2)
    assert session.status == "completed"
    assert held.log == ["enter", "initialize", "resolve", "resolve", "score", "exit"]


async def test_the_lifespan_is_left_when_the_session_fails(
    store_path: Path, held: type[Held]
) -> None:
    held.fail = "resolve"
    session = await harness(store_path, held).run(START, turns=2)
    assert session.status == "failed"
    assert session.reason == "environment resolve() raised ValueError: the rules broke"
    assert held.log == ["enter", "initialize", "resolve", "exit"]


async def test_a_lifespan_that_cannot_start_fails_the_session(
    store_path: Path, held: type[Held]
) -> None:
    held.fail = "lifespan"
    session = await harness(store_path, held).run(START, turns=2)
    assert session.status == "failed"
    assert session.reason == (
        "environment lifespan() raised RuntimeError: the simulator would not start"
    )
    assert session.error is not None
    assert held.log == []


async def test_a_resumed_session_is_held_too(store_path: Path, held: type[Held]) -> None:
    runner = harness(store_path, held)
    session = await runner.run(START, turns=1)
    held.log.clear()
    more = await runner.continue_(session.id, turns=1)
    assert more.status == "completed"
    assert held.log == ["enter", "resolve", "score", "exit"]


class Connected(SyntheticEnvironment):
    """Its turns' methods exist only while its lifespan holds (a client connected there)."""

    def observe(self, state: SyntheticState, participant: str) -> Any:
        raise RuntimeError("not connected: observe() before lifespan()")

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self.observe = super().observe  # type: ignore[method-assign]
        try:
            yield
        finally:
            del self.observe


async def test_the_turns_call_the_methods_the_lifespan_set_up(tmp_path: Path) -> None:
    result = await AsyncEnvironmentHarness(
        tmp_path, environment=Connected, agents={"alice": SyntheticAgent}
    ).run(START, turns=3)
    assert (result.status, result.turns_completed) == ("completed", 3), result.reason
