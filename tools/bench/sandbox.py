"""Hook calls through the sandboxes against the same hook as a plain Python function.

What it measures, for one small ``on_before_action`` hook (a predicate check, a notebook
counter, an effect):

- raw: the hook as an ordinary Python function, called with a dict context — the least a host
  can do;
- LocalSandbox: ``run_sync`` (the runtime in the calling thread: fresh read-only context and
  globals, traced line budget, JSON checks) and ``run`` (the same, through a worker thread);
  ``run_sync`` again on a hook shaped like the mining engineer's (:data:`MINED`), where the
  guards that measure compared, searched and written values run on every line;
- SubprocessSandbox: ``run`` on a long-lived worker process (JSON lines both ways);
- a fresh interpreter per call: ``python -S -P _hookrt.py`` started, loaded, called and
  stopped for every call — what the long-lived worker avoids.

It prints each rate and latency and the ratio to raw. Run it from the repository root::

    .venv/bin/python tools/bench/sandbox.py                 # 2,000 calls each
    .venv/bin/python tools/bench/sandbox.py --calls 500 --backend trio
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from envharness.hooks import HookContext
from envharness.optimizer import CodeHook, HarnessPatch, LocalSandbox, SubprocessSandbox
from envharness.optimizer.patches.sandbox import HookProgram
from envharness.optimizer.patches.sandbox import process as process_module

CODE = """\
def on_before_action(ctx, nb):
    nb["calls"] = nb.get("calls", 0) + 1
    action = ctx.action if isinstance(ctx.action, dict) else {}
    if action.get("tool") == "issue_refund" and not ctx.predicates.get("looked_up"):
        return block_and_prompt("look the order up first")
    return None
"""
MINED = """\
def on_before_action(ctx, nb):
    action = ctx.action if isinstance(ctx.action, dict) else {}
    tool = str(action.get('tool', ''))
    if not (tool in ['issue_refund', 'cancel'] and ctx.predicates.get('looked_up') != True):
        return None
    for option in ctx.admissible or []:
        if not isinstance(option, dict):
            continue
        same = [option.get(key) == action.get(key) for key in action if key != 'order']
        if all(same) and option != action:
            return rewrite(option, f'{tool}: use {option.get("order")} instead')
    return block_and_prompt(f'{tool} needs {sorted(ctx.state)} first')
"""
"""A hook shaped like the mining engineer's: comparisons of values, a list search, f-strings
with several placeholders, ``sorted``, ``str``: every guard that measures a value runs."""
CTX = HookContext(
    hook="on_before_action",
    session_id="bench",
    participant="alice",
    role="agent",
    step=3,
    state={"looked_up": False, "orders": ["A1", "B2"]},
    predicates={"looked_up": False},
    action={"tool": "issue_refund", "order": "A1"},
    admissible=[{"tool": "lookup_order", "order": "A1"}, {"tool": "issue_refund", "order": "B2"}],
)


def raw_hook(ctx: dict[str, Any], nb: dict[str, Any]) -> Any:
    nb["calls"] = nb.get("calls", 0) + 1
    action = ctx["action"] if isinstance(ctx["action"], dict) else {}
    if action.get("tool") == "issue_refund" and not ctx["predicates"].get("looked_up"):
        return {"effect": "block_and_prompt", "message": "look the order up first"}
    return None


def timed(calls: int, call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


async def timed_async(calls: int, call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await call()
    return (time.perf_counter() - started) / calls


def fresh_interpreter_call(program: HookProgram, context: dict[str, Any]) -> None:
    argv = [sys.executable, "-S", "-P", "-B", str(process_module.WORKER_SCRIPT), "536870912", "2"]
    load = {"op": "load", "id": program.digest, "hooks": [list(h) for h in program.hooks]}
    limits = {"timeout_s": 1.0, "max_lines": 100000, "notebook_bytes": 65536,
              "result_bytes": 65536}  # fmt: skip
    call = {"op": "call", "id": program.digest, "hook": "on_before_action", "ctx": context,
            "nb": {}, "limits": limits}  # fmt: skip
    stdin = (json.dumps(load) + "\n" + json.dumps(call) + "\n").encode()
    done = subprocess.run(
        argv, input=stdin, capture_output=True, env=dict(process_module.SANDBOX_ENV), check=True
    )
    assert b'"block_and_prompt"' in done.stdout, done.stdout


async def main(calls: int) -> None:
    patch = HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=CODE),))
    program = HookProgram.from_patch(patch)
    context: dict[str, Any] = msgspec.to_builtins(CTX)
    rows: list[tuple[str, float]] = []

    rows.append(("raw Python function", timed(calls, lambda: raw_hook(context, {}))))
    local = LocalSandbox()
    rows.append(
        (
            "LocalSandbox.run_sync",
            timed(calls, lambda: local.run_sync(program, "on_before_action", context, {})),
        )
    )
    mined = HookProgram.from_patch(
        HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=MINED),))
    )
    assert local.run_sync(mined, "on_before_action", context, {}).effect is not None
    rows.append(
        (
            "LocalSandbox.run_sync, mined",
            timed(calls, lambda: local.run_sync(mined, "on_before_action", context, {})),
        )
    )
    rows.append(
        (
            "LocalSandbox.run (thread)",
            await timed_async(calls, lambda: local.run(program, "on_before_action", context, {})),
        )
    )
    async with SubprocessSandbox() as sandbox:
        await sandbox.run(program, "on_before_action", context, {})  # load once
        rows.append(
            (
                "SubprocessSandbox.run",
                await timed_async(
                    calls, lambda: sandbox.run(program, "on_before_action", context, {})
                ),
            )
        )
    fresh_calls = max(5, calls // 100)
    rows.append(
        (
            "fresh interpreter per call",
            await anyio.to_thread.run_sync(
                lambda: timed(fresh_calls, lambda: fresh_interpreter_call(program, context))
            ),
        )
    )
    raw = rows[0][1]
    print(f"{'':28} {'calls/s':>12} {'latency':>12} {'x raw':>10}")
    for name, seconds in rows:
        print(f"{name:28} {1 / seconds:12,.0f} {seconds * 1e3:10.3f}ms {seconds / raw:10.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    arguments = parser.parse_args()
    anyio.run(main, arguments.calls, backend=arguments.backend)
