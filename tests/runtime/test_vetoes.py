"""The veto signal: an agent whose answer a hook vetoed is told so, and why, before it is asked
again in the same turn — a Python agent through ``vetoed(turn, action, reason)``, a program
through the re-asked ``act``'s ``vetoed`` field."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import msgspec
import pytest

from envharness import (
    AsyncEnvironmentHarness,
    BlockAndPrompt,
    CommandAgent,
    EnvironmentSpec,
    HookContext,
    Hooks,
    Resolution,
    Scenario,
)
from envharness.contracts.agent import AgentCapabilities
from envharness.protocol import Act, Vetoed, decode_host_message, encode_message
from envharness.records import ActionBlocked, ActionExecuted, Log, SessionStatus

pytestmark = pytest.mark.anyio

LOCKED = "the door is locked: unlock it first"


class DoorInput(msgspec.Struct, frozen=True):
    pass


class Door:
    """Open the door; a hook insists on unlocking first."""

    spec = EnvironmentSpec(name="door", version="1", input_type=DoorInput)

    def initialize(self, input: DoorInput, rng: Random, roster: Any) -> dict[str, Any]:
        return {"unlocked": False, "open": False}

    def observe(self, state: dict[str, Any], participant: str) -> dict[str, Any]:
        return dict(state)

    def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
        new = dict(state)
        for action in actions.values():
            if action.get("do") == "unlock":
                new["unlocked"] = True
            elif action.get("do") == "open":
                new["open"] = True
        return Resolution(state=new, outcomes={n: dict(new) for n in actions}, done=new["open"])

    def intervene(self, state: dict[str, Any], intervention: Mapping[str, Any]) -> Any:
        return {**state, **intervention}


def doorman(ctx: HookContext, nb: dict[str, Any]) -> BlockAndPrompt | None:
    """Vetoes opening a locked door."""
    if ctx.action == {"do": "open"} and not ctx.observation["unlocked"]:
        return BlockAndPrompt(message=LOCKED)
    return None


HOOKS = Hooks("doorman@1", on_before_action=doorman)


class Listener:
    """Opens the door unless told why not; keeps every call it gets, in order."""

    implementation = "listener@1"

    def __init__(self, calls: list[tuple[Any, ...]]) -> None:
        self.calls = calls
        self.vetoes = 0

    def act(self, observation: Any) -> dict[str, str]:
        self.calls.append(("act", observation.get("unlocked")))
        return {"do": "unlock" if self.vetoes else "open"}

    def vetoed(self, turn: int, action: Any, reason: str) -> None:
        self.vetoes += 1
        self.calls.append(("vetoed", turn, action, reason))


class AsyncListener(Listener):
    implementation = "async-listener@1"

    async def act(self, observation: Any) -> dict[str, str]:  # type: ignore[override]
        return super().act(observation)

    async def vetoed(self, turn: int, action: Any, reason: str) -> None:  # type: ignore[override]
        super().vetoed(turn, action, reason)


class Insistent(Listener):
    """Opens, whatever it is told."""

    implementation = "insistent@1"

    def act(self, observation: Any) -> dict[str, str]:
        self.calls.append(("act", observation.get("unlocked")))
        return {"do": "open"}


class Sulky(Listener):
    implementation = "sulky@1"

    def vetoed(self, turn: int, action: Any, reason: str) -> None:
        raise RuntimeError("I do not take vetoes")


async def play(
    store_path: Path, agent: Any, *, turns: int = 2, max_blocks: int = 3
) -> tuple[Any, list[Any]]:
    harness = AsyncEnvironmentHarness(
        store_path, environment=Door, agents={"alice": agent}, hooks=HOOKS, max_blocks=max_blocks
    )
    session = await harness.run(Scenario(id="door", input=DoorInput()), turns=turns)
    return session, [record async for record in harness.records(session.id)]


@pytest.mark.parametrize("kind", [Listener, AsyncListener])
async def test_a_python_agent_is_told_of_a_veto_before_it_is_asked_again(
    store_path: Path, kind: type[Listener]
) -> None:
    calls: list[tuple[Any, ...]] = []
    session, records = await play(store_path, lambda: kind(calls))
    assert session.status == "completed"
    assert calls[:3] == [
        ("act", False),
        ("vetoed", 1, {"do": "open"}, LOCKED),
        ("act", False),  # the re-ask, in the same turn, after the signal
    ]
    assert [c[0] for c in calls].count("vetoed") == 1  # the next turn's answer was allowed
    (blocked,) = [r.payload for r in records if isinstance(r.payload, ActionBlocked)]
    assert blocked.reason == LOCKED
    executed = [r.payload.action for r in records if isinstance(r.payload, ActionExecuted)]
    assert executed == [{"do": "unlock"}, {"do": "unlock"}]


async def test_no_veto_signal_once_the_turn_is_skipped(store_path: Path) -> None:
    """After ``max_blocks`` vetoes the agent is not asked again, so it is not told to expect
    another ask: it hears of the last block through ``feedback``."""
    calls: list[tuple[Any, ...]] = []
    session, records = await play(store_path, lambda: Insistent(calls), turns=1, max_blocks=2)
    assert session.status == "completed"
    assert [c[0] for c in calls] == ["act", "vetoed", "act"]
    assert len([r for r in records if isinstance(r.payload, ActionBlocked)]) == 2


async def test_an_agent_that_fails_to_take_a_veto_fails_its_session(store_path: Path) -> None:
    session, records = await play(store_path, lambda: Sulky([]))
    assert session.status == "failed"
    assert session.reason is not None
    assert "failed while taking a veto" in session.reason
    assert "I do not take vetoes" in session.reason
    assert isinstance(records[-2].payload, SessionStatus)


def test_the_capability_is_found_once() -> None:
    assert AgentCapabilities.of(Listener([])).vetoes is not None
    assert AgentCapabilities.of(Insistent([])).vetoes is not None

    class Plain:
        implementation = "plain@1"

        def act(self, observation: Any) -> dict[str, Any]:
            return {}

    assert AgentCapabilities.of(Plain()).vetoes is None


# -- the protocol -------------------------------------------------------------------------------

PROGRAM = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        print(json.dumps({"type": "ready", "protocol": 1, "implementation": "door-program@1"}))
    elif message["type"] == "act":
        print(json.dumps({"type": "log", "message": json.dumps(message)}))
        told = "vetoed" in message
        action = {"do": "unlock" if told else "open"}
        print(json.dumps({"type": "action", "id": message["id"], "action": action}))
    elif message["type"] == "shutdown":
        break
    sys.stdout.flush()
"""


async def test_a_program_is_told_of_a_veto_in_the_re_asked_act(
    store_path: Path, tmp_path: Path
) -> None:
    program = tmp_path / "door_program.py"
    program.write_text(PROGRAM)
    agent = CommandAgent([sys.executable, str(program)], implementation="door-program@1")
    session, records = await play(store_path, agent)
    assert session.status == "completed", session.reason
    said = [r.payload.message for r in records if isinstance(r.payload, Log)]
    acts = [json.loads(message) for message in said if message.startswith('{"type": "act"')]
    assert [act["turn"] for act in acts] == [1, 1, 2]
    assert "vetoed" not in acts[0], "an act that is no re-ask carries no vetoed field"
    assert acts[1]["vetoed"] == {"action": {"do": "open"}, "reason": LOCKED}
    assert acts[1]["id"] != acts[0]["id"]
    assert "vetoed" not in acts[2], "the signal is for the one re-ask, not the next turn"


def test_the_act_field_is_absent_unless_set_and_null_reads_as_absent() -> None:
    plain = encode_message(Act(id="1", turn=1, observation={}))
    assert b"vetoed" not in plain
    vetoed = Act(id="2", turn=1, observation={}, vetoed=Vetoed(action={"a": 1}, reason="no"))
    line = encode_message(vetoed)
    assert json.loads(line)["vetoed"] == {"action": {"a": 1}, "reason": "no"}
    assert decode_host_message(line.rstrip(b"\n")) == vetoed
    read = decode_host_message(b'{"type":"act","id":"3","turn":1,"observation":1,"vetoed":null}')
    assert isinstance(read, Act)
    assert read.vetoed is None
