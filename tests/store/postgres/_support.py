"""Both stores behind one opener, for the checks that must hold on each (issue 14: the store
tests run against SQLite and PostgreSQL through one parametrized fixture), and the records of
an experiment and an optimizer run to index."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from envharness.records import (
    ExperimentConfig,
    ExperimentCreated,
    OptimizerAccepted,
    OptimizerConfigRef,
    OptimizerStarted,
    OptimizerStatus,
    RecordRow,
    RunnerRef,
    SessionChain,
    new_id,
)
from envharness.store import open_store
from envharness.store.postgres import open_postgres_store
from tests import _engines
from tests.store._support import config

Opener = Callable[..., AbstractAsyncContextManager[Any]]
"""Opens a store (``create=`` as ``open_store``); another call is another runner."""

BOTH = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module")
def database(postgres_server: _engines.PostgresServer) -> Iterator[str]:
    """A database of the module's own; the store in it is shared by the module's tests, which
    therefore name their own sessions rather than count all of them."""
    with _engines.fresh_database(postgres_server, "pgstore") as url:
        yield url


def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """The store ``request.param`` names: a fresh SQLite directory, or the module's database."""
    if request.param == "sqlite":
        return lambda create=True: open_store(tmp_path / "store", create=create)
    url: str = request.getfixturevalue("database")
    return lambda create=True: open_postgres_store(url, create=create)


@asynccontextmanager
async def raw(url: str) -> AsyncIterator[psycopg.Connection[Any]]:
    """A plain psycopg connection (no envharness code), for a look or a poke at the database.
    Blocking calls on it belong in a worker thread."""
    connection = psycopg.connect(url, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


HBA_WAIT_S = 30
"""How long the server may take to read pg_hba.conf again (a wait, not a speed check)."""


def password_role_on(server: _engines.PostgresServer) -> tuple[str, str]:
    """A new role, and its password, that must give that password (the test server trusts
    everyone else): a line for it goes first in the server's pg_hba.conf, read again."""
    role, password = f"envh_pw_{secrets.token_hex(4)}", f"right-{secrets.token_hex(8)}"
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        hba = Path(server.data_dir) / "pg_hba.conf"
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        admin.execute("SELECT pg_reload_conf()")
    wrong = f"postgresql://{role}:not-the-password@{server.host}:{server.port}/postgres"
    deadline = time.monotonic() + HBA_WAIT_S
    while time.monotonic() < deadline:
        try:
            psycopg.connect(wrong).close()
        except psycopg.OperationalError:
            return role, password  # the server asks for the password now
        time.sleep(0.05)
    pytest.fail(f"the server did not read pg_hba.conf again within {HBA_WAIT_S}s")


def dead_runner() -> RunnerRef:
    """A runner on this host whose process has exited (its pid is free)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return RunnerRef(host=socket.gethostname(), pid=int(done.stdout), started=None)


def experiment_rows(name: str, sessions: int) -> tuple[SessionChain, list[RecordRow]]:
    chain = SessionChain(new_id("exp"))
    base = config()
    created = ExperimentCreated(
        config=ExperimentConfig(
            name=name,
            scenarios=(base.scenario,),
            trials=sessions,
            seed=0,
            turns=1,
            max_concurrency=1,
            environment=base.environment,
            participants=base.participants,
            envharness_version="test",
        )
    )
    return chain, [chain.seal(created)]


def optimizer_rows(name: str, version: str, patch: dict[str, Any] | None = None) -> list[RecordRow]:
    chain = SessionChain(new_id("opt"))
    base = config()
    started = OptimizerStarted(
        config=OptimizerConfigRef(
            name=name,
            environment=base.environment,
            engineer="scripted",
            engineer_version="1",
            scenarios=("scenario-1",),
        )
    )
    return [
        chain.seal(started),
        chain.seal(OptimizerStatus(status="running")),
        chain.seal(
            OptimizerAccepted(
                version=version, iteration=1, candidate=0, digest="d" * 64, patch=patch or {}
            )
        ),
    ]
