#!/usr/bin/env python3
"""A reference environment for envharness environment protocol v1: two-player Nim, in Python
with the standard library only.

It needs no envharness: the protocol (``protocol/environment.md``) is all an environment program
needs. Use it in a session as ``ProcessEnvironment(["python3", "environments/python/nim.py"])``.

The rules: heaps of stones (the scenario's input ``{"heaps": [3, 4, 5]}``); the two players take
turns, each taking one or more stones from one heap (``{"heap": 0, "take": 2}``); whoever takes
the last stone wins. The environment says whose turn it is (``turn_order: "environment"``, the
``acting`` request), the seed says who moves first, an illegal move is blocked (``check_action``)
and the player to move is asked again, and when the game ends both players learn who won, the
loser included, with a reward of +1 or -1 each.

It is pure: every request carries the state it applies to, and the answer depends on nothing
else, so resume and branches work without it keeping anything between requests.

stdout carries protocol lines only, each flushed; diagnostics go to stderr. It exits with status 0
after ``shutdown`` or at the end of its input, and with 1 when the host offers no version it
speaks.
"""

import json
import os
import sys

IMPLEMENTATION = "nim-python@1"

SPEC = {
    "name": "nim",
    "version": "1",
    "roles": ["player"],
    "turn_order": "environment",
    "invalid_actions": "block",
    "input_schema": {
        "type": "object",
        "properties": {"heaps": {"type": "array", "items": {"type": "integer", "minimum": 1}}},
    },
    "action_schema": {
        "type": "object",
        "properties": {
            "heap": {"type": "integer", "minimum": 0},
            "take": {"type": "integer", "minimum": 1},
        },
        "required": ["heap", "take"],
    },
    "observation_schema": {
        "type": "object",
        "properties": {
            "heaps": {"type": "array", "items": {"type": "integer"}},
            "you": {"type": "string"},
            "opponent": {"type": "string"},
        },
    },
    "scoring_version": "nim-score@1",
}
CAPABILITIES = ["acting", "check_action", "render_text", "score"]
DEFAULT_HEAPS = [3, 4, 5]


def send(message):
    """Write one protocol line and flush it: an unflushed answer never arrives."""
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# -- the rules: each takes the state it applies to and returns a new value ------------------------


def initialize(input, seed, roster):
    players = list(roster)
    if len(players) != 2:
        raise ValueError(f"Nim is for two players, got {len(players)}: {players}")
    heaps = (input or {}).get("heaps", DEFAULT_HEAPS)
    if not heaps or not all(isinstance(h, int) and h > 0 for h in heaps):
        raise ValueError(f"heaps must be positive integers, got {heaps!r}")
    return {"heaps": list(heaps), "players": players, "to_move": seed % 2, "moves": 0}


def acting(state):
    if not any(state["heaps"]):
        return []
    return [state["players"][state["to_move"]]]


def observe(state, participant):
    players = state["players"]
    opponent = players[1] if participant == players[0] else players[0]
    return {"heaps": state["heaps"], "you": participant, "opponent": opponent}


def check_action(state, participant, action):
    heaps = state["heaps"]
    heap, take = action.get("heap"), action.get("take")
    if not isinstance(heap, int) or isinstance(heap, bool) or not 0 <= heap < len(heaps):
        return f"heap must be an index from 0 to {len(heaps) - 1}, got {heap!r}"
    if not isinstance(take, int) or isinstance(take, bool) or not 1 <= take <= heaps[heap]:
        return f"take must be from 1 to {heaps[heap]} (the stones in heap {heap}), got {take!r}"
    return None


def resolve(state, actions):
    if not actions:  # the move was blocked: the same player is asked again
        return {"state": state}
    [(mover, action)] = actions.items()
    heaps = list(state["heaps"])
    heaps[action["heap"]] -= action["take"]
    after = dict(state, heaps=heaps, to_move=1 - state["to_move"], moves=state["moves"] + 1)
    if any(heaps):
        return {"state": after, "outcomes": {mover: {"heaps": heaps}}}
    loser = next(player for player in state["players"] if player != mover)
    after["winner"] = mover
    return {
        "state": after,
        "outcomes": {mover: {"winner": mover}, loser: {"winner": mover}},
        "rewards": {mover: 1.0, loser: -1.0},
        "done": True,
    }


def intervene(state, intervention):
    heaps = intervention.get("heaps")
    if not isinstance(heaps, list) or not all(isinstance(h, int) and h >= 0 for h in heaps):
        raise ValueError('an intervention sets the heaps: {"heaps": [non-negative integers]}')
    return dict(state, heaps=heaps)


def render_text(state, participant):
    rows = [f"heap {i}: {'|' * stones} ({stones})" for i, stones in enumerate(state["heaps"])]
    return "\n".join(rows)


def score(state, scenario):
    winner = state.get("winner")
    return {
        "metrics": {"moves": state["moves"]},
        "per_participant": {p: {"won": 1.0 if p == winner else 0.0} for p in state["players"]},
    }


RULES = {
    "initialize": lambda m: initialize(m.get("input"), m["seed"], m["roster"]),
    "acting": lambda m: acting(m["state"]),
    "observe": lambda m: observe(m["state"], m["participant"]),
    "check_action": lambda m: check_action(m["state"], m["participant"], m["action"]),
    "resolve": lambda m: resolve(m["state"], m["actions"]),
    "intervene": lambda m: intervene(m["state"], m["intervention"]),
    "render_text": lambda m: render_text(m["state"], m["participant"]),
    "score": lambda m: score(m["state"], m["scenario"]),
}


def main():
    # Bytes in, decoded as UTF-8 here: the locale of a minimal environment must not matter.
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        message = json.loads(raw.decode("utf-8"))
        kind = message.get("type")
        if kind == "hello":
            if 1 not in message.get("protocols", []):
                send({"type": "error", "message": "this program speaks protocol version 1 only"})
                return 1
            send({"type": "ready", "protocol": 1, "implementation": IMPLEMENTATION,
                  "spec": SPEC, "capabilities": CAPABILITIES})  # fmt: skip
        elif kind == "shutdown":
            return 0
        elif kind in RULES:
            try:
                value = RULES[kind](message)
            except (ValueError, KeyError, TypeError) as exc:
                send({"type": "error", "id": message["id"], "message": f"{kind}: {exc}"})
                continue
            send({"type": "result", "id": message["id"], "value": value})
        elif "id" in message:  # a request this version does not know: say so, do not stall
            send({"type": "error", "id": message["id"], "message": f"unknown request {kind!r}"})
    return 0  # the end of input means the same as shutdown


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the host went away: nobody is left to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
