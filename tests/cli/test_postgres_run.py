"""``envharness --store postgresql://... run``: one session or a manifest's experiment (also in
worker processes) recorded into PostgreSQL, then listed and verified there; what the commands
print names the store without its password."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from envharness import AsyncEnvironmentHarness, Scenario
from envharness.cli.edge import resume_hint
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from tests import _engines
from tests.cli._support import Invoke
from tests.cli.test_run_manifest import manifest

SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its user, so it is only carried."""


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "clirun") as url:
        user = postgres_server.user
        yield url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)


def _sessions(invoke: Invoke, database: str, experiment: str | None = None) -> list[str]:
    listed = invoke("--store", database, "sessions", "list", "--json")
    assert listed.exit_code == 0, listed.output
    found = [json.loads(line) for line in listed.stdout.splitlines()]
    return [s["id"] for s in found if experiment is None or s["experiment_id"] == experiment]


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_a_manifest_runs_into_postgresql_and_verifies_there(
    invoke: Invoke, database: str, tmp_path: Path, workers: list[str]
) -> None:
    ran = invoke("--store", database, "run", manifest(tmp_path), *workers)

    assert ran.exit_code == 0, ran.output
    assert SECRET not in ran.output
    experiment = ran.stdout.split()[1]
    assert experiment.startswith("exp_")
    assert "envharness --store postgresql://" in ran.stdout
    assert len(_sessions(invoke, database, experiment)) == 2
    verified = invoke("--store", database, "verify")
    assert verified.exit_code == 0, verified.output
    shown = invoke("--store", database, "experiments", "show", experiment)
    assert shown.exit_code == 0, shown.output


def test_one_session_runs_into_postgresql_and_a_stop_of_it_is_refused_as_ended(
    invoke: Invoke, database: str
) -> None:
    ran = invoke(
        "--store", database, "run", "envharness.fixtures:SyntheticEnvironment",
        "--agent", "a=envharness.fixtures:SyntheticAgent", "--turns", "2",
        "--input", "{\"starting_total\": 0}",
    )  # fmt: skip

    assert ran.exit_code == 0, ran.output
    session = ran.stdout.split()[1]
    assert session in _sessions(invoke, database)
    assert "see     envharness --store postgresql://" in ran.stdout
    assert SECRET not in ran.output
    stopped = invoke("--store", database, "stop", session)
    assert stopped.exit_code != 0
    assert "is not running (it is completed)" in stopped.output


def test_a_session_paused_in_postgresql_resumes_from_the_command_line(
    invoke: Invoke, database: str
) -> None:
    harness = AsyncEnvironmentHarness(
        database, environment=SyntheticEnvironment, agents={"a": SyntheticAgent}
    )
    start = Scenario(id="cli", input=SyntheticScenarioInput(starting_total=0, target=None))
    prepared = harness.prepare(start, turns=3)
    prepared.pause()  # before it starts: recorded paused at turn 0
    paused = anyio.run(prepared.run)
    assert paused.status == "paused"

    resumed = invoke(
        "--store", database, "resume", paused.id, "envharness.fixtures:SyntheticEnvironment",
        "--agent", "a=envharness.fixtures:SyntheticAgent",
    )  # fmt: skip

    assert resumed.exit_code == 0, resumed.output
    assert f"resumed {paused.id}: completed after 3 turns" in resumed.stdout


def test_the_resume_hint_names_the_url_without_its_password() -> None:
    hint = resume_hint(f"postgresql://envh:{SECRET}@db.internal:5432/evidence", "exp_1", ["m"])
    assert hint == (
        "go on from there: envharness --store postgresql://envh@db.internal:5432/evidence "
        "resume exp_1 m"
    )
