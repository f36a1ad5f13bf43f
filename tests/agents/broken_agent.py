"""Agents that break the protocol in one way each, for the conformance suite to catch.

``broken_agent.py MODE [PIDFILE]``, run with the test's own interpreter:

* ``prints-text``: prints a debugging line on stdout before each action (the classic mistake);
* ``wrong-id``: answers every act with an id of its own making;
* ``silent``: reads everything, answers nothing, exits at the end of its input;
* ``crashes``: dies with a traceback on stderr when the hello arrives;
* ``stubborn``: answers correctly but ignores ``shutdown``, the end of its input and SIGTERM,
  and starts a child that ignores SIGTERM too; both pids go to PIDFILE. Only SIGKILL to the
  process group ends them.
"""

import json
import os
import signal
import subprocess
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    mode = sys.argv[1]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        with open(sys.argv[2], "a") as pids:
            pids.write(f"{os.getpid()} {child.pid}\n")
    for line in sys.stdin:
        message = json.loads(line)
        kind = message["type"]
        if mode == "silent":
            continue
        if mode == "crashes":
            raise RuntimeError("the model client is not configured")
        if kind == "hello":
            send({"type": "ready", "protocol": 1, "implementation": f"broken-{mode}@1"})
        elif kind == "act":
            if mode == "prints-text":
                print(f"thinking about turn {message['turn']}")
            answer_id = f"not-{message['id']}" if mode == "wrong-id" else message["id"]
            send({"type": "action", "id": answer_id, "action": {"value": 0}})
    if mode == "stubborn":
        time.sleep(600)


if __name__ == "__main__":
    main()
