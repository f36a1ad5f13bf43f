"""Agents see their task: a factory that takes ``context`` and an agent's ``lifespan`` are told
the participant, role, scenario id and input and seed — each their own copy, never the
scenario's reference — and a program is told them in ``hello``; all of it can be read back
from the session's ``session.created``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import msgspec
import pytest

from envharness import (
    AgentContext,
    AsyncEnvironmentHarness,
    CommandAgent,
    ConfigurationError,
    EnvironmentSpec,
    Resolution,
    Scenario,
)
from envharness.contracts.agent import AgentStart, takes_start
from envharness.protocol import Hello, decode_host_message
from envharness.records import Log, SessionCreated

pytestmark = pytest.mark.anyio


class Task(msgspec.Struct, frozen=True):
    target: int
    words: tuple[str, ...] = ()


class Guessing:
    spec = EnvironmentSpec(
        name="guessing", version="1", input_type=Task, roles=("guesser", "judge")
    )

    def initialize(self, input: Task, rng: Random, roster: Any) -> dict[str, int]:
        return {"target": input.target}

    def observe(self, state: dict[str, int], participant: str) -> dict[str, int]:
        return {}

    def resolve(self, state: dict[str, int], actions: Mapping[str, Any]) -> Resolution:
        return Resolution(state=state, outcomes={name: None for name in actions}, done=True)

    def intervene(self, state: dict[str, int], intervention: Mapping[str, Any]) -> Any:
        return state


SCENARIO = Scenario(
    id="guess-7", input=Task(target=7, words=("a", "b")), reference={"answer": "secret"}
)
ROLES = {"alice": "guesser", "bob": "judge"}


class Told:
    """Keeps what its factory and its lifespan were told; spoils its own copy of the input."""

    implementation = "told@1"
    seen: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, context: AgentStart) -> None:
        self.seen.append(("factory", context))
        context.input["target"] = -1  # its own copy: neither the record nor bob's changes

    @asynccontextmanager
    async def lifespan(self, context: AgentContext) -> AsyncIterator[None]:
        self.seen.append(("lifespan", context))
        yield

    def act(self, observation: Any) -> dict[str, Any]:
        return {}


class Plain:
    implementation = "plain@1"

    def act(self, observation: Any) -> dict[str, Any]:
        return {}


async def test_factories_and_lifespans_are_told_the_task_as_recorded(store_path: Path) -> None:
    Told.seen = []
    harness = AsyncEnvironmentHarness(
        store_path,
        environment=Guessing,
        agents={"alice": Told, "bob": lambda context: Told(context=context)},
        roles=ROLES,
    )
    session = await harness.run(SCENARIO, turns=3, seed=41)
    assert session.status == "completed", session.reason
    records = [r async for r in harness.records(session.id)]
    [config] = [r.payload.config for r in records if isinstance(r.payload, SessionCreated)]
    assert config.scenario.input == {"target": 7, "words": ["a", "b"]}

    starts = [told for how, told in Told.seen if how == "factory"]
    assert [(s.participant, s.role) for s in starts] == [("alice", "guesser"), ("bob", "judge")]
    for start in starts:
        assert isinstance(start, AgentStart)
        assert start.session_id == session.id
        assert start.scenario_id == config.scenario.id == "guess-7"
        assert start.seed == config.seed == 41
        assert start.role == config.participants[start.participant].role
        assert start.input == {"target": -1, "words": ["a", "b"]}  # as the agent left it
        assert "secret" not in repr(start)

    contexts = [told for how, told in Told.seen if how == "lifespan"]
    assert [c.participant for c in contexts] == ["alice", "bob"]
    for context in contexts:
        assert isinstance(context, AgentContext)
        assert context.scenario_id == "guess-7"
        assert context.input == config.scenario.input
        assert context.start.seed == 41
        assert context.start.participant == context.participant
        assert "secret" not in repr(context)


async def test_a_factory_without_context_is_called_as_before(store_path: Path) -> None:
    made: list[tuple[Any, ...]] = []

    def factory(*args: Any, **kwargs: Any) -> Plain:  # takes anything, asks for nothing
        made.append((args, kwargs))
        return Plain()

    harness = AsyncEnvironmentHarness(
        store_path, environment=Guessing, agents={"alice": factory, "bob": Plain}, roles=ROLES
    )
    assert (await harness.run(SCENARIO, turns=1)).status == "completed"
    assert made == [((), {})]


async def test_only_the_factories_that_take_a_start_are_given_one(store_path: Path) -> None:
    """A session makes the starts its factories ask for and no others (most ask for none)."""
    Told.seen = []
    harness = AsyncEnvironmentHarness(
        store_path, environment=Guessing, agents={"alice": Plain, "bob": Told}, roles=ROLES
    )
    assert harness._template.starting == frozenset({"bob"})
    assert (await harness.run(SCENARIO, turns=1, seed=3)).status == "completed"
    [start] = [told for how, told in Told.seen if how == "factory"]
    assert (start.participant, start.role, start.seed) == ("bob", "judge", 3)


def test_which_factories_take_a_start() -> None:
    def keyword_only(*, context: AgentStart) -> Plain:
        return Plain()

    def positional_only(context: AgentStart, /) -> Plain:
        return Plain()

    assert takes_start(Told)
    assert takes_start(keyword_only)
    assert not takes_start(positional_only)  # it could not be passed as context=
    assert not takes_start(Plain)
    assert not takes_start(lambda: Plain())
    assert not takes_start(print)


async def test_a_factory_that_fails_on_its_start_is_named(store_path: Path) -> None:
    def picky(context: AgentStart) -> Plain:
        raise ValueError(f"no agent for {context.scenario_id}")

    harness = AsyncEnvironmentHarness(
        store_path, environment=Guessing, agents={"alice": picky, "bob": Plain}, roles=ROLES
    )
    with pytest.raises(ConfigurationError, match=r"agent 'alice'.*picky\(\) raised ValueError"):
        await harness.run(SCENARIO, turns=1)


PROGRAM = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        hello = line.strip()
        print(json.dumps({"type": "ready", "protocol": 1, "implementation": "told-program@1"}))
    elif message["type"] == "act":
        print(json.dumps({"type": "log", "message": hello}))
        print(json.dumps({"type": "action", "id": message["id"], "action": {}}))
    elif message["type"] == "shutdown":
        break
    sys.stdout.flush()
"""


async def test_a_program_is_told_the_task_in_hello(store_path: Path, tmp_path: Path) -> None:
    program = tmp_path / "told_program.py"
    program.write_text(PROGRAM)
    agent = CommandAgent([sys.executable, str(program)], implementation="told-program@1")
    harness = AsyncEnvironmentHarness(
        store_path, environment=Guessing, agents={"alice": agent, "bob": Plain}, roles=ROLES
    )
    session = await harness.run(SCENARIO, turns=1, seed=5)
    assert session.status == "completed", session.reason
    records = [r async for r in harness.records(session.id)]
    [said] = [
        r.payload.message
        for r in records
        if isinstance(r.payload, Log) and r.payload.message.startswith('{"type":"hello"')
    ]
    hello = json.loads(said)
    assert hello["scenario"] == {"id": "guess-7", "input": {"target": 7, "words": ["a", "b"]}}
    assert (hello["participant"], hello["role"], hello["seed"]) == ("alice", "guesser", 5)
    assert "secret" not in said


def test_hello_without_a_scenario_is_the_same_line_as_before() -> None:
    """Older hosts sent no ``scenario``; a hello without it is byte-for-byte the old one, and a
    program may read it as absent or null."""
    line = (
        b'{"type":"hello","protocols":[1],"session":"s","participant":"p","role":"r",'
        b'"seed":1,"environment":{"name":"e","version":"1","turn_order":"simultaneous",'
        b'"roles":["r"]}}'
    )
    hello = decode_host_message(line)
    assert isinstance(hello, Hello)
    assert b"scenario" not in msgspec.json.encode(hello)
    told = decode_host_message(line[:-1] + b',"scenario":{"id":"x","input":[1]}}')
    assert isinstance(told, Hello)
    assert msgspec.to_builtins(told.scenario) == {"id": "x", "input": [1]}
