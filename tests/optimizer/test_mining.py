"""The mining engineer, on environments it has never seen (written here, nowhere else).

Nothing in ``envharness.optimizer.engineers.mining`` (nor in its ``grammar``) may know the demo
environments; these toys use other words, other predicates and other failure shapes, and the
engineer must still find the hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec
import pytest

import envharness.optimizer.engineers.grammar as grammar_module
import envharness.optimizer.engineers.mining as mining_module
from envharness import EnvironmentHarness, EnvironmentSpec, HookView, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.optimizer import (
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    HarnessOptimizer,
    MiningEngineer,
    OptimizationConfig,
    parse_answer,
)
from envharness.optimizer.engineers.evidence import experiment_traces
from envharness.optimizer.engineers.grammar import Atom, failed, grammar_atoms, packet_steps
from envharness.optimizer.engineers.mining import mine_rules
from envharness.optimizer.engineers.packets import build_packet
from envharness.optimizer.patches.policy import check_patch
from envharness.store import read_store

# -- a greenhouse: water only after the soil was tested ----------------------------------------


class Bed(msgspec.Struct, frozen=True):
    plant: str


class GreenhouseState(msgspec.Struct, frozen=True):
    plant: str
    soil_tested: bool = False
    watered: bool = False
    watered_blind: bool = False
    harvested: bool = False
    log: tuple[str, ...] = ()


class Greenhouse:
    spec = EnvironmentSpec(
        name="greenhouse", version="3", input_type=Bed, state_type=GreenhouseState
    )

    def initialize(self, input: Bed, rng: Random, roster: Mapping[str, str]) -> GreenhouseState:
        return GreenhouseState(plant=input.plant)

    def observe(self, state: GreenhouseState, participant: str) -> dict[str, Any]:
        return {"plant": state.plant, "log": list(state.log)}

    def resolve(self, state: GreenhouseState, actions: Mapping[str, Any]) -> Resolution:
        for action in actions.values():
            op = action.get("op")
            log = (*state.log, op)
            if op == "test_soil":
                state = msgspec.structs.replace(state, soil_tested=True, log=log)
            elif op == "water":
                blind = state.watered_blind or not state.soil_tested
                state = msgspec.structs.replace(state, watered=True, watered_blind=blind, log=log)
            elif op == "harvest":
                state = msgspec.structs.replace(state, harvested=True, log=log)
        return Resolution(state=state, outcomes={p: {"ok": True} for p in actions},
                          done=state.harvested)  # fmt: skip

    def intervene(self, state: Any, intervention: Any) -> Any:
        return state

    def score(self, state: GreenhouseState, scenario: Any) -> ScoreReport:
        return ScoreReport(
            metrics={}, passed=state.harvested and state.watered and not state.watered_blind
        )

    def hook_view(self, state: GreenhouseState, participant: str) -> HookView:
        return HookView(
            predicates={
                "soil_tested": state.soil_tested,
                "watered": state.watered,
                "harvested": state.harvested,
            },
            state={"plant": state.plant, "steps": len(state.log)},
        )


class Sequence:
    """Tries its steps in order; a step it is asked about again without progress is skipped."""

    steps: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._index = 0
        self._seen: int | None = None

    def next(self, progress: int) -> str:
        # Every ask after the first moves on: the last step either happened, or was vetoed (asked
        # again and nothing moved) and is skipped.
        if self._seen is not None:
            self._index += 1
        self._seen = progress
        return self.steps[min(self._index, len(self.steps) - 1)]


class EagerGardener(Sequence):
    implementation = "eager-gardener@1"
    steps = ("water", "test_soil", "water", "harvest")

    def act(self, observation: Any) -> dict[str, str]:
        return {"op": self.next(len(observation["log"]))}


def beds(count: int) -> list[Scenario[Bed]]:
    return [Scenario(id=f"bed-{i}", input=Bed(plant=f"plant-{i}")) for i in range(count)]


def greenhouse_packet(store: Path) -> FailurePacket:
    async def build() -> FailurePacket:
        from envharness import AsyncEnvironmentHarness

        harness = AsyncEnvironmentHarness(
            store, environment=Greenhouse, agents={"g": EagerGardener}
        )
        result = await harness.experiment("base", beds(3), turns=6).run()
        reader = await read_store(store)
        return await build_packet(reader, await experiment_traces(reader, result.id), Greenhouse())

    return anyio.run(build)


def test_the_first_proposal_on_an_unseen_environment_is_the_precondition(tmp_path: Path) -> None:
    packet = greenhouse_packet(tmp_path / "store")
    proposals = MiningEngineer().answers(packet, 6)
    assert len(proposals) == 6
    assert len({p.text for p in proposals}) == 6, "distinct candidates"
    first = parse_answer(proposals[0].text)
    code = first.patch.hooks[0].code
    assert first.patch.hooks[0].hook == "on_before_action"
    assert "action.get('op') == 'water'" in code
    assert "ctx.predicates.get('soil_tested') is False" in code
    assert "block_and_prompt" in code
    assert "Seed: ordering" in first.think
    assert "3 failed session(s)" in first.think


def test_the_optimizer_with_mining_fixes_the_unseen_environment(tmp_path: Path) -> None:
    harness = EnvironmentHarness(
        tmp_path / "store", environment=Greenhouse, agents={"g": EagerGardener}
    )
    config = OptimizationConfig(turns=6, sandbox="local", candidates=6)
    # Eight beds: the gate is alpha / distinct candidates, and 2**-8 <= 0.05/6.
    result = HarnessOptimizer(harness, MiningEngineer(), config=config).optimize(beds(8))
    assert (result.baseline.passed, result.final.passed) == (0, 8)
    assert result.accepted_version == "harness-v1"


# -- a door: pushing again after it failed does not help; pulling does ---------------------------


class Door(msgspec.Struct, frozen=True):
    stubborn: bool


class DoorState(msgspec.Struct, frozen=True):
    open: bool = False
    attempts: int = 0
    left: bool = False


class Doorway:
    spec = EnvironmentSpec(name="doorway", version="1", input_type=Door, state_type=DoorState)

    def initialize(self, input: Door, rng: Random, roster: Mapping[str, str]) -> DoorState:
        return DoorState()

    def observe(self, state: DoorState, participant: str) -> dict[str, Any]:
        return {"attempts": state.attempts, "open": state.open}

    def resolve(self, state: DoorState, actions: Mapping[str, Any]) -> Resolution:
        outcomes = {}
        for participant, action in actions.items():
            do = action.get("do")
            if do == "leave":
                state = msgspec.structs.replace(state, left=True)
                outcomes[participant] = {"ok": True}
                continue
            attempts = state.attempts + 1
            if do == "pull":
                state = msgspec.structs.replace(state, open=True, attempts=attempts)
                outcomes[participant] = {"ok": True}
            else:
                state = msgspec.structs.replace(state, attempts=attempts)
                outcomes[participant] = {"ok": False, "error": "the door does not move"}
        return Resolution(state=state, outcomes=outcomes, done=state.left)

    def intervene(self, state: Any, intervention: Any) -> Any:
        return state

    def score(self, state: DoorState, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={}, passed=state.open and state.attempts <= 2)

    def hook_view(self, state: DoorState, participant: str) -> HookView:
        return HookView(predicates={"open": state.open}, state={"attempts": state.attempts})


class Visitor(Sequence):
    implementation = "visitor@1"

    def act(self, observation: Any) -> dict[str, str]:
        return {"do": self.next(observation["attempts"] + int(observation["open"]))}


class StubbornVisitor(Visitor):
    implementation = "stubborn-visitor@1"
    steps = ("push", "push", "pull", "leave")


class FlexibleVisitor(Visitor):
    steps = ("push", "pull", "leave")


class AnyVisitor:
    """Stubborn or flexible as the scenario's door says (read from the first observation)."""

    implementation = "any-visitor@1"

    def __init__(self) -> None:
        self._inner: Visitor | None = None

    def act(self, observation: Any) -> dict[str, str]:
        if self._inner is None:
            stubborn = observation["stubborn"]
            self._inner = StubbornVisitor() if stubborn else FlexibleVisitor()
        return self._inner.act(observation)


class TellingDoorway(Doorway):
    """The same door, showing the visitor which kind of visitor the scenario casts it as."""

    def initialize(self, input: Door, rng: Random, roster: Mapping[str, str]) -> Any:
        return {"stubborn": input.stubborn, **msgspec.to_builtins(DoorState())}

    def observe(self, state: Any, participant: str) -> dict[str, Any]:
        return {"attempts": state["attempts"], "open": state["open"], "stubborn": state["stubborn"]}

    def resolve(self, state: Any, actions: Mapping[str, Any]) -> Resolution:
        inner = DoorState(open=state["open"], attempts=state["attempts"], left=state["left"])
        resolution = super().resolve(inner, actions)
        new = {"stubborn": state["stubborn"], **msgspec.to_builtins(resolution.state)}
        return Resolution(state=new, outcomes=resolution.outcomes, done=resolution.done)

    def score(self, state: Any, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={}, passed=state["open"] and state["attempts"] <= 2)

    def hook_view(self, state: Any, participant: str) -> HookView:
        return HookView(predicates={"open": state["open"]}, state={"attempts": state["attempts"]})


TellingDoorway.spec = EnvironmentSpec(name="doorway", version="2", input_type=Door)


def doors() -> list[Scenario[Door]]:
    return [Scenario(id=f"stubborn-{i}", input=Door(stubborn=True)) for i in range(8)] + [
        Scenario(id=f"flexible-{i}", input=Door(stubborn=False)) for i in range(2)
    ]


def test_repeating_a_failed_action_is_mined_with_the_recovery_passing_sessions_used(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    harness = EnvironmentHarness(store, environment=TellingDoorway, agents={"v": AnyVisitor})
    config = OptimizationConfig(turns=6, sandbox="local", candidates=8)
    engineer = MiningEngineer()
    result = HarnessOptimizer(harness, engineer, config=config).optimize(doors())
    assert (result.baseline.passed, result.final.passed) == (2, 10)
    assert result.accepted_version == "harness-v1"
    assert all(entry.candidate != result.versions[0].candidate for entry in result.ledger)

    async def first_packet() -> FailurePacket:
        reader = await read_store(store)
        traces = await experiment_traces(reader, result.baseline.experiment_id or "")
        return await build_packet(reader, traces, TellingDoorway())

    rules, field = mine_rules(anyio.run(first_packet))
    assert field == "do"
    kinds = [{atom.kind for atom in rule.atoms} for rule in rules]
    assert {"repeat", "after_error"} in kinds, "the repetition after a failure was seen"
    recovery = next(r for r in rules if {a.kind for a in r.atoms} == {"after_error", "field"})
    assert recovery.suggestion == {"do": "pull"}, "what passing sessions did after a failure"

    proposals = MiningEngineer().answers(anyio.run(first_packet), 8)
    assert any("ctx.last_outcome" in p.text for p in proposals), "the recovery rule is among them"
    for proposal in proposals:
        check_patch(parse_answer(proposal.text).patch)  # every idea must pass the sandbox policy


# -- the grammar on hand-made packets ----------------------------------------------------------


def step(n: int, action: Any, **predicates: bool) -> FailureStep:
    return FailureStep(step=n, participant="p", action=action, predicates=predicates)


def example(name: str, passed: bool, *steps: FailureStep) -> FailureExample:
    return FailureExample(session_id=name, scenario_id=name, passed=passed, steps=steps)


def test_a_free_text_rule_is_narrowed_by_what_passing_sessions_did() -> None:
    failing = example(
        "f",
        False,
        step(1, {"cmd": "delete --force /data/logs"}),
        step(2, {"cmd": "done"}),
    )
    other = example("g", False, step(1, {"cmd": "delete --force /etc/x"}), step(2, {"cmd": "done"}))
    passing = example(
        "p", True, step(1, {"cmd": "delete --force /sandbox/tmp"}), step(2, {"cmd": "done"})
    )
    packet = FailurePacket(
        environment="toy@1",
        hooks=("on_before_action",),
        clusters=(
            FailureCluster(signature="a", description="", sessions=("f",), example=failing),
            FailureCluster(signature="b", description="", sessions=("g",), example=other),
        ),
        passing=(passing,),
    )
    rules, field = mine_rules(packet)
    assert field == "cmd"
    best = rules[0]
    assert {(a.kind, a.value) for a in best.atoms} == {
        ("prefix", "delete"),
        ("not_prefix", "delete --force /sandbox"),
    }
    assert (best.explained, best.changed) == (2, 0)
    code = parse_answer(MiningEngineer().answers(packet, 1)[0].text).patch.hooks[0].code
    assert "cmd = str(action.get('cmd', ''))" in code
    assert "not re.match('delete --force /sandbox(?:\\\\s|/|$)', cmd)" in code


def test_the_grammar_offers_every_atom_the_packet_shows_unranked() -> None:
    """What a search baseline samples from: no evidence, no ranking, just the atoms."""
    failing = example("f", False, step(1, {"cmd": "rm -rf /x"}), step(2, {"cmd": "done"}))
    passing = example("p", True, step(1, {"cmd": "ls"}, ready=True))
    packet = FailurePacket(
        environment="toy@1",
        hooks=("on_before_action",),
        predicate_keys=("ready",),
        clusters=(FailureCluster(signature="a", description="", sessions=("f",), example=failing),),
        passing=(passing,),
    )
    assert [s.step for s in packet_steps(packet)] == [1, 2, 1], "failures first, then passing"
    actions, conditions, field = grammar_atoms(packet)
    assert field == "cmd"
    assert actions == [Atom("prefix", "cmd", "rm"), Atom("field", "cmd", "done"),
                       Atom("field", "cmd", "ls")]  # fmt: skip
    assert conditions == [Atom("predicate", "ready", True), Atom("predicate", "ready", False),
                          Atom("repeat"), Atom("after_error")]  # fmt: skip


def test_forbidden_terms_never_reach_a_proposal() -> None:
    failing = example(
        "f",
        False,
        step(1, {"op": "go"}, secret_flag=False),
        step(2, {"op": "prep"}, secret_flag=False),
        step(3, {"op": "go"}, secret_flag=True),
    )
    packet = FailurePacket(
        environment="toy@1",
        hooks=("on_before_action",),
        clusters=(FailureCluster(signature="a", description="", sessions=("f",), example=failing),),
        forbidden_terms=("secret_flag",),
    )
    proposals = MiningEngineer().answers(packet, 20)
    assert proposals
    assert all("secret_flag" not in p.text for p in proposals)


def test_mining_is_deterministic_and_seeds_only_reorder_ties(tmp_path: Path) -> None:
    packet = greenhouse_packet(tmp_path / "store")
    engineer = MiningEngineer()
    assert engineer.answers(packet, 8) == engineer.answers(packet, 8)
    shuffled = engineer.answers(packet, 50, seed=7)
    assert sorted(p.text for p in shuffled) == sorted(p.text for p in engineer.answers(packet, 50))


async def test_propose_is_the_engineer_contract(anyio_backend: str) -> None:
    packet = FailurePacket(environment="empty@1", hooks=("on_before_action",))
    assert await MiningEngineer().propose(packet, 4, seed=0) == []
    assert MiningEngineer().version == "mining@2"


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ({"error": "no such file"}, True),
        ({"ok": False}, True),
        ({"success": False}, True),
        ({"exit_code": 2}, True),
        ({"returncode": 0, "output": "fine"}, False),
        ({"ok": True}, False),
        ("error", False),
        (None, False),
    ],
)
def test_failures_are_read_by_common_conventions(outcome: Any, expected: bool) -> None:
    assert failed(outcome) is expected


def test_the_mining_engineer_knows_no_example_environment() -> None:
    source = "".join(Path(m.__file__).read_text() for m in (mining_module, grammar_module))
    for word in ("issue_refund", "lookup_order", "order_looked_up", "tests_run", "/workspace",
                 "support", "pytest", "rm -rf"):  # fmt: skip
        assert word not in source, word
