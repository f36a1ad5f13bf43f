"""``experiments`` and ``experiments show`` over a store with one synthetic experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from tests.cli._support import Invoke

SCENARIOS = [
    Scenario(id="negative-start", input=SyntheticScenarioInput(starting_total=-3)),
    Scenario(id="positive-start", input=SyntheticScenarioInput(starting_total=3, target=0)),
]


def _harness(store: Path) -> EnvironmentHarness:
    return EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"agent": SyntheticAgent}
    )


@pytest.fixture(scope="module")
def experiment_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store with one experiment (2 scenarios x 2 trials) and one standalone session."""
    store = tmp_path_factory.mktemp("experiments") / "store"
    harness = _harness(store)
    result = harness.experiment("synthetic sweep", SCENARIOS, trials=2, seed=42, turns=2).run()
    harness.run(SCENARIOS[0], turns=1)
    return store, result.id


# -- the list ----------------------------------------------------------------------------------


def test_experiments_prints_a_table(invoke: Invoke, experiment_store: tuple[Path, str]) -> None:
    store, experiment_id = experiment_store
    result = invoke("--store", store, "experiments")

    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "id", "name", "status", "completed", "failed", "stopped", "running", "total",
    ]  # fmt: skip
    assert row.split()[:4] == [experiment_id, "synthetic", "sweep", "completed"]
    assert row.split()[4:] == ["4", "0", "0", "0", "4"]


def test_experiments_json_is_one_object_per_line(
    invoke: Invoke, experiment_store: tuple[Path, str]
) -> None:
    store, experiment_id = experiment_store
    result = invoke("--store", store, "experiments", "--json")

    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    found = json.loads(line)
    assert (found["id"], found["name"], found["status"], found["total"]) == (
        experiment_id,
        "synthetic sweep",
        "completed",
        4,
    )
    assert found["sessions"]["completed"] == 4
    assert sum(found["sessions"].values()) == 4  # the standalone session is not counted


def test_a_store_without_experiments_says_so(invoke: Invoke, store_path: Path) -> None:
    _harness(store_path).run(SCENARIOS[0], turns=1)

    listed = invoke("--store", store_path, "experiments")
    assert (listed.exit_code, listed.stdout) == (0, "")
    assert "no experiments in" in listed.stderr
    as_json = invoke("--store", store_path, "experiments", "--json")
    assert (as_json.exit_code, as_json.stdout) == (0, "")


def test_a_missing_store_is_an_error(invoke: Invoke, store_path: Path) -> None:
    result = invoke("--store", store_path, "experiments", "list")

    assert result.exit_code == 2
    assert result.stderr.startswith("error: no evidence store at ")
    assert not store_path.exists()


# -- one experiment ----------------------------------------------------------------------------


def test_show_prints_configuration_sessions_and_scores(
    invoke: Invoke, experiment_store: tuple[Path, str]
) -> None:
    store, experiment_id = experiment_store
    result = invoke("--store", store, "experiments", "show", experiment_id)

    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith(f"experiment {experiment_id}  synthetic sweep\n")
    assert "environment  synthetic-total@1 (simultaneous) · 2 turns · seed 42" in text
    assert "plan         2 scenarios x 2 trials = 4 sessions" in text
    assert "participant  agent: role agent, synthetic-agent@1" in text
    assert "scoring synthetic-score@1" in text
    assert "sessions     4 completed" in text
    lines = text.splitlines()
    assert "negative-start 2 2 0 0 0 2 low" in [" ".join(line.split()) for line in lines]
    assert "scores synthetic-score@1: mean [95% CI] (n)" in lines
    assert "seeded from seed 42" in text
    rows = [" ".join(line.split()) for line in lines]
    assert "negative-start total -1 [-1, -1] (2)" in rows
    assert "pass rate 0% [0%, 66%] (0 of 2 passed)" in rows
    assert "findings: 2 low" in lines
    assert any(line.startswith("  [low] total ended below zero x 2  (e.g. ses_") for line in lines)


def test_show_json_is_the_whole_report_and_reproducible(
    invoke: Invoke, experiment_store: tuple[Path, str]
) -> None:
    store, experiment_id = experiment_store
    first = invoke("--store", store, "experiments", "show", experiment_id[:12], "--json")
    again = invoke("--store", store, "experiments", "show", experiment_id, "--json")

    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout
    report = json.loads(first.stdout)
    assert (report["id"], report["confidence"], report["resamples"]) == (experiment_id, 0.95, 2000)
    assert report["config"]["seed"] == 42
    assert [s["id"] for s in report["scenarios"]] == ["negative-start", "positive-start"]
    [overall] = report["scores"]
    total = next(m for m in overall["metrics"] if m["name"] == "total")
    assert total["n"] == 4
    assert total["ci_low"] <= total["mean"] <= total["ci_high"]
    [finding, _] = report["scenarios"][0]["findings"]
    assert finding["cites"]


def test_show_takes_the_confidence_and_resamples(
    invoke: Invoke, experiment_store: tuple[Path, str]
) -> None:
    store, experiment_id = experiment_store
    result = invoke(
        "--store", store, "experiments", "show", experiment_id,
        "--confidence", "0.8", "--resamples", "100",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "mean [80% CI] (n)" in result.stdout
    assert "100 resamples" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("show", "exp_nope"), "error: no experiment 'exp_nope' in the store at "),
        (("show", "ses_0123"), "(that is a session id; `envharness show` shows a session)"),
        (("show", "exp_", "--confidence", "1.5"), "error: --confidence must be between 0 and 1"),
        (("--json", "show", "exp_"), "error: --json goes after the subcommand"),
    ],
)
def test_show_refuses_what_it_cannot_show(
    invoke: Invoke,
    experiment_store: tuple[Path, str],
    arguments: tuple[str, ...],
    message: str,
) -> None:
    store, _ = experiment_store
    result = invoke("--store", store, "experiments", *arguments)

    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
