"""The optimizer's economy: what a run spends per environment, and how K reruns share the machine.

**Economy** (the default): the mining engineer optimizes each environment — the two demos
(``support-desk``, ``coding-shell``) and ``cold-chain``, a small third-party-like environment
defined here that the engineer was never tuned to — with K candidates over up to ``--iterations``
iterations, each into a fresh store. Per environment it prints, from the run's own result:

- ``iters``: iterations run of those allowed, and why the run ended early (solved; or nothing
  new: the engineer offered only what was already judged on the same harness);
- ``proposed``: the engineer's candidates; ``behaviours``: the distinct per-scenario outcome
  vectors measured (the significance gate's divisor — textual variants that behave alike are
  one test);
- ``reruns``: rerun experiments spent (the baseline, candidates, gate checks); ``saved``: valid
  candidates judged without a rerun of their own (a duplicate patch, or one judged in an earlier
  iteration on the same harness — the patch cache), and their ratio to what was spent;
- wall seconds of the whole run, and the accepted gain (passed scenarios and mean reward,
  baseline -> final).

It checks what it claims: an iteration that found nothing new ran zero reruns.

**Capacity** (``--capacity 1 2``): one iteration of K distinct precondition patches on the
support desk (each with its own message, so the cache cannot merge them and all are rerun) at
each capacity (reruns at once); it prints the iteration's wall time, the sum of the reruns' own
times, parallel efficiency (= sum of rerun times / (wall x capacity)) and the speed-up over the
first capacity. The machine's cores bound what capacity can buy.

Run it from the repository root::

    .venv/bin/python tools/bench/optimizer.py                          # economy, K=8, 5 iterations
    .venv/bin/python tools/bench/optimizer.py --sandbox local
    .venv/bin/python tools/bench/optimizer.py --capacity 1 2 4         # capacity instead
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec

from envharness import AsyncEnvironmentHarness, EnvironmentSpec, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.demos.coding_shell import CodingShell, HastyShellPolicy, coding_tasks
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.hooks import HookView
from envharness.optimizer import (
    HarnessOptimizer,
    MiningEngineer,
    OptimizationConfig,
    OptimizationResult,
    ScriptedEngineer,
)
from envharness.records import OptimizerMeasured
from envharness.store import read_store

# -- a third-party-like environment ---------------------------------------------------------------


class Parcel(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    perishable: bool
    damaged: bool = False
    """Arrives broken whatever is done: a failure no harness can fix."""


class ColdChain:
    """A parcel goes out with ``ship``; a perishable one must be chilled first (``chill``), or
    it arrives spoiled; a damaged one always arrives broken (no patch can help there, so the
    engineer keeps proposing and the loop must stop paying for it). ``label`` is busywork.
    Written the way a user's environment would be: its own names, plain dict state and
    actions, predicates in :meth:`hook_view`."""

    spec = EnvironmentSpec(
        name="cold-chain", version="1", input_type=Parcel, invalid_actions="block"
    )

    def initialize(self, input: Parcel, rng: Random, roster: Mapping[str, str]) -> dict[str, Any]:
        return {"code": input.code, "perishable": input.perishable, "damaged": input.damaged,
                "chilled": False, "shipped": False, "done": []}  # fmt: skip

    def observe(self, state: dict[str, Any], participant: str) -> dict[str, Any]:
        return {"parcel": state["code"], "perishable": state["perishable"], "done": state["done"]}

    def resolve(self, state: dict[str, Any], actions: Mapping[str, Any]) -> Resolution:
        state = {**state, "done": list(state["done"])}
        for action in actions.values():
            op = action.get("op")
            state["done"].append(op)
            if op == "chill":
                state["chilled"] = True
            elif op == "ship":
                state["shipped"] = True
        return Resolution(state=state, done=state["shipped"])

    def intervene(self, state: dict[str, Any], intervention: Any) -> dict[str, Any]:
        raise ValueError("the cold chain takes no interventions")

    def score(self, state: dict[str, Any], scenario: Scenario[Any]) -> ScoreReport:
        fresh = (
            state["shipped"]
            and not state["damaged"]
            and (state["chilled"] or not state["perishable"])
        )
        return ScoreReport(metrics={"fresh": float(fresh)}, passed=fresh)

    def hook_view(self, state: dict[str, Any], participant: str) -> HookView:
        return HookView(
            state={"parcel": state["code"], "perishable": state["perishable"]},
            predicates={"chilled": state["chilled"], "shipped": state["shipped"]},
            admissible=[{"op": "chill"}, {"op": "label"}, {"op": "ship"}],
            task=f"send parcel {state['code']}",
        )


class ShipFirstPolicy:
    """Labels, ships, and would chill afterwards: every perishable parcel spoils. A step that
    was refused (asked again with nothing done) is skipped until something happens."""

    implementation = "ship-first@1"
    runs_inline = True

    def __init__(self) -> None:
        self._last: tuple[int, str] | None = None
        self._refused: set[str] = set()

    def act(self, observation: Any) -> dict[str, str]:
        done = list(observation["done"])
        if self._last is not None and self._last[0] == len(done):
            self._refused.add(self._last[1])
        else:
            self._refused.clear()
        plan = ["label", "ship", "chill"]
        choice = next((op for op in plan if op not in done and op not in self._refused), "ship")
        self._last = (len(done), choice)
        return {"op": choice}


def parcels(count: int = 12) -> list[Scenario[Parcel]]:
    """Two in three perishable; one in six damaged."""
    return [
        Scenario(
            id=f"parcel-{i + 1}",
            input=Parcel(code=f"P{100 + i}", perishable=i % 3 != 2, damaged=i % 6 == 5),
        )
        for i in range(count)
    ]


# -- economy --------------------------------------------------------------------------------------

Setup = tuple[Any, Mapping[str, Any], Callable[[], list[Scenario[Any]]]]

ENVIRONMENTS: dict[str, Setup] = {
    "support-desk": (SupportDesk, {"alice": RefundFirstPolicy}, lambda: tickets(8)),
    "coding-shell": (CodingShell, {"dev": HastyShellPolicy}, coding_tasks),
    "cold-chain": (ColdChain, {"courier": ShipFirstPolicy}, parcels),
}


def economy_row(name: str, result: OptimizationResult, wall: float, allowed: int) -> dict[str, Any]:
    """One environment's figures, read from its run's result."""
    iterations = result.iterations
    for iteration in iterations:
        if iteration.reason.startswith("found no new candidates"):
            assert iteration.reruns == 0, f"{name}: a repeated iteration ran {iteration.reruns}"
    ended = ""
    if result.reason:
        ended = "nothing new"
    elif len(iterations) < allowed:
        ended = "solved"
    spent = 1 + sum(i.reruns for i in iterations)  # the baseline, then each iteration's
    saved = sum(i.reused for i in iterations)
    return {
        "environment": name,
        "iterations": f"{len(iterations)}/{allowed}" + (f" ({ended})" if ended else ""),
        "proposed": sum(len(i.verdicts) for i in iterations),
        "behaviours": sum(i.behaviours for i in iterations),
        "reruns": spent,
        "saved": saved,
        "wall": wall,
        "passed": f"{result.baseline.passed}->{result.final.passed}/{result.final.total}",
        "gain": result.final.mean_reward - result.baseline.mean_reward,
        "versions": len(result.versions),
    }


async def economy_one(
    directory: Path, name: str, candidates: int, iterations: int, sandbox: str
) -> dict[str, Any]:
    environment, agents, scenarios = ENVIRONMENTS[name]
    harness = AsyncEnvironmentHarness(
        directory / name, environment=environment, agents=dict(agents), max_concurrency=4
    )
    config = OptimizationConfig(
        candidates=candidates,
        iterations=iterations,
        turns=12,
        sandbox="local" if sandbox == "local" else "subprocess",
    )
    optimizer = HarnessOptimizer(harness, MiningEngineer(), config=config)
    started = time.perf_counter()
    result = await optimizer.optimize_async(scenarios())
    return economy_row(name, result, time.perf_counter() - started, iterations)


def print_economy(rows: list[dict[str, Any]], options: argparse.Namespace) -> None:
    print(
        f"economy: mining engineer, K={options.candidates}, up to {options.iterations} "
        f"iterations, {options.sandbox} sandbox, {options.backend}"
    )
    print(
        f"{'environment':<13} {'iters':<17} {'proposed':>8} {'behaviours':>10} {'reruns':>6} "
        f"{'saved':>5} {'saved/spent':>11} {'wall s':>7} {'passed':>9} {'gain':>7}"
    )
    for row in rows:
        print(
            f"{row['environment']:<13} {row['iterations']:<17} {row['proposed']:>8} "
            f"{row['behaviours']:>10} {row['reruns']:>6} {row['saved']:>5} "
            f"{row['saved'] / row['reruns']:>11.2f} {row['wall']:>7.2f} {row['passed']:>9} "
            f"{row['gain']:>+7.3f}"
        )


# -- capacity -------------------------------------------------------------------------------------


def distinct_answers(count: int) -> list[str]:
    """``count`` distinct candidates (same rule, different messages: different digests)."""
    found = []
    for number in range(count):
        code = (
            "def on_before_action(ctx, nb):\n"
            '    if ctx.action.get("tool") == "issue_refund" and not '
            'ctx.predicates.get("order_looked_up"):\n'
            f'        return block_and_prompt("look the order up first ({number})")\n'
            "    return None\n"
        )
        patch = [{"op": "add_code_hook", "hook": "on_before_action", "code": code}]
        found.append(f"<think>variant {number}</think><patch>{json.dumps(patch)}</patch>")
    return found


async def candidate_reruns(store: Path, run_id: str) -> list[float]:
    """Seconds each candidate's rerun took, as the run recorded them (its evidence, not a
    clock of the bench's own)."""
    reader = await read_store(store)
    return [
        record.payload.seconds
        async for record in reader.records(run_id)
        if isinstance(record.payload, OptimizerMeasured) and record.payload.role == "candidate"
    ]


async def capacity_one(
    directory: Path, capacity: int, candidates: int, scenarios: int, sandbox: str
) -> dict[str, Any]:
    store = directory / f"capacity-{capacity}"
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}, max_concurrency=4
    )
    config = OptimizationConfig(
        candidates=candidates,
        iterations=1,
        turns=8,
        capacity=capacity,
        sandbox="local" if sandbox == "local" else "subprocess",
    )
    engineer = ScriptedEngineer(distinct_answers(candidates))
    result = await HarnessOptimizer(harness, engineer, config=config).optimize_async(
        tickets(scenarios)
    )
    reruns = await candidate_reruns(store, result.run_id)
    assert len(reruns) == candidates, f"expected {candidates} reruns, measured {len(reruns)}"
    assert result.accepted_version == "harness-v1"
    wall = result.iterations[0].seconds
    return {
        "capacity": capacity,
        "wall": wall,
        "reruns": sum(reruns),
        "efficiency": sum(reruns) / (wall * capacity),
    }


def print_capacity(rows: list[dict[str, Any]], options: argparse.Namespace) -> None:
    print(
        f"one iteration: K={options.candidates} candidates x {options.scenarios} scenarios, "
        f"{options.sandbox} sandbox, {options.backend}"
    )
    print(f"{'capacity':>8} {'wall s':>8} {'reruns s':>9} {'efficiency':>10} {'speed-up':>8}")
    first = rows[0]["wall"]
    for row in rows:
        print(
            f"{row['capacity']:>8} {row['wall']:>8.2f} {row['reruns']:>9.2f} "
            f"{row['efficiency']:>10.2f} {first / row['wall']:>7.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--environments", nargs="+", choices=sorted(ENVIRONMENTS),
                        default=list(ENVIRONMENTS))  # fmt: skip
    parser.add_argument("--capacity", type=int, nargs="+", default=None,
                        help="measure capacity instead (a desk iteration each)")  # fmt: skip
    parser.add_argument("--scenarios", type=int, default=32, help="support tickets (capacity)")
    parser.add_argument("--sandbox", choices=("subprocess", "local"), default="subprocess")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--directory", type=Path, default=None)
    options = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-optimizer-", dir=options.directory))
    try:
        if options.capacity:
            rows = [
                anyio.run(capacity_one, directory, capacity, options.candidates,
                          options.scenarios, options.sandbox, backend=options.backend)
                for capacity in options.capacity
            ]  # fmt: skip
            print_capacity(rows, options)
            return
        rows = [
            anyio.run(economy_one, directory, name, options.candidates, options.iterations,
                      options.sandbox, backend=options.backend)
            for name in options.environments
        ]  # fmt: skip
        print_economy(rows, options)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
