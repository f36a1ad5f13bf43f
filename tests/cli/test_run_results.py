"""``run`` ends with how well it went: a session's score line, an experiment's score tables,
and the command that shows more."""

from __future__ import annotations

from pathlib import Path

from tests.cli._support import Invoke

SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "envharness.fixtures:SyntheticAgent"
TO_ZERO = '{"starting_total": 2, "target": 0}'

MANIFEST = """\
[experiment]
name = "results sweep"
turns = {turns}
trials = 2
seed = 3

[environment]
factory = "envharness.fixtures:SyntheticEnvironment"

[agents.alice]
factory = "envharness.fixtures:SyntheticAgent"

[[scenarios.items]]
id = "to-zero"
input = {{ starting_total = 2, target = 0 }}
"""


def _session(invoke: Invoke, store: Path, turns: int) -> list[str]:
    result = invoke(
        "--store", store, "run", SYNTHETIC, "--agent", f"alice={AGENT}", "--turns", str(turns),
        "--input", TO_ZERO,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.splitlines()


def test_a_session_prints_its_score_and_verdict(invoke: Invoke, store_path: Path) -> None:
    reached = _session(invoke, store_path, 5)
    short = _session(invoke, store_path, 1)  # completes at its turn limit, short of the target

    assert reached[1] == "status  completed after 2 turns"
    assert short[1] == "status  completed after 1 turns"
    [passed] = [line for line in reached if line.startswith("score ")]
    [failed] = [line for line in short if line.startswith("score ")]
    assert passed.endswith("total 0 · turns 2 · passed")
    assert failed.endswith("total 1 · turns 1 · not passed")
    # The score comes before the command that shows more, which stays the last line.
    assert reached.index(passed) == len(reached) - 2
    assert reached[-1].startswith("see     envharness --store ")
    assert reached[-1].endswith(f"show {reached[0].split()[1]}")


def test_a_session_without_a_score_says_so(invoke: Invoke, store_path: Path) -> None:
    result = invoke(
        "--store", store_path, "run", SYNTHETIC, "--agent", "alice=tests.cli.agents:RaisingAgent",
        "--turns", "3", "--input", TO_ZERO,
    )  # fmt: skip
    assert result.exit_code == 1
    assert "score   none recorded (a session is scored when it completes)" in result.stdout


def _experiment(invoke: Invoke, store: Path, folder: Path, turns: int) -> list[str]:
    folder.mkdir()
    path = folder / "experiment.toml"
    path.write_text(MANIFEST.format(turns=turns))
    result = invoke("--store", store, "run", path)
    assert result.exit_code == 0, result.stderr
    return result.stdout.splitlines()


def test_an_experiment_prints_its_scores_and_how_to_see_more(
    invoke: Invoke, store_path: Path, tmp_path: Path
) -> None:
    patched = _experiment(invoke, store_path, tmp_path / "patched", 5)
    baseline = _experiment(invoke, store_path, tmp_path / "baseline", 1)

    # Both end "2 completed": the pass rates tell them apart.
    for lines in (patched, baseline):
        assert lines[3] == "2 completed, 0 failed of 2"  # the counts stay where they were
        assert any(line.startswith("scores ") for line in lines)
    assert any("pass rate" in line and "(2 of 2 passed)" in line for line in patched)
    assert any("pass rate" in line and "(0 of 2 passed)" in line for line in baseline)
    experiment_id = baseline[0].split()[1]
    assert baseline[-1] == (
        f"more:   envharness --store {store_path} experiments show {experiment_id}"
    )
