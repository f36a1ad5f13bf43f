"""``optimize --workers N --capacity C``: N worker processes in all, split among the C reruns at
once (one each at N = C), never N for each rerun."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.cli._support import Invoke
from tests.optimizer._loops import DO_NOTHING, LOOK_UP_FIRST
from tests.runtime.executors._runners import worker_pids

DESK = "envharness.demos.support_desk"


@pytest.fixture
def answers(tmp_path: Path) -> Path:
    """Two distinct valid candidates: two reruns at once at capacity 2."""
    written = tmp_path / "answers.json"
    written.write_text(json.dumps([DO_NOTHING, LOOK_UP_FIRST]))
    return written


def _optimize(invoke: Invoke, store: Path, answers: Path, *more: str) -> tuple[str, str]:
    result = invoke(
        "--store", store, "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", answers, "--scenarios", f"{DESK}:tickets",
        "--turns", "8", "--sandbox", "local", "--iterations", "1", "--candidates", "2", *more,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "harness-v1" in result.stdout
    return result.stdout, result.stderr


def test_two_workers_at_capacity_two_are_two_processes_one_per_rerun(
    invoke: Invoke, tmp_path: Path, answers: Path
) -> None:
    store = tmp_path / "store"
    _, said = _optimize(invoke, store, answers, "--workers", "2", "--capacity", "2")
    assert "is more than the executor's" not in said
    baseline, first, second = anyio.run(worker_pids, store).values()
    assert len(first | second | baseline) == 2  # each rerun taking two would make four
    assert len(first) == len(second) == 1
    assert first != second  # at once, one worker each


def test_fewer_workers_than_capacity_run_fewer_reruns_at_once_and_say_so(
    invoke: Invoke, tmp_path: Path, answers: Path
) -> None:
    store = tmp_path / "store"
    _, said = _optimize(invoke, store, answers, "--workers", "1", "--capacity", "2")
    assert (
        "capacity 2 is more than the executor's 1 worker, and a worker serves one rerun at a "
        "time: 1 rerun runs at once (give 2 workers to run 2)"
    ) in said
    ran_in = anyio.run(worker_pids, store)
    assert len(set().union(*ran_in.values())) == 1  # one process for every rerun
