"""Round trips through CommandAgent against a raw JSON-lines echo over the same program.

What it measures, for ``agents/python/echo_agent.py`` (the stdlib reference agent):

- raw: an anyio subprocess, ``hello``/``ready`` by hand, then ``act`` lines written and
  ``action`` lines read and decoded with the standard ``json`` module — the least a host can do;
- CommandAgent: the same program started by ``CommandAgent``'s lifespan (process group,
  stderr drained into logs, protocol channel with bounded framing and id checks), asked with
  ``act`` — everything envharness does per decision except recording it;

for one agent (round trips/s, p50 and p99 latency) and for 8 and 64 concurrent agent processes
(aggregate round trips/s). It prints each rate and the ratio CommandAgent/raw.

Run it from the repository root::

    .venv/bin/python tools/bench/protocol.py                  # 2,000 round trips per agent
    .venv/bin/python tools/bench/protocol.py --round-trips 500 --backend trio

For scale: a host that starts a new process per decision pays ~30 ms per call (~16/s); a
persistent process per participant should be two orders of magnitude faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from envharness.contracts.agent import AgentContext
from envharness.contracts.command_agent import CommandAgent
from envharness.records import EnvironmentRef

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(ROOT / "agents" / "python" / "echo_agent.py")]
OBSERVATION = {"total": 3, "target": 0, "turn": 1, "my_contributions": [1, -1, 0]}
HELLO = {
    "type": "hello",
    "protocols": [1],
    "session": "bench",
    "participant": "p",
    "role": "agent",
    "seed": 0,
    "environment": {
        "name": "bench",
        "version": "1",
        "turn_order": "simultaneous",
        "roles": ["agent"],
    },
}


class Start:
    """Processes start (slowly, and differently per host) before the clock does: the
    benchmark measures decisions, not interpreter start-up."""

    def __init__(self, agents: int) -> None:
        self.waiting = agents
        self.all_ready = anyio.Event()
        self.go = anyio.Event()
        self.last_answer = 0.0

    def answered(self, started: float, latencies: list[float]) -> None:
        self.last_answer = time.perf_counter()
        latencies.append(self.last_answer - started)

    async def ready(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.all_ready.set()
        await self.go.wait()


Runner = Callable[[int, list[float], Start], Awaitable[None]]


async def raw_echo(round_trips: int, latencies: list[float], start: Start) -> None:
    process = await anyio.open_process(
        AGENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None
    assert process.stdout is not None
    buffer = b""

    async def line() -> bytes:
        nonlocal buffer
        assert process.stdout is not None
        while b"\n" not in buffer:
            buffer += await process.stdout.receive()
        text, buffer = buffer.split(b"\n", 1)
        return text

    async def answer() -> dict[str, Any]:
        while True:  # the agent may log between answers; a raw host skips those lines
            message: dict[str, Any] = json.loads(await line())
            if message["type"] != "log":
                return message

    async with process:
        await process.stdin.send((json.dumps(HELLO) + "\n").encode())
        assert (await answer())["type"] == "ready"
        await start.ready()
        for number in range(round_trips):
            act = {"type": "act", "id": str(number), "turn": number + 1, "observation": OBSERVATION}
            started = time.perf_counter()
            await process.stdin.send((json.dumps(act) + "\n").encode())
            reply = await answer()
            start.answered(started, latencies)
            assert reply["id"] == str(number)
        await process.stdin.send(b'{"type": "shutdown"}\n')
        await process.stdin.aclose()
        await process.wait()


async def command_agent(round_trips: int, latencies: list[float], start: Start) -> None:
    agent = CommandAgent(AGENT, implementation="echo@1")()
    context = AgentContext(
        session_id="bench",
        participant="p",
        role="agent",
        seed=0,
        turns=round_trips,
        environment=EnvironmentRef(
            name="bench", version="1", turn_order="simultaneous", roles=("agent",), input_type="-"
        ),
        log=lambda message, level, stream: None,
    )
    async with agent.lifespan(context):
        await start.ready()
        for _ in range(round_trips):
            started = time.perf_counter()
            await agent.act(OBSERVATION)
            start.answered(started, latencies)


async def measure(runner: Runner, agents: int, round_trips: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    start = Start(agents)
    async with anyio.create_task_group() as group:
        for _ in range(agents):
            group.start_soon(runner, round_trips, latencies, start)
        await start.all_ready.wait()
        started = time.perf_counter()
        start.go.set()
    # From the moment every agent was ready to the last answer: start-up and shutdown excluded.
    return agents * round_trips / (start.last_answer - started), latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(round_trips: int, concurrency: list[int]) -> None:
    print(f"{'agents':>6} {'raw rt/s':>10} {'CommandAgent rt/s':>18} {'ratio':>6}  latency p50/p99")
    for agents in [1, *concurrency]:
        trips = round_trips if agents == 1 else max(50, round_trips // agents * 4)
        raw_rate, raw_latency = await measure(raw_echo, agents, trips)
        ours_rate, ours_latency = await measure(command_agent, agents, trips)
        latency = ""
        if agents == 1:
            latency = (
                f"  raw {statistics.median(raw_latency) * 1e6:.0f}/"
                f"{percentile(raw_latency, 0.99) * 1e6:.0f} µs,"
                f" ours {statistics.median(ours_latency) * 1e6:.0f}/"
                f"{percentile(ours_latency, 0.99) * 1e6:.0f} µs"
            )
        print(
            f"{agents:>6} {raw_rate:>10,.0f} {ours_rate:>18,.0f} {ours_rate / raw_rate:>6.2f}"
            + latency
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[8, 64])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    options = parser.parse_args()
    anyio.run(main, options.round_trips, options.concurrency, backend=options.backend)
