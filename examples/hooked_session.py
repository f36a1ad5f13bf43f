"""Harness hooks around a frozen policy: a veto, a re-prompt, and what the evidence keeps.

python examples/hooked_session.py [STORE]

The door is locked; the agent's policy always tries to open it first. Without hooks it wastes
every turn. A hook that reads the environment's predicates blocks ``open`` while the door is
locked and tells the agent why; the agent, asked again with that message in its ``hints``,
unlocks first. Nothing about the agent changed — only the harness around it (docs/hooks.md).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from random import Random
from typing import Any

import msgspec

from envharness import (
    BlockAndPrompt,
    EnvironmentHarness,
    EnvironmentSpec,
    HookContext,
    Hooks,
    HookView,
    Resolution,
    Scenario,
)


class DoorInput(msgspec.Struct, frozen=True):
    locked: bool = True


class Door:
    """Open the door. A locked door must be unlocked first."""

    spec = EnvironmentSpec(name="door", version="1", input_type=DoorInput)

    def initialize(
        self, input: DoorInput, rng: Random, roster: Mapping[str, str]
    ) -> dict[str, Any]:
        return {"locked": input.locked, "open": False}

    def observe(self, state: dict[str, Any], participant: str) -> dict[str, Any]:
        return {"open": state["open"]}  # the agent cannot see the lock: it must try

    def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
        if not actions:  # a hook vetoed the action max_blocks times: the turn passes
            return Resolution(state=state)
        [(name, action)] = actions.items()
        new = dict(state)
        if action.get("do") == "unlock":
            new["locked"] = False
            outcome = "unlocked"
        elif action.get("do") == "open" and not state["locked"]:
            new["open"] = True
            outcome = "the door is open"
        else:
            outcome = "it does not move"
        return Resolution(state=new, outcomes={name: outcome}, done=new["open"])

    def intervene(self, state: dict[str, Any], intervention: Mapping[str, Any]) -> dict[str, Any]:
        return {**state, **intervention}

    def hook_view(self, state: dict[str, Any], participant: str) -> HookView:
        """What hooks may read: the lock as a predicate, and the actions that make sense."""
        return HookView(
            predicates={"locked": state["locked"]},
            admissible=[{"do": "unlock"}, {"do": "open"}],
            task="open the door",
        )


class Pusher:
    """A frozen policy: open, unless a hint says to unlock."""

    implementation = "pusher@1"

    def act(self, observation: dict[str, Any]) -> dict[str, str]:
        hints = observation.get("hints", [])
        return {"do": "unlock" if any("unlock" in hint for hint in hints) else "open"}


def unlock_first(ctx: HookContext, nb: dict[str, Any]) -> BlockAndPrompt | None:
    if ctx.action == {"do": "open"} and ctx.predicates.get("locked"):
        nb["vetoes"] = nb.get("vetoes", 0) + 1
        return BlockAndPrompt(message="the door is locked: unlock it first")
    return None


def main(store: str = ".local/hooked-session") -> None:
    harness = EnvironmentHarness(store, environment=Door, agents={"alice": Pusher})
    scenario = Scenario(id="locked-door", input=DoorInput())
    plain = harness.run(scenario, turns=3)
    print(f"without hooks: {plain.id} {plain.status} after {plain.turns_completed} turns")
    hooked = harness.run(
        scenario, turns=3, hooks=Hooks("door-hooks@1", on_before_action=unlock_first)
    )
    print(f"with hooks:    {hooked.id} {hooked.status}: {hooked.reason}")
    for record in harness.records(hooked.id):
        if record.kind in ("action.attempted", "action.blocked", "hint", "action.executed"):
            payload = msgspec.to_builtins(record.payload)
            payload.pop("kind", None)
            payload.pop("seconds", None)
            print(f"  turn {record.turn}  {record.kind:<16} {payload}")
    print(f"inspect it: envharness --store {store} show {hooked.id}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
