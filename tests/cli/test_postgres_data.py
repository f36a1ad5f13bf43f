"""``--store postgresql://...`` for trajectories, snapshots and datasets: each command prints, on
a PostgreSQL store, what it prints on the SQLite store the evidence was copied from (but for
the time a snapshot or dataset was made), and what is still refused is refused by name."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from envharness.cli import app
from envharness.store import open_store
from tests import _engines
from tests.cli._support import Invoke
from tests.trajectories._support import MISS, REACH, harness

SECRET = f"secret-{secrets.token_hex(6)}"
SYNTHETIC = "envharness.fixtures:SyntheticEnvironment"
AGENT = "a=envharness.fixtures:SyntheticAgent"
_CREATED = re.compile(rb'"created_at":"[^"]*"|created \S+,')
"""When a snapshot or dataset was made: the one thing two stores may not share."""


@pytest.fixture(scope="module")
def stores(
    postgres_server: _engines.PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str, list[str]]]:
    """A SQLite store with a passed and a failed session, the database it was copied into
    (its URL carrying a password the trusting test server never checks), and the ids."""
    sqlite = tmp_path_factory.mktemp("pgdata") / "store"
    runner = harness(sqlite)
    ids = sorted([runner.run(REACH, turns=5).id, runner.run(MISS, turns=2).id])
    runner.experiment("sweep", [REACH], turns=5, trials=2).run()
    with _engines.fresh_database(postgres_server, "pgdata") as url:
        user = postgres_server.user
        url = url.replace(f"://{user}@", f"://{user}:{SECRET}@", 1)
        copied = CliRunner().invoke(app, ["copy-store", str(sqlite), url])
        assert copied.exit_code == 0, copied.output
        yield sqlite, url, ids


def _both(invoke: Invoke, stores: tuple[Path, str, list[str]], *args: str) -> bytes:
    """What ``args`` print on stdout on the SQLite store, checked to be what they print on
    the PostgreSQL one (times of making aside)."""
    sqlite, url, _ = stores
    on_sqlite, on_postgres = invoke("--store", sqlite, *args), invoke("--store", url, *args)
    assert on_sqlite.exit_code == 0, on_sqlite.output
    assert on_postgres.exit_code == 0, on_postgres.output
    assert _CREATED.sub(b"", on_postgres.stdout_bytes) == _CREATED.sub(b"", on_sqlite.stdout_bytes)
    assert SECRET not in on_postgres.output
    return on_sqlite.stdout_bytes


def test_trajectory_snapshot_and_dataset_commands_say_the_same_of_both_stores(
    invoke: Invoke, stores: tuple[Path, str, list[str]]
) -> None:
    _, _, ids = stores
    listed = _both(invoke, stores, "trajectories")
    assert all(session_id.encode() in listed for session_id in ids)
    assert len(_both(invoke, stores, "trajectories", "--json").splitlines()) >= 2
    _both(invoke, stores, "trajectories", ids[0][:-3])

    created = _both(
        invoke, stores, "snapshot", "create", *ids, "--entitle-training", "own evaluation data"
    )
    snapshot = created.decode().strip()
    assert snapshot.startswith("snp_")
    assert snapshot.encode() in _both(invoke, stores, "snapshot", "list", "--json")
    assert b"(verified)" in _both(invoke, stores, "snapshot", "show", snapshot[:12])
    exported = _both(invoke, stores, "export", "snapshot", snapshot)
    assert exported.count(b'"type":"record"') > 10

    [experiment] = [
        json.loads(line)["id"]
        for line in _both(invoke, stores, "experiments", "list", "--json").splitlines()
    ]
    swept = _both(invoke, stores, "snapshot", "create", "--experiment", experiment)
    shown = _both(invoke, stores, "snapshot", "show", swept.decode().strip())
    assert shown.count(b"\nses_") == 2  # the experiment's two trials

    assert _both(invoke, stores, "dataset", "create", "sft", snapshot).startswith(b"dst_")
    assert b"sft" in _both(invoke, stores, "dataset", "list")
    rows = _both(invoke, stores, "dataset", "export", "sft")
    assert len(rows.splitlines()) == 2


async def _empty_store(path: Path) -> None:
    async with open_store(path):
        pass


def test_bad_input_is_named_and_an_empty_import_log_said_without_the_password(
    invoke: Invoke,
    stores: tuple[Path, str, list[str]],
    postgres_server: _engines.PostgresServer,
    tmp_path: Path,
) -> None:
    _, url, _ = stores
    unknown = invoke("--store", url, "trajectories", "ses_nope")
    no_snapshot = invoke("--store", url, "export", "snapshot", "snp_ffffffff")
    imported = invoke("--store", url, "trajectories", "--origin", "imported")
    sources = invoke("--store", url, "sources")
    with _engines.fresh_database(postgres_server, "pgdataempty") as empty:
        bare = empty.replace(f"://{postgres_server.user}@", f"://{postgres_server.user}:{SECRET}@")
        anyio.run(_empty_store, tmp_path / "empty")  # copy-store carries snapshots along
        assert invoke("copy-store", tmp_path / "empty", bare).exit_code == 0
        nothing = invoke("--store", bare, "snapshot", "list")

    for result in (unknown, no_snapshot):
        assert result.exit_code != 0
        assert SECRET not in result.output
    assert "ses_nope" in unknown.stderr
    assert "no snapshot 'snp_ffffffff'" in no_snapshot.stderr
    for result in (imported, sources):  # nothing imported here: said so, not refused
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
        assert result.stdout == "", result.stdout
        assert "postgresql://" in result.stderr, result.stderr
    assert nothing.exit_code == 0
    assert "no snapshots in postgresql://" in nothing.stderr
    assert SECRET not in nothing.output


def test_checkpoint_branch_and_continue_say_the_same_of_both_stores(
    invoke: Invoke, stores: tuple[Path, str, list[str]]
) -> None:
    sqlite, url, ids = stores
    said: list[list[str]] = []
    for store in (sqlite, url):
        taken = invoke("--store", store, "checkpoint", ids[1], "--label", "before")
        assert taken.exit_code == 0, taken.output
        name = taken.stdout.split()[1]
        branched = invoke(
            "--store", store, "branch", name, SYNTHETIC,
            "--intervention", '{"kind": "reset-total", "value": 0}', "--reason", "at target",
        )  # fmt: skip
        assert branched.exit_code == 0, branched.output
        child = branched.stdout.split()[1]
        continued = invoke(
            "--store", store, "continue", child, SYNTHETIC, "--agent", AGENT, "--turns", "2"
        )
        assert continued.exit_code == 0, continued.output
        assert SECRET not in taken.output + branched.output + continued.output
        said.append([out.stdout.replace(child, "CHILD") for out in (taken, branched, continued)])
    assert said[1] == said[0]
    assert said[0][2] == "continued CHILD: completed after 3 turns\n"  # at its target at once
