"""``harness.sources()``: imports, health and imported trajectories from the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness import AsyncSources, EnvironmentHarness
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment
from envharness.trajectories.sources import SourceChain, SourceConflictError
from tests.trajectories.sources._support import AT, OTEL_FIXTURE, SOURCE, episode, write_lines


@pytest.mark.anyio
async def test_the_async_face_imports_and_reports(store_path: Path, tmp_path: Path) -> None:
    sources = AsyncSources(store_path)
    receipt = await sources.import_records(SOURCE, episode(SourceChain(SOURCE)), training=True)
    assert receipt.stored == 5
    otel = await sources.import_file("otel/agent", OTEL_FIXTURE, format="otel-genai")
    assert otel.stored == 5
    piped = await sources.import_lines(
        "acme/piped", OTEL_FIXTURE.read_bytes().splitlines(), format="otel-genai"
    )
    assert piped.stored == 5
    assert [health.source for health in await sources.health()] == [
        "acme/nightly-evals", "acme/piped", "otel/agent",
    ]  # fmt: skip
    [trajectory] = await sources.trajectories(SOURCE)
    assert trajectory.provenance.training is True
    assert len(await sources.trajectories()) == 3


def test_the_blocking_face_works_inside_an_open_harness(store_path: Path, tmp_path: Path) -> None:
    chain = SourceChain(SOURCE)
    path = write_lines(tmp_path / "run.jsonl", episode(chain))
    with EnvironmentHarness(
        store_path, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    ) as harness:
        sources = harness.sources()
        assert sources.import_file(SOURCE, path).stored == 5
        assert sources.import_file(SOURCE, path).duplicates == 5
        conflicting = SourceChain(SOURCE).seal("run-1", "note", {}, at=AT)
        with pytest.raises(SourceConflictError):
            sources.import_records(SOURCE, [conflicting])
        [health] = sources.health(SOURCE)
        assert (health.head_position, health.refused) == (4, 1)
        assert [t.session_id for t in sources.trajectories()] == [f"{SOURCE}:run-1"]
