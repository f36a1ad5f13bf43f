"""An environment program that misbehaves on cue, for tests/adapters/test_process.py.

``python scripted_environment.py MODE``: a counter environment (state ``{"n": int}``; each
``{"value": k}`` adds k; done at 3) that breaks the protocol as MODE says, at ``resolve`` unless
the mode says otherwise. Every process appends its pid (and its children's) to the file named by
``PIDFILE``, so a test can check that none is left running.
"""

import json
import os
import signal
import subprocess
import sys
import time

MODE = sys.argv[1]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def note_pid(pid):
    with open(os.environ["PIDFILE"], "a") as pids:
        pids.write(f"{pid}\n")


def spec():
    version = "1"
    if MODE == "spec-changes":  # the describing process says 1, every later one 2
        counter = os.environ["PIDFILE"] + ".count"
        with open(counter, "a+") as count:
            count.seek(0)
            version = "1" if not count.read() else "2"
            count.write("x")
    described = {"name": "counter", "version": version, "invalid_actions": "block"}
    if MODE == "bad-spec":
        described["turn_order"] = "environment"  # without the acting capability
    return described


def misbehave(message):
    """Answer ``message`` (a resolve) the way MODE breaks the protocol."""
    if MODE == "crash":
        print("boom: the rules crashed", file=sys.stderr, flush=True)
        sys.exit(3)
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "invalid-json":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
    elif MODE == "wrong-id":
        send({"type": "result", "id": "999", "value": {"state": {"n": 0}}})
    elif MODE == "duplicate-id":
        send({"type": "result", "id": str(int(message["id"]) - 1), "value": None})
    elif MODE == "unexpected":
        send({"type": "ready", "protocol": 1, "spec": spec()})
    elif MODE == "error":
        send({"type": "error", "id": message["id"], "message": "the rules refuse this move"})
    elif MODE == "bad-value":
        send({"type": "result", "id": message["id"], "value": {"done": "yes"}})
    elif MODE == "huge-line":
        sys.stdout.write('{"type":"log","message":"' + "x" * 3_000_000 + '"}\n')
        sys.stdout.flush()


def main():
    note_pid(os.getpid())
    if MODE in ("ignore-sigterm", "child"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        note_pid(child.pid)
    print(f"scripted environment {MODE} started", file=sys.stderr, flush=True)
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        message = json.loads(raw)
        kind = message["type"]
        if kind == "hello":
            if MODE == "exit-before-ready":
                print("cannot find the level file levels/1.txt", file=sys.stderr, flush=True)
                return 1
            if MODE == "never-ready":
                time.sleep(3600)
            send({"type": "ready", "protocol": 1, "implementation": f"scripted-{MODE}@1",
                  "spec": spec(), "capabilities": []})  # fmt: skip
        elif kind == "shutdown":
            if MODE in ("ignore-sigterm", "child"):
                time.sleep(3600)
            return 0
        elif kind == "initialize":
            send({"type": "result", "id": message["id"], "value": {"n": 0}})
        elif kind == "observe":
            send({"type": "log", "message": f"observing {message['state']}"})
            send({"type": "result", "id": message["id"], "value": message["state"]})
        elif kind == "intervene":
            state = dict(message["state"], **message["intervention"])
            send({"type": "result", "id": message["id"], "value": state})
        elif kind == "resolve":
            if MODE not in ("good", "ignore-sigterm", "child", "spec-changes"):
                misbehave(message)  # and read on: a `shutdown` ends it promptly
                continue
            n = message["state"]["n"] + sum(a["value"] for a in message["actions"].values())
            send({"type": "result", "id": message["id"],
                  "value": {"state": {"n": n}, "done": n >= 3, "signals": {"n": n}}})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
