"""The mining grammar's argument fields and fact families, on environments written only here.

A board the engineer has never seen: every move is ``{"op": "place", "cell": n}`` — the same
name, only a cell number differs — and the environment exposes one predicate per cell
(``rival_wins_at_0`` … ``rival_wins_at_4``). The frozen player takes the lowest free cell; the
fix is to take the cell the family marks, which only an argument-choosing rewrite can say.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from random import Random
from typing import Any

import anyio
import msgspec
import pytest

import envharness.optimizer.engineers.families as families_module
import envharness.optimizer.engineers.grammar as grammar_module
import envharness.optimizer.engineers.mining as mining_module
from envharness import EnvironmentHarness, EnvironmentSpec, HookView, Resolution, ScoreReport
from envharness.contracts.scenario import Scenario
from envharness.hooks import HookContext
from envharness.optimizer import (
    FailureCluster,
    FailureExample,
    FailurePacket,
    FailureStep,
    HarnessOptimizer,
    LocalSandbox,
    MiningEngineer,
    OptimizationConfig,
    parse_answer,
)
from envharness.optimizer.engineers.evidence import experiment_traces
from envharness.optimizer.engineers.families import Family, argument_fields, discover_families
from envharness.optimizer.engineers.grammar import (
    Atom,
    Rule,
    alternatives,
    grammar_atoms,
    render,
    situations_of,
)
from envharness.optimizer.engineers.mining import mine_rules
from envharness.optimizer.engineers.packets import build_packet
from envharness.optimizer.patches.policy import check_patch
from envharness.optimizer.patches.sandbox import HookProgram
from envharness.store import read_store

CELLS = 5

# -- a tiny board: block the rival's winning cell ---------------------------------------------


class Position(msgspec.Struct, frozen=True):
    taken: tuple[int, ...]
    rival: int


class BoardState(msgspec.Struct, frozen=True):
    taken: tuple[int, ...]
    rival: int
    played: int | None = None


class Board:
    spec = EnvironmentSpec(
        name="row-board", version="1", input_type=Position, state_type=BoardState
    )

    def initialize(self, input: Position, rng: Random, roster: Mapping[str, str]) -> BoardState:
        return BoardState(taken=input.taken, rival=input.rival)

    def observe(self, state: BoardState, participant: str) -> dict[str, Any]:
        return {"taken": list(state.taken)}

    def resolve(self, state: BoardState, actions: Mapping[str, Any]) -> Resolution:
        [action] = actions.values()
        cell = action.get("cell")
        state = msgspec.structs.replace(state, played=cell)
        return Resolution(state=state, outcomes={p: {"ok": True} for p in actions}, done=True)

    def intervene(self, state: Any, intervention: Any) -> Any:
        return state

    def score(self, state: BoardState, scenario: Any) -> ScoreReport:
        return ScoreReport(metrics={}, passed=state.played == state.rival)

    def hook_view(self, state: BoardState, participant: str) -> HookView:
        free = [cell for cell in range(CELLS) if cell not in state.taken]
        return HookView(
            predicates={f"rival_wins_at_{cell}": cell == state.rival for cell in range(CELLS)},
            admissible=[{"op": "place", "cell": cell} for cell in free],
        )


class LowestFree:
    """Deaf to vetoes: takes the lowest free cell, every time it is asked."""

    implementation = "lowest-free@1"

    def act(self, observation: Any) -> dict[str, Any]:
        taken = set(observation["taken"])
        return {"op": "place", "cell": min(c for c in range(CELLS) if c not in taken)}


def positions(spec: str, prefix: str) -> list[Scenario[Position]]:
    """``"01:3"`` is a board with cells 0 and 1 taken where the rival wins at 3."""
    scenarios = []
    for number, item in enumerate(spec.split()):
        taken, rival = item.split(":")
        scenarios.append(
            Scenario(
                id=f"{prefix}-{number}",
                input=Position(taken=tuple(int(c) for c in taken), rival=int(rival)),
            )
        )
    return scenarios


TRAIN = ":3 :4 0:2 0:4 01:3 1:4 2:1 01:4 :0 0:1"
"""Eight positions the lowest free cell loses, two it wins (the contrasts)."""
HELD_OUT = "3:2 02:4 4:3 1:0"


@pytest.fixture(scope="module")
def board_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    store = tmp_path_factory.mktemp("board") / "store"
    harness = EnvironmentHarness(store, environment=Board, agents={"p": LowestFree})
    config = OptimizationConfig(turns=2, sandbox="local", candidates=4, iterations=1)
    engineer = MiningEngineer()
    result = HarnessOptimizer(harness, engineer, config=config).optimize(
        positions(TRAIN, "train"), held_out=positions(HELD_OUT, "held")
    )
    return result, store


def board_packet(result: Any, store: Path) -> FailurePacket:
    async def build() -> FailurePacket:
        reader = await read_store(store)
        traces = await experiment_traces(reader, result.baseline.experiment_id or "")
        return await build_packet(reader, traces, Board())

    return anyio.run(build)


def test_the_optimizer_takes_the_cell_the_family_marks(board_run: tuple[Any, Path]) -> None:
    result, _ = board_run
    assert (result.baseline.passed, result.final.passed) == (2, 10)
    assert result.accepted_version == "harness-v1"
    [version] = result.versions
    assert version.p_value is not None
    assert version.p_value <= 0.05 / 4
    assert result.held_out is not None
    assert result.held_out.passed == 4, "held out: 1 of 4 before"
    [hook] = version.patch["ops"]
    code = hook["code"]
    assert "ctx.predicates.get('rival_wins_at_' + str(value) + '')" in code
    assert "return rewrite(option," in code
    assert "block_and_prompt" not in code


def test_board_proposals_pass_the_policy_and_none_vetoes_every_cell(
    board_run: tuple[Any, Path],
) -> None:
    packet = board_packet(*board_run)
    rules, field = mine_rules(packet)
    assert field == "op", "every move is named place: the cell is an argument"
    stuck = [r for r in rules if {a.name for a in r.atoms if a.kind == "field"} == {"op"}]
    assert stuck
    assert not any(r.escapable for r in stuck if r.family_atom is None)
    proposals = MiningEngineer().answers(packet, 40)
    assert len(proposals) >= 8
    for proposal in proposals:
        patch = parse_answer(proposal.text).patch
        check_patch(patch)
        for code in (hook.code for hook in patch.hooks):
            if "block_and_prompt" in code:
                # a veto another cell escapes: the condition reads the attempted cell
                assert "action.get('cell')" in code, code


def test_the_grammar_offers_argument_and_family_atoms(board_run: tuple[Any, Path]) -> None:
    packet = board_packet(*board_run)
    actions, _, field = grammar_atoms(packet)
    assert field == "op"
    assert Atom("field", "cell", 1) in actions, "the cells the player took"
    [family] = {atom.family for atom in actions if atom.family is not None}
    assert (family.kind, family.name, family.field) == ("predicates", "rival_wins_at_", "cell")
    assert family.indices == tuple(range(CELLS))


# -- hand-made packets: every kind of family, the code against the rule ------------------------


def board_step(cell: int, state: dict[str, Any], free: tuple[int, ...] = (0, 1, 2, 3)) -> Any:
    admissible = [{"op": "place", "cell": c} for c in free]
    return FailureStep(
        step=1, participant="p", action={"op": "place", "cell": cell}, state=state,
        admissible=admissible,
    )  # fmt: skip


Told = FailureStep | tuple[FailureStep, ...]


def state_packet(failing: list[Told], passing: list[Told]) -> FailurePacket:
    """One failure cluster per failing session, each session one step or a tuple of them."""

    def example(name: str, passed: bool, told: Told) -> FailureExample:
        steps = told if isinstance(told, tuple) else (told,)
        return FailureExample(session_id=name, scenario_id=name, passed=passed, steps=steps)

    clusters = tuple(
        FailureCluster(signature=f"f{i}", description="", sessions=(f"f{i}",),
                       example=example(f"f{i}", False, step))
        for i, step in enumerate(failing)
    )  # fmt: skip
    return FailurePacket(
        environment="toy@1",
        hooks=("on_before_action",),
        clusters=clusters,
        passing=tuple(example(f"p{i}", True, step) for i, step in enumerate(passing)),
    )


PACKETS = {
    # a list of flags read by position: take the cell the mask marks
    "position": state_packet(
        [board_step(0, {"safe": [0, 0, 1, 0]}), board_step(0, {"safe": [0, 1, 0, 0]})],
        [board_step(2, {"safe": [0, 0, 1, 0]})],
    ),
    # a mapping of numbers read by key: take the cell ranked first
    "key": state_packet(
        [
            board_step(0, {"gain": {"0": 1, "1": 5, "2": 2}}),
            board_step(1, {"gain": {"0": 7, "1": 2}}),
        ],
        [board_step(1, {"gain": {"0": 1, "1": 9, "2": 3}})],
    ),
    # a list of cells: never take one it holds
    "member": state_packet(
        [board_step(0, {"traps": [0, 2]}), board_step(1, {"traps": [1]})],
        [board_step(3, {"traps": [0, 1]})],
    ),
}


@pytest.mark.parametrize(("kind", "choice"), [("position", "marked"), ("key", "max"),
                                             ("member", "unmarked")])  # fmt: skip
def test_state_families_are_found_and_chosen_by(kind: str, choice: str) -> None:
    packet = PACKETS[kind]
    rules, field = mine_rules(packet)
    assert field == "op"
    [found] = discover_families(
        [s for c in packet.clusters for s in c.example.steps], (), {"cell": [0, 1, 2, 3]}
    )
    assert (found.kind, found.field) == (kind, "cell")
    best = next(r for r in rules if r.choice == choice)
    assert (best.explained, best.changed) == (2, 0)
    proposals = MiningEngineer().answers(packet, 8)
    assert any("Effect: choose." in p.text for p in proposals)
    for proposal in MiningEngineer().answers(packet, 50):
        check_patch(parse_answer(proposal.text).patch)


def test_families_saying_the_same_are_one_and_unlinked_slots_are_none() -> None:
    def step(cell: int, free: list[int]) -> FailureStep:
        return FailureStep(
            step=1, participant="p", action={"move": cell},
            state={"mask": [int(c in free) for c in range(4)], "log": ["up", "down"]},
            predicates={f"gate_{c}_open": c in free for c in range(4)} | {"tired": False},
        )  # fmt: skip

    steps = [step(0, [1, 2]), step(2, [2, 3])]
    fields = {"move": [0, 2]}
    [family] = discover_families(steps, ("door_a", "door_b"), fields)
    assert (family.kind, family.name, family.suffix) == ("predicates", "gate_", "_open")
    assert family.indices == (0, 1, 2, 3)
    assert [family.marks(s, 2) for s in steps] == [True, True]
    assert family.marks(steps[0], 7) is None, "no fact at a cell the family does not cover"
    assert discover_families(steps, (), {"other": ["x", "y"]}) == []
    lamps = FailureStep(
        step=1, participant="p", predicates={"lamp_red_on": True, "lamp_blue_on": False}
    )
    [colour] = discover_families([lamps], (), {"colour": ["red", "blue"]})
    assert (colour.name, colour.suffix, colour.indices) == ("lamp_", "_on", ("blue", "red"))
    assert colour.marks(lamps, "red") is True


def sandbox_effect(code: str, step: FailureStep) -> dict[str, Any] | None:
    from envharness.optimizer import CodeHook, HarnessPatch

    program = HookProgram.from_patch(
        HarnessPatch(hooks=(CodeHook(hook="on_before_action", code=code),))
    )
    ctx = HookContext(
        hook="on_before_action", session_id="s", participant="p", role="p", step=1,
        state=step.state, predicates=step.predicates, admissible=step.admissible,
        action=step.action,
    )  # fmt: skip

    async def run() -> dict[str, Any] | None:
        async with LocalSandbox() as sandbox:
            outcome = await sandbox.run(program, "on_before_action", msgspec.to_builtins(ctx), {})
            return outcome.effect

    return anyio.run(run)


@pytest.mark.parametrize("kind", sorted(PACKETS))
def test_family_hook_code_tests_exactly_what_the_rule_tests(kind: str) -> None:
    """Each family rule, written as a block and as a choose rewrite, run in the sandbox on
    every step (with and without admissible options), agrees with the rule's own reading."""
    packet = PACKETS[kind]
    rules, field = mine_rules(packet)
    steps = [s for c in packet.clusters for s in c.example.steps] + [
        s for p in packet.passing for s in p.steps
    ]
    steps += [msgspec.structs.replace(s, admissible=None) for s in steps]
    checked, rewritten = 0, 0
    for rule in [r for r in rules if r.family_atom is not None]:
        family = rule.family_atom.family if rule.family_atom else None
        assert family is not None
        for effect in ("block", "choose"):
            code = parse_answer(render(rule, effect, field, packet)).patch.hooks[0].code
            for step in steps:
                [situation] = situations_of([step])
                got = sandbox_effect(code, step)
                if not rule.holds(situation):
                    assert got is None
                elif effect == "block":
                    assert got is not None
                    assert got["effect"] == "block_and_prompt"
                else:
                    assert got is None or got["effect"] == "rewrite"
                    if got is not None:
                        rewritten += 1
                        picked = got["action"]["cell"]
                        assert picked != step.action["cell"]
                        if rule.choice == "marked":
                            assert family.marks(step, picked) is True
                        elif rule.choice == "unmarked":
                            assert family.marks(step, picked) is False
                        else:
                            facts = [
                                family.fact(step, o["cell"]) for o in alternatives(step, family)
                            ]
                            wanted = max if rule.choice == "max" else min
                            assert family.fact(step, picked) == wanted(
                                f for f in facts if f is not None
                            )
                checked += 1
    assert checked >= 2 * len(steps)
    assert rewritten > 0


# -- argument fields -----------------------------------------------------------------------------


def test_argument_fields_are_what_tells_options_of_one_name_apart() -> None:
    def reply(tone: str, order: str) -> FailureStep:
        return FailureStep(
            step=1, participant="p", action={"tool": "reply", "tone": tone, "order": order},
            admissible=[{"tool": "reply", "tone": "curt", "order": order},
                        {"tool": "reply", "tone": "warm", "order": order},
                        {"tool": "lookup", "order": order}],
        )  # fmt: skip

    sessions = [(reply("curt", "A-1"),), (reply("warm", "A-2"),)]
    assert argument_fields(sessions, "tool") == {"tone": ["curt", "warm"]}, "an id is no argument"
    bare = [
        tuple(msgspec.structs.replace(s, admissible=None) for s in session) for session in sessions
    ]
    assert argument_fields(bare, "tool") == {}, "no value recurs across sessions"
    sized = [
        (FailureStep(step=1, participant="p", action={"tool": "pour", "size": size, "id": n}),)
        for n, size in enumerate((1, 2, 1, 3))
    ]
    assert argument_fields(sized, "tool") == {"size": [1, 2, 3]}


def test_an_enum_argument_is_mined_and_rewritten_to_the_one_passing_sessions_took() -> None:
    options = [{"tool": "look"}, {"tool": "reply", "tone": "curt"},
               {"tool": "reply", "tone": "warm"}]  # fmt: skip

    def session(tone: str) -> tuple[FailureStep, ...]:
        return (
            FailureStep(step=1, participant="p", action={"tool": "look"}, admissible=options,
                        predicates={"looked": False}),
            FailureStep(step=2, participant="p", action={"tool": "reply", "tone": tone},
                        admissible=options, predicates={"looked": True}),
        )  # fmt: skip

    packet = state_packet([session("curt"), session("curt")], [session("warm")])
    rules, field = mine_rules(packet)
    assert field == "tool"
    contrast = next(r for r in rules if r.suggestion == {"tool": "reply", "tone": "warm"})
    assert {(a.kind, a.name, a.value) for a in contrast.atoms} >= {
        ("field", "tool", "reply"),
        ("field", "tone", "curt"),
    }
    assert contrast.suggestion == {"tool": "reply", "tone": "warm"}
    assert (contrast.explained, contrast.changed) == (2, 0)
    code = parse_answer(render(contrast, "rewrite", field, packet)).patch.hooks[0].code
    assert "option.get('tool') == 'reply' and option.get('tone') == 'warm'" in code
    assert "reply tone='warm'" in code


def test_render_refuses_what_the_grammar_cannot_say() -> None:
    family = Family("predicates", "hot_", "cell", (0, 1))
    other = Family("predicates", "cold_", "cell", (0, 1))
    packet = FailurePacket(environment="toy@1", hooks=("on_before_action",))
    plain = Rule(atoms=(Atom("field", "op", "place"),), seed="test")
    with pytest.raises(ValueError, match="choose rewrite needs a rule with a family atom"):
        render(plain, "choose", "op", packet)
    two = Rule(
        atoms=(Atom("family", family.key, True, family), Atom("family", other.key, True, other)),
        seed="test",
    )
    with pytest.raises(ValueError, match="at most one fact family"):
        render(two, "block", "op", packet)


def test_the_grammar_knows_no_example_environment_nor_these_tests() -> None:
    modules = (families_module, grammar_module, mining_module)
    source = "".join(Path(m.__file__).read_text() for m in modules)
    for word in ("issue_refund", "lookup_order", "order_looked_up", "tests_run", "/workspace",
                 "support", "pytest", "rm -rf", "taxi", "pickup", "rival", "threat"):  # fmt: skip
        assert word not in source.lower(), word
