"""Comparing sessions of two environments says what lined up and what only one side has."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.contracts.environment import ScoreReport
from envharness.fixtures import (
    SyntheticAgent,
    SyntheticEnvironment,
    SyntheticScenarioInput,
    SyntheticState,
)
from envharness.runtime.compare import Alignment, Comparison, alignment_note, compare_sessions
from envharness.store import read_store

pytestmark = pytest.mark.anyio

SCENARIO = Scenario(id="count", input=SyntheticScenarioInput(starting_total=0))


class Board(SyntheticEnvironment):
    """The synthetic rules under another name, with a score metric of its own."""

    spec = dataclasses.replace(SyntheticEnvironment.spec, name="board")

    def score(self, state: SyntheticState, scenario: Scenario[Any]) -> ScoreReport:
        report = super().score(state, scenario)
        return dataclasses.replace(report, metrics={**report.metrics, "moves": 2.0})


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A store with a three-turn synthetic session of alice and bob, and a two-turn ``board``
    session of alice and carol."""
    store = tmp_path_factory.mktemp("compare") / "store"
    left = EnvironmentHarness(
        store,
        environment=SyntheticEnvironment,
        agents={"alice": SyntheticAgent, "bob": SyntheticAgent},
    ).run(SCENARIO, turns=3)
    right = EnvironmentHarness(
        store, environment=Board, agents={"alice": SyntheticAgent, "carol": SyntheticAgent}
    ).run(SCENARIO, turns=2)
    return store, left.id, right.id


async def _compared(sessions: tuple[Path, str, str]) -> Comparison:
    store, left, right = sessions
    return await compare_sessions(await read_store(store), left, right)


async def test_the_alignment_names_what_both_have_and_what_one_has(
    sessions: tuple[Path, str, str],
) -> None:
    compared = await _compared(sessions)
    found = compared.alignment
    assert (found.participants, found.left_only_participants, found.right_only_participants) == (
        ("alice",),
        ("bob",),
        ("carol",),
    )
    assert found.right_only_metrics == ("moves",)
    assert found.left_only_metrics == ()
    assert "moves" not in found.metrics
    assert found.metrics  # the synthetic metrics both reports name
    assert (found.left_only_turns, found.right_only_turns) == ((3,), ())
    assert compared.turns_compared == (1, 2)


async def test_the_note_says_what_lines_up_and_what_cannot(
    sessions: tuple[Path, str, str],
) -> None:
    compared = await _compared(sessions)
    note = alignment_note(compared, "synthetic-total@1", "board@1")
    assert note is not None
    assert note.startswith("A ran synthetic-total@1 and B ran board@1: ")
    assert "Lined up: turns 1\u20132 (both reached them), participants alice, metrics " in note
    assert "not compared: participants only A has: bob; participants only B has: carol; " in note
    assert "metrics only B has: moves; turns only A has: 3." in note
    assert alignment_note(compared, "board@1", "board@1") is None


async def test_a_session_with_itself_lines_up_entirely(sessions: tuple[Path, str, str]) -> None:
    store, left, _ = sessions
    compared = await compare_sessions(await read_store(store), left, left)
    assert compared.alignment.participants == ("alice", "bob")
    assert compared.alignment == Alignment(
        participants=("alice", "bob"), metrics=compared.alignment.metrics
    )
    assert compared.identical
