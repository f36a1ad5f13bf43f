"""A protocol v1 agent using only the standard library: it echoes each observation back.

Run by the tests as ``[sys.executable, echo_agent.py]`` (``--chatty``: 2000 log lines of 1 KB
after each action, to fill the pipe); it never imports envharness, which is
the point: the protocol is all an external agent needs. stdout carries protocol lines only;
diagnostics go to stderr or travel as ``log`` messages.
"""

import json
import sys


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main() -> int:
    chatty = "--chatty" in sys.argv  # 2 MB of logs after each action, before reading again
    memory: list[int] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        kind = message.get("type")
        if kind == "hello":
            if 1 not in message["protocols"]:
                send({"type": "error", "message": "this agent speaks protocol 1 only"})
                return 1
            print(f"hello from {message['participant']}", file=sys.stderr)
            send({"type": "ready", "protocol": 1, "implementation": "echo@1",
                  "capabilities": ["snapshot"]})  # fmt: skip
        elif kind == "act":
            memory.append(message["turn"])
            send({"type": "log", "message": f"turn {message['turn']}", "level": "debug"})
            send({"type": "action", "id": message["id"], "action": {"echo": message["observation"]},
                  "cost": {"seconds": 0.0}})  # fmt: skip
            for i in range(2000 if chatty else 0):
                send({"type": "log", "message": f"{i:04} " + "." * 1000, "level": "debug"})
        elif kind == "feedback":
            pass
        elif kind == "snapshot":
            send({"type": "state", "id": message["id"], "state": {"memory": memory}})
        elif kind == "restore":
            memory = list(message["state"]["memory"])
            send({"type": "restored", "id": message["id"]})
        elif kind == "shutdown":
            send({"type": "log", "message": f"bye after {len(memory)} turns"})
            return 0
        else:
            send({"type": "error", "id": message.get("id"), "message": f"unknown type {kind!r}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
