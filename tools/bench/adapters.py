"""What the Gymnasium adapter costs: per step against ``env.step`` alone, and per branch by replay.

Part one is per-step overhead. One Taxi-v4 episode of ``--steps`` steps is played by a
scripted driver that only moves (it never drops the passenger off, so every episode lasts
exactly as long as asked). It is played four ways in the same run:

- raw: ``gymnasium.make("Taxi-v4")``, ``reset(seed)``, then per step the agent's choice from
  the observation and ``env.step``; nothing else. Best of three;
- adapter: the same calls through :class:`GymnasiumEnvironment`, with no harness. Per step:
  ``observe``, the agent, ``check_action``, ``resolve``, and the state's canonical encoding
  and digest, which the runtime does after every step. The replay checks and the growing
  seed-and-moves state are included. Best of three;
- harness: ``EnvironmentHarness.run`` of the same episode, everything recorded (sealed records,
  state blobs, durable commits), once with the ansi text view (the default for Taxi) and once
  without (``render_mode=None``);
- for scale, the harness running as many turns of the trivial synthetic environment
  (``envharness.fixtures``), whose own step costs nothing: what the runtime costs a turn.

Part two is branching from turn ``--branch-at`` (1,000 by default). A session of that many turns
is checkpointed at its end. Then ``branch(checkpoint, intervention={})`` and
``continue_(branch, turns=1)`` are timed, which rebuild a fresh Taxi by replaying every step,
and compared with the same two calls from a checkpoint at turn 10. Beside them: the replay
alone (a fresh adapter's replayer rebuilding the turn-N state) and a raw reset + N
``env.step`` calls. The state's size at turn N is printed too, and the bytes of every turn's
state together (the runtime stores each one: O(N^2), see ``envharness.adapters.replay``).

Run it from the repository root::

    .venv/bin/python tools/bench/adapters.py                     # 1,000 steps, branch at 1,000
    .venv/bin/python tools/bench/adapters.py --steps 300 --branch-at 300   # quicker

Stores are written in a temporary directory (``--directory`` to choose the disk) and removed
afterwards. The ratios are the interesting numbers. Taxi's step is a table lookup of a few
microseconds, so they show what the adapter and the runtime add to a step, not what a heavier
environment costs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from random import Random
from typing import Any

import gymnasium as gym

from envharness import EnvironmentHarness, Scenario
from envharness.adapters.gymnasium import GymnasiumEnvironment, GymnasiumInput
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.records import canonical

SEED = 7


class Wanderer:
    """Moves by the observation alone (south, north, east, west); never picks up or drops off."""

    implementation = "wanderer@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, int]:
        return {"action": choose(observation["observation"])}


def choose(observation: int) -> int:
    return (observation * 7 + 3) % 4


def best_of(times: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(times))


def raw_loop(steps: int) -> float:
    env = gym.make("Taxi-v4", max_episode_steps=steps + 1)
    started = time.perf_counter()
    observation, _ = env.reset(seed=SEED)
    for _ in range(steps):
        observation, _, terminated, truncated, _ = env.step(choose(int(observation)))
        assert not terminated
        assert not truncated
    return time.perf_counter() - started


def adapter_loop(steps: int) -> float:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=steps + 1, render_mode=None)()
    action_type = taxi.spec.action_type
    assert action_type is not None
    agent = Wanderer()
    started = time.perf_counter()
    state = taxi.initialize(GymnasiumInput(seed=SEED), Random(0), {"driver": "agent"})
    for _ in range(steps):
        action = action_type(**agent.act(taxi.observe(state, "driver")))
        assert taxi.check_action(state, "driver", action) is None
        state = taxi.resolve(state, {"driver": action}).state
        canonical(state)  # the runtime encodes and digests every turn's state
    return time.perf_counter() - started


def harness_run(store: Path, steps: int, *, text: bool) -> float:
    kwargs: dict[str, Any] = {} if text else {"render_mode": None}
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=steps + 1, **kwargs)
    harness = EnvironmentHarness(store, environment=taxi, agents={"driver": Wanderer})
    started = time.perf_counter()
    session = harness.run(Scenario(id="bench", input={"seed": SEED}), turns=steps)
    elapsed = time.perf_counter() - started
    assert (session.status, session.turns_completed) == ("completed", steps), session
    return elapsed


class Stepper:
    implementation = "stepper@1"
    runs_inline = True

    def act(self, observation: Any) -> dict[str, int]:
        return {"value": 1 if observation.total <= 0 else -1}


def synthetic_run(store: Path, steps: int) -> float:
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"driver": Stepper}
    )
    scenario = Scenario(id="bench", input=SyntheticScenarioInput(starting_total=0))
    started = time.perf_counter()
    session = harness.run(scenario, turns=steps)
    elapsed = time.perf_counter() - started
    assert session.turns_completed == steps, session
    return elapsed


def per_step(base: Path, steps: int) -> None:
    print(f"per step: one Taxi-v4 episode of {steps} steps (best of 3 where marked)")
    raw = best_of(3, lambda: raw_loop(steps))
    adapter = best_of(3, lambda: adapter_loop(steps))
    with_text = harness_run(base / "text", steps, text=True)
    without_text = harness_run(base / "plain", steps, text=False)
    synthetic = synthetic_run(base / "synthetic", steps)
    rows = [
        ("raw env.step loop (best of 3)", raw),
        ("adapter, no harness (best of 3)", adapter),
        ("harness, no text view", without_text),
        ("harness, ansi text view", with_text),
        ("for scale: harness, synthetic env", synthetic),
    ]
    for label, seconds in rows:
        micros = seconds / steps * 1e6
        print(f"  {label:<34} {micros:>10,.1f} µs/step {seconds / raw:>9.1f}x raw")


def branch_cost(base: Path, at: int) -> None:
    print(f"branching from turn {at} by replay (a fresh Taxi replays every step)")
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=at + 100, render_mode=None)
    harness = EnvironmentHarness(base / "branch", environment=taxi, agents={"driver": Wanderer})
    timings = {}
    for turns in (10, at):
        session = harness.run(Scenario(id=f"at-{turns}", input={"seed": SEED}), turns=turns)
        checkpoint = harness.checkpoint(session)
        started = time.perf_counter()
        child = harness.branch(checkpoint, intervention={})
        branched = time.perf_counter()
        child = harness.continue_(child, turns=1)
        timings[turns] = (branched - started, time.perf_counter() - branched)
        assert (child.status, child.turns_completed) == ("completed", turns + 1), child
    for turns, (branching, continuing) in timings.items():
        print(
            f"  from turn {turns:>5}: branch() {branching * 1e3:>8.1f} ms, "
            f"continue_(turns=1) {continuing * 1e3:>8.1f} ms"
        )
    extra = timings[at][1] - timings[10][1]
    print(
        f"  continue_ from turn {at} takes {extra * 1e3:,.1f} ms more than from turn 10: the "
        "replay (alone, below) and reading a longer chain to resume from"
    )

    live = taxi()
    state = live.initialize(GymnasiumInput(seed=SEED), Random(0), {"driver": "agent"})
    action_type = taxi.spec.action_type
    assert action_type is not None
    sizes = []
    for _ in range(at):
        action = action_type(**Wanderer().act(live.observe(state, "driver")))
        state = live.resolve(state, {"driver": action}).state
        sizes.append(len(canonical(state)))

    def rebuild() -> float:
        fresh = taxi()
        started = time.perf_counter()
        fresh.replayer.live(state.replay)
        elapsed = time.perf_counter() - started
        assert fresh.replayer.replayed == at
        return elapsed

    replay = best_of(3, rebuild)
    raw = best_of(3, lambda: raw_loop(at))
    print(
        f"  the replay alone: {replay * 1e3:,.1f} ms ({replay / at * 1e6:,.1f} µs/step); "
        f"raw reset + {at} env.step: {raw * 1e3:,.1f} ms; ratio {replay / raw:.1f}x"
    )
    print(
        f"  state at turn {at}: {sizes[-1]:,} bytes; all {at} turns' states together: "
        f"{sum(sizes) / 1e6:,.1f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per episode (1000)")
    parser.add_argument("--branch-at", type=int, default=1000, help="turn to branch at (1000)")
    parser.add_argument("--directory", type=Path, default=None, help="where stores go")
    options = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="envharness-bench-", dir=options.directory))
    try:
        per_step(base, options.steps)
        branch_cost(base, options.branch_at)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
