"""Results first: the experiment page's results card, the grid's verdicts apart from run
status, the experiments list's result columns, and what a participant is not shown of them."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from envharness.records import Finding, Score
from envharness.store import open_store
from tests.service._support import ExperimentWriter, World, make_world, write_session

pytestmark = pytest.mark.anyio

SCENARIOS = ("alpha", "beta")


async def _experiment(store: Path, name: str, *, passed: bool) -> ExperimentWriter:
    """Every session completes; each passes (or fails) its checks, scoring ``accuracy``."""
    experiment = ExperimentWriter(SCENARIOS, trials=2, name=name)
    async with open_store(store) as opened:
        await opened.append(experiment.start())
        for scenario in SCENARIOS:
            for trial in range(2):
                writer = experiment.session(scenario, trial)
                await write_session(opened, writer, 2, finish=False)
                rows = [
                    writer.chain.seal(
                        Score(
                            version="core@1",
                            metrics={"accuracy": 1.0 if passed else 0.25},
                            passed=passed,
                            per_participant={"alice": {"moves": 3.0}, "bob": {"moves": 5.0}},
                        )
                    )
                ]
                if not passed:
                    rows.append(
                        writer.chain.seal(
                            Finding(title="left the door open", severity="high", cites=(3,))
                        )
                    )
                await opened.append(rows)
                await opened.append(writer.finish())
        await opened.append(experiment.finish())
    return experiment


async def _unscored(store: Path) -> ExperimentWriter:
    """Still running: one session a turn in, none scored yet."""
    experiment = ExperimentWriter(("alpha",), trials=1, name="unscored")
    async with open_store(store) as opened:
        await opened.append(experiment.start())
        await write_session(opened, experiment.session("alpha", 0), 1, finish=False)
    return experiment


@pytest.fixture(scope="module")
def results_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    path = tmp_path_factory.mktemp("results") / "store"

    async def write() -> tuple[str, str, str]:
        baseline = await _experiment(path, "baseline", passed=False)
        patched = await _experiment(path, "patched", passed=True)
        unscored = await _unscored(path)
        return baseline.id, patched.id, unscored.id

    baseline, patched, unscored = anyio.run(write)
    return path, baseline, patched, unscored


@pytest.fixture
def results(results_store: tuple[Path, str, str, str]) -> tuple[World, str, str]:
    path, baseline, patched, _ = results_store
    return make_world(path), baseline, patched


@pytest.fixture
def still_running(results_store: tuple[Path, str, str, str]) -> tuple[World, str]:
    return make_world(results_store[0]), results_store[3]


async def test_an_unscored_experiment_says_so(still_running: tuple[World, str]) -> None:
    world, unscored = still_running
    text = await _page(world, "viewer", f"/experiments/{unscored}")
    assert "No score reports yet" in text
    assert _verdicts(text) == ["none"]
    assert "no verdict" in text
    assert "turn 1/2" in text
    row = next(
        row
        for row in (await _page(world, "viewer", "/experiments")).split("<tr>")
        if unscored in row
    )
    assert "no verdict" in row


async def _page(world: World, role: str, url: str) -> str:
    async with world.client(role) as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    return response.text


def _verdicts(text: str) -> list[str]:
    return re.findall(r'<a class="run" [^>]*data-verdict="(\w+)"', text)


async def test_zero_of_n_and_n_of_n_look_different(results: tuple[World, str, str]) -> None:
    world, baseline, patched = results
    failing = await _page(world, "viewer", f"/experiments/{baseline}")
    passing = await _page(world, "viewer", f"/experiments/{patched}")
    # Both completed every session; only the verdicts tell them apart.
    assert _verdicts(failing) == ["failed"] * 4
    assert _verdicts(passing) == ["passed"] * 4
    assert 'data-passed="0" data-judged="4"' in failing
    assert 'data-passed="4" data-judged="4"' in passing
    assert "results-none" in failing
    assert "results-all" in passing
    assert "not passed" in failing
    assert "not passed" not in passing
    # Status stays a mark of its own, and completed is never the passed colour.
    marks = re.findall(r'data-status="(\w+)" data-verdict="failed"', failing)
    assert marks == ["completed"] * 4
    assert 'data-verdict="passed"' not in failing


async def test_the_results_card_comes_first_with_metrics_and_findings(
    results: tuple[World, str, str],
) -> None:
    world, baseline, _ = results
    text = await _page(world, "viewer", f"/experiments/{baseline}")
    card = text.index('id="results"')
    assert card < text.index('class="stats"') < text.index('id="experiment-grid"')
    assert "mean accuracy" in text
    assert "n=4" in text
    assert "0.25" in text
    assert "0 of 2" in text
    assert "0 of 4" in text
    assert "Per participant" in text
    assert "moves" in text
    assert "left the door open" in text
    assert "&times; 4" in text
    assert re.search(r'href="/sessions/ses[^"/]*/records/\d+"', text[card:])
    assert "turn 2/2" in text


async def test_the_experiments_list_has_result_columns(results: tuple[World, str, str]) -> None:
    world, baseline, patched = results
    text = await _page(world, "viewer", "/experiments")
    assert "<th>Passed</th>" in text
    assert "Main metric" in text
    rows = {
        row_id: row for row in text.split("<tr>") for row_id in (baseline, patched) if row_id in row
    }
    assert 'data-passed="0" data-judged="4"' in rows[baseline]
    assert 'data-passed="4" data-judged="4"' in rows[patched]
    assert "0.25" in rows[baseline]
    assert "accuracy" in rows[patched]


async def test_a_participant_sees_no_results_of_everyone(results: tuple[World, str, str]) -> None:
    world, baseline, _ = results
    text = await _page(world, "alice", f"/experiments/{baseline}")
    assert 'id="results"' not in text
    assert "left the door open" not in text
    assert "accuracy" not in text
    assert set(_verdicts(text)) == {"withheld"}
    listing = await _page(world, "alice", "/experiments")
    assert "<th>Passed</th>" not in listing
    assert "data-passed" not in listing
