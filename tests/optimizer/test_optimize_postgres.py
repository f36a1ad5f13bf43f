"""The optimizer on a PostgreSQL store: the same seeds make the same decisions, accept the same
patch and record the same evidence as on SQLite; what a run recorded reads back there (its
chain, failure packets, versions, history, ``verify``); ``envharness --store postgresql://...
optimize`` in this process and with ``--workers``; and a role that may not write, or a database
that does not exist, is refused with a clear error that never shows the password."""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from envharness import AsyncEnvironmentHarness
from envharness.cli import app
from envharness.demos.support_desk import RefundFirstPolicy, SupportDesk, tickets
from envharness.optimizer import (
    HarnessOptimizer,
    OptimizationConfig,
    OptimizationResult,
    ScriptedEngineer,
)
from envharness.optimizer.history import run_history
from envharness.optimizer.loop import BESIDE_A_DATABASE
from envharness.optimizer.runlog import PACKET_NAME, read_packet, read_run
from envharness.optimizer.versions import harness_version
from envharness.records import Artifact, OptimizerMeasured, OptimizerStatus, Record
from envharness.store.locate import AnyStore, reading_store
from envharness.store.postgres import open_postgres_store
from tests import _engines
from tests.cli._support import Invoke
from tests.optimizer._loops import DO_NOTHING, LOOK_UP_FIRST

SECRET = f"secret-{secrets.token_hex(6)}"
"""A password in the URL: the test server trusts its users, so it is only carried."""
DESK = "envharness.demos.support_desk"
SCENARIOS = 6
"""Tickets: the fewest with which the gate can pass for two candidates at alpha 0.05."""
CONFIG = OptimizationConfig(
    candidates=2, iterations=1, turns=8, seed=3, capacity=1, sandbox="local"
)
"""One candidate at a time, so the run's chain lists its measurements in one order."""
_ID = re.compile(r"\b(?:ses|exp|opt)_[0-9a-f]{22}\b")
VARYING = {"runner", "seconds", "directory", "created_at"}
"""What differs between any two runs held still: the process, clocks and the run directory
(under each store); ids are replaced by the order they first appear in."""


def held_still(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: held_still(v, ids) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list | tuple):
        return [held_still(v, ids) for v in value]
    if isinstance(value, str):
        return _ID.sub(lambda found: ids.setdefault(found[0], f"id-{len(ids)}"), value)
    return value


def with_password(url: str, role: str) -> str:
    """``url`` as ``role``, with :data:`SECRET` as its password."""
    return re.sub(r"://[^@]*@", f"://{role}:{SECRET}@", url, count=1)


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    with _engines.fresh_database(postgres_server, "optpg") as url:
        yield with_password(url, postgres_server.user)


def _optimize(
    store: str | Path, directory: Path, backend: str = "asyncio"
) -> tuple[OptimizationResult, list[str]]:
    said: list[str] = []
    harness = AsyncEnvironmentHarness(
        store, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )
    optimizer = HarnessOptimizer(
        harness,
        ScriptedEngineer([DO_NOTHING, LOOK_UP_FIRST]),
        config=dataclasses.replace(CONFIG, directory=directory),
        progress=said.append,
    )
    result = anyio.run(lambda: optimizer.optimize_async(tickets(SCENARIOS)), backend=backend)
    return result, said


@pytest.fixture(scope="module")
def optimized(
    postgres_server: _engines.PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[str | Path, OptimizationResult, list[str]]]]:
    """The same optimization recorded into SQLite on asyncio and, on trio, into a database of
    its own (so that its version names, and the runs it lists, are this run's whatever else
    the module runs)."""
    with _engines.fresh_database(postgres_server, "optsame") as url:
        found: dict[str, tuple[str | Path, OptimizationResult, list[str]]] = {}
        for name, store, backend in (
            ("sqlite", tmp_path_factory.mktemp("optsqlite") / "store", "asyncio"),
            ("postgres", with_password(url, postgres_server.user), "trio"),
        ):
            result, said = _optimize(store, tmp_path_factory.mktemp(f"{name}-run"), backend)
            found[name] = (store, result, said)
        yield found


def _recorded(store: str | Path, run_id: str) -> list[Any]:
    """Every rerun's sessions (each rerun's ordered by scenario), then the run's chain, held
    still. Candidates rerun concurrently, so the chain lists their measurements in the order
    they ended — which the scheduler decides (trio shuffles it even at capacity 1): the reruns
    and those records are taken in (iteration, role, candidate) order, the records without
    their place in the chain. A failure packet names sessions, so its bytes differ with their
    ids: it is compared by its content, held still."""

    async def read() -> list[Any]:
        ids = {run_id: "run"}
        found: list[Any] = []
        async with reading_store(store) as reader:
            _, memo = await read_run(reader, run_id)
            for measured in sorted(memo.measured, key=_measurement_order):
                assert measured.experiment_id is not None
                members = await reader.sessions(experiment_id=measured.experiment_id)
                for info in sorted(members, key=lambda info: info.scenario_id or ""):
                    chain = reader.records(info.id)
                    found.append([await _held(reader, record, ids) async for record in chain])
            records = [record async for record in reader.records(run_id)]
            found.append(
                [
                    await _held(reader, record, ids)
                    for record in records
                    if not isinstance(record.payload, OptimizerMeasured)
                ]
            )
            measurements = [r.payload for r in records if isinstance(r.payload, OptimizerMeasured)]
            measurements.sort(key=_measurement_order)
            found.append([held_still(msgspec.to_builtins(m), ids) for m in measurements])
        return found

    return anyio.run(read)


def _measurement_order(measured: OptimizerMeasured) -> tuple[int, str, int]:
    candidate = -1 if measured.candidate is None else measured.candidate
    return measured.iteration, measured.role, candidate


async def _held(reader: AnyStore, record: Record, ids: dict[str, str]) -> Any:
    payload = msgspec.to_builtins(record.payload)
    if isinstance(record.payload, Artifact) and record.payload.name == PACKET_NAME:
        payload["sha256"] = msgspec.to_builtins(await read_packet(reader, record.payload))
    return held_still([record.seq, record.kind, record.turn, record.participant, payload], ids)


def test_the_same_seeds_decide_and_record_the_same_on_postgresql_as_on_sqlite(
    optimized: dict[str, tuple[str | Path, OptimizationResult, list[str]]],
) -> None:
    here, there = optimized["sqlite"][1], optimized["postgres"][1]
    assert there.accepted_version == here.accepted_version == "harness-v1"
    assert (there.baseline.passed, there.final.passed) == (0, SCENARIOS)
    ids: dict[str, str] = {}
    as_here = held_still(msgspec.to_builtins(here), ids)
    assert held_still(msgspec.to_builtins(there), {}) == as_here
    recorded = {
        name: _recorded(store, result.run_id) for name, (store, result, _) in optimized.items()
    }
    assert len(recorded["postgres"]) == 3 * SCENARIOS + 2  # baseline, two candidates, the run
    assert recorded["postgres"] == recorded["sqlite"]


def test_what_the_run_recorded_reads_back_from_postgresql(
    optimized: dict[str, tuple[str | Path, OptimizationResult, list[str]]],
) -> None:
    sqlite, here, _ = optimized["sqlite"]
    database, there, said = optimized["postgres"]

    async def read(store: str | Path, run_id: str) -> tuple[Any, ...]:
        async with reading_store(store) as reader:
            _, memo = await read_run(reader, run_id)
            packet = await read_packet(reader, memo.packets[1])
            version = await harness_version(reader, "harness-v1")
            history = await run_history(reader, run_id)
            runs = [run.id for run in await reader.optimizer_runs()]
            verified = await reader.verify()
        return packet, version.patch, history.status, len(history.iterations), runs, verified.ok

    packet, patch, status, iterations, runs, ok = anyio.run(read, database, there.run_id)
    packet_here, patch_here = anyio.run(read, sqlite, here.run_id)[:2]
    assert patch == patch_here
    assert held_still(msgspec.to_builtins(packet), {}) == held_still(
        msgspec.to_builtins(packet_here), {}
    )
    assert (status, iterations, runs, ok) == ("completed", 1, [there.run_id], True)
    assert patch == there.patch
    assert not any(SECRET in line for line in said)


class Crash(RuntimeError):
    pass


def test_a_crashed_run_resumes_on_postgresql_and_keeps_its_files_in_the_working_directory(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing measured is measured again, nothing answered is asked again; a database has no
    folder beside it, so the run's files go to the working directory."""
    monkeypatch.chdir(tmp_path)
    harness = AsyncEnvironmentHarness(
        database, environment=SupportDesk, agents={"alice": RefundFirstPolicy}
    )

    def crash_once_answered(line: str) -> None:
        if line.startswith("iteration 1: 2 answer(s)"):  # recorded: now crash
            raise Crash("the machine went down")

    engineer = ScriptedEngineer([DO_NOTHING, LOOK_UP_FIRST])
    crashing = HarnessOptimizer(harness, engineer, config=CONFIG, progress=crash_once_answered)
    with pytest.raises(Crash):
        anyio.run(lambda: crashing.optimize_async(tickets(SCENARIOS)))
    run_id = crashing.run_id
    assert run_id is not None
    again = ScriptedEngineer([])  # answers nothing: iteration 1's answers come from evidence
    resuming = HarnessOptimizer(harness, again, config=CONFIG)
    result = anyio.run(lambda: resuming.resume_async(run_id, tickets(SCENARIOS)))
    assert again.packets == []
    assert (result.run_id, result.final.passed) == (run_id, SCENARIOS)
    assert result.accepted_version is not None
    assert Path(result.directory) == tmp_path / BESIDE_A_DATABASE / run_id
    assert (Path(result.directory) / "report.json").is_file()

    async def statuses() -> tuple[list[str], int]:
        async with reading_store(database) as reader:
            _, memo = await read_run(reader, run_id)
            found = [
                record.payload.status
                async for record in reader.records(run_id)
                if isinstance(record.payload, OptimizerStatus)
            ]
            return found, len(memo.measured)

    assert anyio.run(statuses) == (["running", "failed", "running", "completed"], 3)


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """``envharness ARGS`` in this process; the caller's ENVHARNESS_STORE never leaks in."""
    monkeypatch.delenv("ENVHARNESS_STORE", raising=False)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(arg) for arg in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    written = tmp_path_factory.mktemp("answers") / "answers.json"
    written.write_text(json.dumps([LOOK_UP_FIRST]))
    return written


def _optimize_command(store: str, answers: Path, *more: str) -> list[str]:
    return [
        "--store", store, "optimize",
        "--environment", f"{DESK}:SupportDesk", "--agent", f"alice={DESK}:RefundFirstPolicy",
        "--engineer", "scripted", "--answers", str(answers), "--scenarios", f"{DESK}:tickets",
        "--turns", "8", "--sandbox", "local", "--iterations", "1", "--candidates", "1",
        "--json", *more,
    ]  # fmt: skip


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["here", "workers"])
def test_optimize_records_into_postgresql_from_the_command_line(
    invoke: Invoke,
    database: str,
    answers: Path,
    workers: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    ran = invoke(*_optimize_command(database, answers, *workers))
    assert ran.exit_code == 0, ran.output
    assert SECRET not in ran.output
    result = json.loads(ran.stdout)
    version = result["accepted_version"]
    assert version.startswith("harness-v")
    assert result["final"]["passed"] == result["final"]["total"] == 8
    assert Path(result["directory"]).parent == tmp_path / BESIDE_A_DATABASE
    shown = invoke("--store", database, "harness", "show", version, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["run_id"] == result["run_id"]
    runs = invoke("--store", database, "harness", "runs")
    assert result["run_id"] in runs.stdout


@pytest.fixture(scope="module")
def read_only(postgres_server: _engines.PostgresServer, database: str) -> str:
    """The module's database as a role that may only read it (its store set up first by the
    owner, whichever tests ran before)."""

    async def set_up() -> None:
        async with open_postgres_store(database):
            pass

    anyio.run(set_up)
    role = f"envh_ro_{secrets.token_hex(4)}"
    with psycopg.connect(re.sub(r"://[^@]*@", f"://{postgres_server.user}@", database)) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )
    return with_password(database, role)


def test_a_role_that_may_not_write_is_refused_by_name(
    invoke: Invoke, read_only: str, answers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    refused = invoke(*_optimize_command(read_only, answers))
    assert refused.exit_code == 2
    role = read_only.split("://")[1].split(":")[0]
    assert f"refused role {role!r}: permission denied for table " in refused.stderr
    assert "a runner needs the grants docs/postgresql.md lists" in refused.stderr
    assert SECRET not in refused.output


def test_a_database_that_does_not_exist_is_refused_by_name(
    invoke: Invoke, database: str, answers: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = database.rsplit("/", 1)[0] + "/no_such_database"
    refused = invoke(*_optimize_command(missing, answers))
    assert refused.exit_code == 2
    assert 'database "no_such_database" does not exist; create it first' in refused.stderr
    assert SECRET not in refused.output
    assert not (tmp_path / BESIDE_A_DATABASE).exists()
