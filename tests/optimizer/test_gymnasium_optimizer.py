"""The optimizer on an adapted environment: Gymnasium's Taxi, run through ``GymnasiumEnvironment``
with no environment code of our own, a flawed frozen driver written here, and the offline mining
engineer (no model, no network).

The driver is correct but for one systematic flaw: it mistakes stand Y for stand R when it reads
where the passenger waits. With the passenger at Y it drives to R and presses pickup there again
and again (Taxi charges -10 for each) until the time limit cuts the episode. Nobody tells the
engineer: it sees in the recorded steps that every failed session pressed pickup while the
adapter's ``action_4_allowed`` predicate was false, and that no passing session ever did.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.adapters.gymnasium import GymnasiumEnvironment
from envharness.optimizer import (
    ExecutableHarness,
    FailurePacket,
    HarnessOptimizer,
    LocalSandbox,
    MiningEngineer,
    OptimizationConfig,
    OptimizationResult,
    Proposal,
    ScriptedEngineer,
    paired_comparison,
)
from envharness.optimizer.engineers.actions import discriminating_field
from envharness.records import ActionBlocked, OptimizerMeasured
from tests.optimizer._loops import answer, chain

# -- the driver: Taxi's map as it knows it ---------------------------------------------------------

MAP = (
    "+---------+",
    "|R: | : :G|",
    "| : | : : |",
    "| : : : : |",
    "| | : | : |",
    "|Y| : |B: |",
    "+---------+",
)
STANDS = ((0, 0), (0, 4), (4, 0), (4, 3))
"""R, G, Y, B: where passengers wait and want to go (Taxi's own order)."""
R, G, Y, B = range(4)
IN_TAXI = 4
SOUTH, NORTH, EAST, WEST, PICKUP, DROPOFF = range(6)
MISREAD = {Y: R}
"""The flaw: the driver reads a passenger waiting at Y as waiting at R."""

Cell = tuple[int, int]


def decode(observation: int) -> tuple[int, int, int, int]:
    """Taxi's observation: taxi row and column, passenger (a stand, or in the taxi), destination."""
    rest, destination = divmod(observation, 4)
    rest, passenger = divmod(rest, 5)
    row, column = divmod(rest, 5)
    return row, column, passenger, destination


def neighbours(cell: Cell) -> Iterator[tuple[int, Cell]]:
    row, column = cell
    if row < 4:
        yield SOUTH, (row + 1, column)
    if row > 0:
        yield NORTH, (row - 1, column)
    if column < 4 and MAP[row + 1][2 * column + 2] == ":":
        yield EAST, (row, column + 1)
    if column > 0 and MAP[row + 1][2 * column] == ":":
        yield WEST, (row, column - 1)


def route(start: Cell, goal: Cell) -> tuple[int, int]:
    """The length of the shortest way from ``start`` to ``goal``, and its first move."""
    distance: dict[Cell, int] = {start: 0}
    first: dict[Cell, int] = {}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for move, nxt in neighbours(cell):
            if nxt not in distance:
                distance[nxt] = distance[cell] + 1
                first[nxt] = first.get(cell, move)
                queue.append(nxt)
    return distance[goal], first.get(goal, PICKUP)


class MisreadingDriver:
    """A frozen Taxi driver: the shortest way to the passenger, pickup, the shortest way to the
    destination, dropoff — except that it looks for a passenger waiting at Y at R.

    It does not read the reward, the action mask or any message. What it reacts to is being
    told something (any hint) while it stands at the stand it was heading for: it concludes that
    the passenger is not there and heads for the nearest stand it has not ruled out. A
    ``block_and_prompt`` veto of its pickup is such a moment (the runtime asks it again with the
    veto's message as a hint); without hooks nothing ever is.
    """

    implementation = "misreading-driver@1"
    runs_inline = True

    def __init__(self) -> None:
        self._ruled_out: set[int] = set()

    def act(self, observation: Any) -> dict[str, Any]:
        row, column, passenger, destination = decode(observation["observation"])
        here = (row, column)
        if passenger == IN_TAXI:
            if here == STANDS[destination]:
                return {"action": DROPOFF}
            return {"action": route(here, STANDS[destination])[1]}
        target = self._target(here, passenger)
        if here == STANDS[target] and observation.get("hints"):
            self._ruled_out.add(target)
            target = self._target(here, passenger)
        if here == STANDS[target]:
            return {"action": PICKUP}
        return {"action": route(here, STANDS[target])[1]}

    def _target(self, here: Cell, passenger: int) -> int:
        believed = MISREAD.get(passenger, passenger)
        if believed not in self._ruled_out:
            return believed
        left = [stand for stand in range(4) if stand not in self._ruled_out]
        if not left:  # everything was ruled out: start over
            self._ruled_out.clear()
            return believed
        return min(left, key=lambda stand: (route(here, STANDS[stand])[0], stand))


# -- scenarios: seeds chosen by where the passenger waits ------------------------------------------


def seeds_with_passenger_at(stand: int, count: int, *, skip: int = 0) -> list[int]:
    """Reset seeds whose passenger waits at ``stand``, the taxi elsewhere (Gymnasium's own RNG
    decides, so the seeds are found rather than written down)."""
    env = gym.make("Taxi-v4")
    found: list[int] = []
    seed = 0
    while len(found) < skip + count:
        observation, _ = env.reset(seed=seed)
        row, column, passenger, _ = decode(int(observation))
        if passenger == stand and (row, column) != STANDS[stand]:
            found.append(seed)
        seed += 1
    env.close()
    return found[skip:]


def scenarios(prefix: str, seeds: list[int]) -> list[Scenario[Any]]:
    return [Scenario(id=f"{prefix}-{seed}", input={"seed": seed}) for seed in seeds]


EPISODE_STEPS = 40
"""Taxi's time limit: a driver stuck pressing pickup is cut here."""


class Watched:
    """The mining engineer, keeping every packet it was shown."""

    def __init__(self) -> None:
        self.inner = MiningEngineer()
        self.packets: list[FailurePacket] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def version(self) -> str:
        return self.inner.version

    async def propose(self, packet: FailurePacket, count: int, *, seed: int) -> list[Proposal]:
        self.packets.append(packet)
        return await self.inner.propose(packet, count, seed=seed)


@dataclass(frozen=True)
class Run:
    store: Path
    result: OptimizationResult
    packet: FailurePacket
    misread: list[str]
    """Training scenarios whose passenger waits at Y (the flaw's)."""
    fine: list[str]
    held_out: list[Scenario[Any]]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One optimizer run, shared: 7 training scenarios with the passenger at Y, one at each other
    stand, and a held-out split of 3 + 1 the engineer never sees."""
    misread = scenarios("y", seeds_with_passenger_at(Y, 7))
    fine = [
        *scenarios("r", seeds_with_passenger_at(R, 1)),
        *scenarios("g", seeds_with_passenger_at(G, 1)),
        *scenarios("b", seeds_with_passenger_at(B, 1)),
    ]
    held_out = scenarios("held-y", seeds_with_passenger_at(Y, 3, skip=20)) + scenarios(
        "held-r", seeds_with_passenger_at(R, 1, skip=20)
    )
    store = tmp_path_factory.mktemp("gymnasium-optimizer") / "store"
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=EPISODE_STEPS)
    harness = EnvironmentHarness(store, environment=taxi, agents={"driver": MisreadingDriver})
    engineer = Watched()
    config = OptimizationConfig(
        metric="return",  # the adapter's score: Gymnasium says nothing about passing
        candidates=4,
        iterations=1,
        turns=EPISODE_STEPS + 10,
        sandbox="local",
    )
    result = HarnessOptimizer(harness, engineer, config=config).optimize(
        misread + fine, held_out=held_out
    )
    [packet] = engineer.packets
    return Run(
        store=store,
        result=result,
        packet=packet,
        misread=[s.id for s in misread],
        fine=[s.id for s in fine],
        held_out=held_out,
    )


# -- what the optimizer found ----------------------------------------------------------------------


def test_the_optimizer_accepts_a_hook_that_reads_the_adapters_action_mask(run: Run) -> None:
    result = run.result
    assert (result.status, result.accepted_version) == ("completed", "harness-v1")
    assert result.environment.startswith("gymnasium:Taxi-v4@adapter 1; gymnasium ")
    [version] = result.versions
    assert sorted(version.improved) == sorted(run.misread)
    assert version.p_value is not None
    assert version.p_value <= 0.05 / 4, "through the gate, corrected for 4 candidates"
    [hook] = version.patch["ops"]
    assert hook["hook"] == "on_before_action"
    code = hook["code"]
    assert "action.get('action') == 4" in code  # the pickup...
    assert "ctx.predicates.get('action_4_allowed') is False" in code  # ...where the mask forbids
    assert "block_and_prompt(" in code


def test_the_patch_rescues_every_misread_passenger_and_changes_no_other_ride(run: Run) -> None:
    baseline, final = run.result.baseline.values, run.result.final.values
    for scenario in run.misread:
        before, after = baseline[scenario], final[scenario]
        assert before is not None
        assert after is not None
        assert before < -10 * (EPISODE_STEPS // 2), "cut by the time limit, pressing pickup"
        assert after > 0, "delivered: +20 for the dropoff, -1 a move"
    for scenario in run.fine:
        assert (baseline[scenario] or 0.0) > 0
        assert final[scenario] == baseline[scenario]
    assert (run.result.baseline.passed, run.result.final.passed) == (3, 10)
    assert run.result.final.hooks == {"on_before_action:block_and_prompt": len(run.misread)}


def test_the_accepted_patch_helps_on_the_held_out_split(run: Run) -> None:
    held = run.result.held_out
    assert held is not None
    recorded = chain(run.store, run.result.run_id)
    [baseline] = [p for p in recorded if isinstance(p, OptimizerMeasured) and p.role == "baseline"]
    before = {s.id: baseline.values[s.id] for s in run.held_out}
    after = held.values
    for scenario in before:
        if scenario.startswith("held-y"):  # the flaw's: rescued
            assert (after[scenario] or 0.0) > (before[scenario] or 0.0) + 100
        else:
            assert after[scenario] == before[scenario]
    assert held.mean_reward > sum(v or 0.0 for v in before.values()) / len(before)


def test_the_accepted_patch_runs_in_production_on_a_new_ride(run: Run, tmp_path: Path) -> None:
    [version] = run.result.versions
    hooks = ExecutableHarness.from_patch(version.harness_patch(), sandbox=LocalSandbox())
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=EPISODE_STEPS)
    harness = EnvironmentHarness(
        tmp_path / "live", environment=taxi, agents={"driver": MisreadingDriver}
    )
    [ride] = scenarios("live", seeds_with_passenger_at(Y, 1, skip=40))
    session = harness.run(ride, turns=EPISODE_STEPS, hooks=hooks)
    assert session.status == "completed"
    assert harness.trajectory(session).termination.cause == "done"
    blocked = [
        r.payload for r in harness.records(session.id) if isinstance(r.payload, ActionBlocked)
    ]
    assert [(b.action, b.by) for b in blocked] == [({"action": PICKUP}, "hook")]


# -- what the engineer was shown -------------------------------------------------------------------


def test_the_packet_shows_the_adapters_predicates_state_and_admissible_actions(run: Run) -> None:
    packet = run.packet
    assert packet.environment.startswith("gymnasium:Taxi-v4@")
    assert packet.predicate_keys == tuple(
        sorted([*(f"action_{i}_allowed" for i in range(6)), "terminated", "truncated"])
    )
    assert packet.state_keys == ("action_mask", "return", "steps")
    assert {"action": PICKUP} in packet.action_examples
    failing = [cluster.example for cluster in packet.clusters]
    assert sum(len(cluster.sessions) for cluster in packet.clusters) == len(run.misread)
    for example in failing:
        pickups = [step for step in example.steps if step.action == {"action": PICKUP}]
        assert pickups, example.scenario_id
        assert all(step.predicates["action_4_allowed"] is False for step in pickups)
        assert all(step.state["action_mask"][PICKUP] == 0 for step in pickups)
        assert example.steps[0].admissible == [{"action": i} for i in range(6)]


def test_sessions_that_reached_the_solved_return_are_the_packets_contrasts(run: Run) -> None:
    """Gymnasium's score has no verdict; with a metric, a session whose metric reached
    ``solved`` is a passing contrast — without them every rule would look as good as any."""
    packet = run.packet
    assert sorted(example.scenario_id for example in packet.passing) == sorted(run.fine)
    for example in packet.passing:
        [pickup] = [step for step in example.steps if step.action == {"action": PICKUP}]
        assert pickup.predicates["action_4_allowed"] is True


def test_discrete_actions_are_named_by_their_integer_field() -> None:
    assert discriminating_field([{"action": 4}, {"action": 0}, {"action": 4}]) == "action"
    assert discriminating_field([{"tool": "move", "cell": 3}, {"tool": "move", "cell": 5}]) == (
        "tool"
    ), "a string field still names actions that have one"
    assert discriminating_field([{"flag": True}, {"flag": False}]) is None


# -- a crash is no gain, even against a negative return --------------------------------------------

CRASHES_LATE = answer(
    """
    nb["calls"] = nb.get("calls", 0) + 1
    if nb["calls"] > 20:
        return [None][nb["calls"]]
    return None
    """
)
"""A patch whose code fails in every long session, after the smoke test has seen it behave."""


def test_a_patch_whose_code_fails_gains_nothing_over_a_negative_return(tmp_path: Path) -> None:
    taxi = GymnasiumEnvironment("Taxi-v4", max_episode_steps=EPISODE_STEPS)
    harness = EnvironmentHarness(
        tmp_path / "store", environment=taxi, agents={"driver": MisreadingDriver}
    )
    config = OptimizationConfig(
        metric="return", candidates=1, iterations=1, turns=EPISODE_STEPS + 10, sandbox="local"
    )
    rides = scenarios("y", seeds_with_passenger_at(Y, 5))
    result = HarnessOptimizer(harness, ScriptedEngineer([CRASHES_LATE]), config=config).optimize(
        rides
    )
    assert all((value or 0.0) < -100 for value in result.baseline.values.values())
    [verdict] = result.iterations[0].verdicts
    assert verdict.status == "rejected"
    assert verdict.reason.startswith(
        "no improvement (mean reward +0.000); the patch's hooks failed"
    )
    assert result.accepted_version is None


def test_the_paired_comparison_gives_a_failed_scenario_no_gain() -> None:
    compared = paired_comparison(
        {"a": 0.0, "b": 0.0, "c": 3.0},
        {"a": -50.0, "b": 1.0, "c": -2.0},
        seed=0,
        key="k",
        confidence=0.95,
        resamples=100,
        failed={"a", "b"},
    )
    assert compared.differences == {"a": 0.0, "b": -1.0, "c": 5.0}
    assert (compared.improved, compared.worsened, compared.ties) == (("c",), ("b",), 1)
