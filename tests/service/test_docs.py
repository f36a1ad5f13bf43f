"""The Python examples in docs/api.md run against the real app."""

from __future__ import annotations

import pytest

from tests.service._support import World, api_doc_examples, run_api_doc_example


def test_the_api_docs_python_examples_run(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the rest: test_trajectory_api.py and test_harness_api.py
    sessions, experiments, lineage, *_ = api_doc_examples()
    run_api_doc_example(sessions, world, monkeypatch)
    printed = capsys.readouterr().out.splitlines()
    assert any(line.endswith("blocked") for line in printed)
    assert printed[-1].split()[1] == "segment.ended"
    run_api_doc_example(experiments, world, monkeypatch)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("quickstart sweep 10 of 10 {('warm-up', 0): 'completed', ")
    assert [line.split()[0] for line in printed[1:]].count("SessionCreatedEvent") == 10
    assert printed[-1].startswith("ExperimentStatusEvent  ")
    run_api_doc_example(lineage, world, monkeypatch)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith(" {'kind': 'reset-total', 'value': 0} what if the total were reset")
    assert printed[1].split() == ["total", "-4.0", "->", "-2.0"]
    assert "observation" in printed[-1]
