"""Aggregates per participant: each player's own metrics apart, never pooled; shared scores
report exactly as before."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from envharness import EnvironmentHarness
from envharness.records import Score
from envharness.scoring import (
    ExperimentReport,
    MetricAggregate,
    ParticipantAggregate,
    ScoreAggregate,
    aggregate_scores,
    bootstrap_interval,
    bootstrap_seed,
)
from tests.trajectories._duel import AGENTS, Duel, duel

SEED = 7


def own(aggregate: ScoreAggregate, participant: str) -> ParticipantAggregate:
    [found] = [p for p in aggregate.participants if p.participant == participant]
    return found


def metric(participant: ParticipantAggregate, name: str) -> MetricAggregate:
    [found] = [m for m in participant.metrics if m.name == name]
    return found


def chips(alice: float | None, bob: float | None) -> Score:
    return Score(
        version="duel@1",
        metrics={"moves": 3.0},
        per_participant={"alice": {"chips": alice}, "bob": {"chips": bob}},
    )


def test_each_participant_is_aggregated_apart() -> None:
    reports = [chips(1.0, -1.0), chips(-1.0, 1.0), chips(1.0, -1.0), chips(1.0, None)]
    [aggregate] = aggregate_scores(reports, seed=SEED)
    assert [p.participant for p in aggregate.participants] == ["alice", "bob"]
    alice, bob = metric(own(aggregate, "alice"), "chips"), metric(own(aggregate, "bob"), "chips")
    assert (alice.n, alice.missing, alice.mean, alice.min, alice.max) == (4, 0, 0.5, -1.0, 1.0)
    assert (bob.n, bob.missing, bob.mean) == (3, 1, -1 / 3)  # null is counted, not guessed
    expected = bootstrap_interval(
        [1.0, -1.0, 1.0, 1.0], seed=bootstrap_seed(SEED, "duel@1", None, "chips", "alice")
    )
    assert (alice.ci_low, alice.ci_high) == expected
    assert own(aggregate, "alice").reports == 4
    # The shared metric is still there, alone.
    assert [m.name for m in aggregate.metrics] == ["moves"]


def test_a_participant_a_report_left_out_counts_as_missing() -> None:
    only_alice = Score(version="duel@1", metrics={}, per_participant={"alice": {"chips": 1.0}})
    unscored = Score(version="duel@1", metrics={"moves": 1.0})  # not scored per participant
    [aggregate] = aggregate_scores([chips(1.0, -1.0), only_alice, unscored], seed=SEED)
    bob = own(aggregate, "bob")
    assert bob.reports == 2  # the reports that scored participants apart
    assert (metric(bob, "chips").n, metric(bob, "chips").missing) == (1, 1)
    assert metric(bob, "chips").ci_low is None  # one value: no interval
    assert aggregate.reports == 3


def test_participant_intervals_have_their_own_bootstrap_streams() -> None:
    assert bootstrap_seed(SEED, "v", None, "chips", "alice") != bootstrap_seed(
        SEED, "v", None, "chips"
    )
    assert bootstrap_seed(SEED, "v", None, "chips", "alice") != bootstrap_seed(
        SEED, "v", None, "chips", "bob"
    )


def test_shared_scores_report_as_before() -> None:
    reports = [
        Score(version="v", metrics={"m": 1.0}, passed=True),
        Score(version="v", metrics={"m": 0.0}),
    ]
    [aggregate] = aggregate_scores(reports, seed=SEED)
    assert aggregate.participants == ()
    encoded = msgspec.json.decode(msgspec.json.encode(aggregate))
    assert set(encoded) == {"version", "reports", "metrics", "pass_rate"}
    assert msgspec.json.decode(msgspec.json.encode(aggregate), type=ScoreAggregate) == aggregate


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ExperimentReport:
    store: Path = tmp_path_factory.mktemp("duel-experiment") / "store"
    harness = EnvironmentHarness(store, environment=Duel, agents=AGENTS)
    scenarios = [duel("alice-wins"), duel("bob-wins", winner="bob")]
    result = harness.experiment("duels", scenarios, trials=2, seed=SEED, turns=10).run()
    return harness.report(result.id)


def test_an_experiment_reports_each_participant_per_scenario_and_overall(
    report: ExperimentReport,
) -> None:
    alice_wins, bob_wins = report.scenarios
    for scenario, expected in ((alice_wins, (1.0, -1.0)), (bob_wins, (-1.0, 1.0))):
        [aggregate] = scenario.scores
        got = tuple(metric(own(aggregate, name), "chips") for name in ("alice", "bob"))
        assert tuple(m.mean for m in got) == expected
        assert [m.n for m in got] == [2, 2]
        assert aggregate.pass_rate is None  # a verdict is the session's: none per participant
    [overall] = report.scores
    alice = metric(own(overall, "alice"), "chips")
    assert (alice.n, alice.mean, alice.ci_low, alice.ci_high) == (4, 0.0, -1.0, 1.0)
    assert [m.name for m in overall.metrics] == ["moves"]
