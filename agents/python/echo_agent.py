#!/usr/bin/env python3
"""A reference agent for envharness protocol v1, in Python with the standard library only.

It needs no envharness: the protocol (``protocol/README.md``) is all an external agent needs,
and this file is the proof. Check it with
``envharness protocol check -- python3 agents/python/echo_agent.py``; use it in a session as
``CommandAgent(["python3", "agents/python/echo_agent.py"], implementation="echo@1")``.

Its policy suits ``envharness.fixtures.SyntheticEnvironment``: step the observed ``total`` one
unit toward ``target`` (toward 0 when there is none) with ``{"value": 1}``, ``{"value": -1}``
or ``{"value": 0}``; any other observation gets ``{"value": 0}``. It is deterministic, so its
small state (acts answered, feedback received) is all a snapshot needs.

stdout carries protocol lines only, each flushed. Diagnostics go to stderr (one line after the
handshake) or travel as ``log`` messages. It exits with status 0 after ``shutdown`` or at the end
of its input, and with 1 when the host offers no version it speaks. SIGTERM ends it at once.
"""

import json
import os
import sys

IMPLEMENTATION = "echo-agent-python@1"


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def send(message):
    """Write one protocol line and flush it: an unflushed answer never arrives."""
    sys.stdout.write(compact(message) + "\n")
    sys.stdout.flush()


def log(message, level="info"):
    send({"type": "log", "level": level, "message": message})


def decide(observation):
    """One unit toward the target (or toward 0): the SyntheticEnvironment policy."""
    if not isinstance(observation, dict):
        return {"value": 0}
    total, target = observation.get("total"), observation.get("target")
    if not isinstance(total, int) or isinstance(total, bool):
        return {"value": 0}
    goal = target if isinstance(target, int) and not isinstance(target, bool) else 0
    return {"value": (total < goal) - (total > goal)}


def main():
    state = {"acts": 0, "feedback": 0}
    # Bytes in, decoded as UTF-8 here: the locale of a minimal environment must not matter.
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        message = json.loads(raw.decode("utf-8"))
        kind = message.get("type")
        if kind == "hello":
            if 1 not in message.get("protocols", []):
                send({"type": "error", "message": "this agent speaks protocol version 1 only"})
                return 1
            print(f"echo agent: {message['participant']} (seed {message['seed']})", file=sys.stderr)
            send({"type": "ready", "protocol": 1, "implementation": IMPLEMENTATION,
                  "capabilities": ["snapshot"]})  # fmt: skip
        elif kind == "act":
            state["acts"] += 1
            action = decide(message.get("observation"))
            log(f"turn {message.get('turn')}: {compact(action)}", "debug")
            send({"type": "action", "id": message["id"], "action": action})
        elif kind == "feedback":
            state["feedback"] += 1  # counted, never answered
        elif kind == "snapshot":
            send({"type": "state", "id": message["id"], "state": dict(state)})
        elif kind == "restore":
            restored = message.get("state")
            if not isinstance(restored, dict):
                send({"type": "error", "id": message["id"], "message": "not a state of mine"})
                return 1
            state = {name: int(restored.get(name, 0)) for name in ("acts", "feedback")}
            send({"type": "restored", "id": message["id"]})
        elif kind == "shutdown":
            log(f"bye after {state['acts']} acts")
            return 0
        elif "id" in message:  # a request this version does not know: say so, do not stall
            send({"type": "error", "id": message["id"], "message": f"unknown request {kind!r}"})
        else:
            log(f"ignored a message of unknown type {kind!r}", "warning")
    return 0  # the end of input means the same as shutdown


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the host went away: nobody is left to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        sys.exit(0)
