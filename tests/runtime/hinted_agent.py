"""A protocol v1 agent that reads hints; standard library only.

It plays ``tests/runtime/test_hooks.py``'s desk: it refunds unless a hint it was shown mentions
``lookup`` — then it looks the order up. Every hint it sees goes to stderr (a ``log`` record),
so a test can check what reached the program; so does each ``feedback``'s status and action.
"""

from __future__ import annotations

import json
import sys


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        kind = message["type"]
        if kind == "hello":
            send({"type": "ready", "protocol": 1, "implementation": "hinted@1"})
        elif kind == "act":
            observation = message["observation"]
            hints = observation.get("hints", []) if isinstance(observation, dict) else []
            for hint in hints:
                sys.stderr.write(f"hint: {hint}\n")
                sys.stderr.flush()
            tool = "lookup" if any("lookup" in hint for hint in hints) else "refund"
            send({"type": "action", "id": message["id"], "action": {"tool": tool}})
        elif kind == "feedback":
            sys.stderr.write(f"feedback: {message['status']} {json.dumps(message['action'])}\n")
            sys.stderr.flush()
        elif kind == "shutdown":
            return


if __name__ == "__main__":
    main()
