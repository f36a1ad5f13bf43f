"""The runtime's own session loop, unchanged, recording into the PostgreSQL store: the same
records as into SQLite, and a chain that verifies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envharness import AgentReply, AsyncEnvironmentHarness, Scenario
from envharness.fixtures import SyntheticEnvironment, SyntheticScenarioInput
from envharness.runtime.session import SessionRunner
from envharness.store import open_store
from envharness.store.postgres import open_postgres_store
from tests import _engines

pytestmark = pytest.mark.anyio

PILE = Scenario(id="pile", input=SyntheticScenarioInput(starting_total=0))


class Adder:
    implementation = "adder@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        return AgentReply({"value": 1})


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "pgruntime") as url:
        yield url


async def _run(store: Any, tmp_path: Path) -> tuple[str, str, list[tuple[str, Any, Any]]]:
    harness = AsyncEnvironmentHarness(
        tmp_path / "unused", environment=SyntheticEnvironment, agents={"alice": Adder}
    )
    plan = harness._template.plan(PILE, PILE.input, turns=3, seed=7)
    result = await SessionRunner(store, plan).run()
    rows = [(row.kind, row.turn, row.participant) async for row in store.rows(result.id)]
    return result.id, result.status, rows


async def test_a_session_runs_into_postgresql_as_into_sqlite(database: str, tmp_path: Path) -> None:
    async with open_store(tmp_path / "sqlite") as store:
        _, *expected = await _run(store, tmp_path)
    async with open_postgres_store(database) as store:
        session_id, *found = await _run(store, tmp_path)
        report = await store.verify()
        session = await store.session(session_id)
    assert found == expected
    assert found[0] == "completed"
    assert (session.status, session.turns_completed) == ("completed", 3)
    assert report.ok, report.breaks
