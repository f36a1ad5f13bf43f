"""An optimizer run whose baseline ran out of turns says so: its reruns play the same turns, so
every score it compares judges episodes cut short."""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec import UNSET

from envharness.demos.support_desk import tickets
from envharness.optimizer import HarnessOptimizer, ScriptedEngineer
from envharness.optimizer.results import report_lines
from envharness.records import OptimizerMeasured
from tests.optimizer._loops import DO_NOTHING, chain, desk, fast


def _run(store: Path, turns: int) -> tuple[list[str], list[OptimizerMeasured]]:
    config = fast(turns=turns, candidates=1, iterations=1, alpha=None)
    result = HarnessOptimizer(desk(store), ScriptedEngineer([DO_NOTHING]), config=config).optimize(
        tickets(2)
    )
    measured = [p for p in chain(store, result.run_id) if isinstance(p, OptimizerMeasured)]
    return report_lines(result), measured


def test_a_baseline_cut_by_the_turn_limit_is_reported(tmp_path: Path) -> None:
    lines, measured = _run(tmp_path / "store", turns=1)
    [warning] = [line for line in lines if line.startswith("warning:")]
    assert warning == (
        "warning: 2 baseline sessions ended by the turn limit, not by the environment; reruns "
        "play the same turns: raise the optimizer's turns (--turns) to play whole episodes"
    )
    assert measured[0].role == "baseline"
    assert measured[0].cut == 2


def test_whole_episodes_raise_no_warning_and_seal_as_before(tmp_path: Path) -> None:
    lines, measured = _run(tmp_path / "store", turns=12)
    assert not any(line.startswith("warning:") for line in lines)
    assert measured
    # No field when no session was cut: a measurement seals the bytes it sealed before.
    assert all(m.cut is UNSET for m in measured)
    assert all(b'"cut"' not in msgspec.json.encode(m) for m in measured)
