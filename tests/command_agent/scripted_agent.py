"""A protocol v1 agent that misbehaves on request; standard library only.

    python scripted_agent.py MODE

MODE ``good`` plays the synthetic environment properly; every other mode breaks the protocol
in one specific way (see ``main``). It writes its pid to stderr first, so tests can check the
process is gone afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(mode: str) -> None:
    sys.stderr.write(f"pid {os.getpid()}\n")
    sys.stderr.flush()
    if mode == "exit-before-ready":
        sys.stderr.write("missing model weights\n")
        sys.exit(3)
    if mode == "ignore-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sys.stderr.write(f"child {child.pid}\n")
        sys.stderr.flush()
    acts = 0
    for line in sys.stdin:
        message = json.loads(line)
        kind = message["type"]
        if kind == "hello":
            if mode == "never-ready":
                time.sleep(60)
            secret = os.environ.get("ENVHARNESS_TEST_SECRET", "absent")
            sys.stderr.write(f"secret {secret} model {os.environ.get('MODEL', 'unset')}\n")
            sys.stderr.flush()
            send({"type": "ready", "protocol": 1, "implementation": f"scripted-{mode}"})
        elif kind == "act":
            acts += 1
            if mode == "invalid-json":
                sys.stdout.write("{this is not json\n")
            elif mode == "invalid-utf8":
                sys.stdout.buffer.write(b'{"type": "action", "id": "\xff\xfe"}\n')
            elif mode == "invalid-utf8-unknown-field":  # a valid action but for a field it adds
                head = json.dumps({"type": "action", "id": message["id"], "action": {"value": 1}})
                sys.stdout.buffer.write(head[:-1].encode() + b', "note": "caf\xe9"}\n')
            elif mode == "huge-line":
                sys.stdout.write('{"type": "log", "message": "' + "x" * (3 << 20) + '"}\n')
            elif mode == "flood":
                chunk = "y" * 65536
                for _ in range(200):
                    sys.stdout.write(chunk)
            elif mode == "unknown-type":
                send({"type": "telepathy", "id": message["id"]})
            elif mode == "wrong-id":
                send({"type": "action", "id": "not-" + message["id"], "action": {"value": 1}})
            elif mode == "silent":
                time.sleep(60)
            elif mode == "exit-mid-session" and acts == 2:
                sys.stderr.write("segmentation fault (pretend)\n")
                sys.stderr.flush()
                os._exit(139)
            else:
                send({"type": "log", "message": f"thinking about turn {message['turn']}"})
                cost = {"input_tokens": 12, "output_tokens": 3, "usd": 0.0001}
                send({"type": "action", "id": message["id"], "action": {"value": 1}, "cost": cost})
            sys.stdout.flush()
        elif kind == "shutdown":
            if mode in ("ignore-sigterm", "child"):
                time.sleep(60)
            return


if __name__ == "__main__":
    main(sys.argv[1])
