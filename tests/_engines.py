"""Real PostgreSQL and Ray engines for the tests that need them, started by the test set-up and
never mocked (issue 14: the store and the executor are only trusted against the real engines).

Each engine starts at most once per test process (per xdist worker), and only when a test asks
for it: the fixtures in ``tests/conftest.py`` call :func:`running_postgres` and
:func:`running_ray`, which stop their engine when the session ends. A missing engine or Python
package is a failure that says how to install it, never a skip — a green run must mean the
engines were exercised; ``-m 'not postgres'`` / ``-m 'not ray'`` deselect the tests on purpose.

PostgreSQL comes from the machine's packages (Debian's ``postgresql``): ``initdb`` and
``pg_ctl`` in a fresh temporary directory, listening on 127.0.0.1 only, on a free port, with no
Unix socket. The server refuses to run as root, so as root it runs as the ``postgres`` user
(``runuser``), with a data directory that user owns. ``fsync`` is off: these servers check what
the store does, not the disk under them, and a test that kills the server to check durability
must start one of its own with the defaults.

Ray is a local cluster of this machine's processes with two CPUs and no dashboard. Ray binds
its servers to every interface whatever it is asked (it turns 127.0.0.1 into the machine's
address), so the cluster keeps Ray's token authentication on, with a token of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POSTGRES_INSTALL = (
    "install Debian's PostgreSQL server (as root: apt-get install -y postgresql), or deselect "
    "these tests with -m 'not postgres'"
)
PSYCOPG_INSTALL = (
    "install the driver with the extra: .venv/bin/pip install -e '.[postgres]' (or "
    "python3 tools/dev.py test, which installs it), or deselect these tests with "
    "-m 'not postgres'"
)
RAY_INSTALL = (
    "install Ray with the extra: .venv/bin/pip install -e '.[ray]' (or python3 tools/dev.py "
    "test, which installs it), or deselect these tests with -m 'not ray'"
)
START_ATTEMPTS = 3
"""A free port can be taken between choosing it and the server binding it: try a new one."""
PG_CTL_WAIT_S = 60
"""How long ``pg_ctl -w`` waits for the server to accept connections (a loaded CI machine)."""
RAY_AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Where Ray looks for its authentication mode and token (set for the cluster, then restored)."""
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""Ray's shared-memory object store for the tests (its minimum is about 75 MiB)."""


class EngineUnavailable(Exception):
    """An engine a test asked for cannot be started; the message says how to install it."""


@dataclass(frozen=True)
class PostgresServer:
    """A running test server: trust authentication for ``user`` on loopback only."""

    host: str
    port: int
    user: str
    data_dir: Path
    started_in_s: float

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"


@dataclass(frozen=True)
class RayCluster:
    """A running local Ray cluster this process is connected to as its driver."""

    address: str
    started_in_s: float


DEBIAN_POSTGRESQL = Path("/usr/lib/postgresql")


def postgres_programs(path: str | None = None, debian: Path = DEBIAN_POSTGRESQL) -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: on ``path`` (``PATH``
    when None), else the newest of Debian's ``/usr/lib/postgresql/<version>/bin``, which
    Debian keeps off ``PATH``."""
    initdb = shutil.which("initdb", path=path)
    if initdb is not None and shutil.which("pg_ctl", path=path) is not None:
        return Path(initdb).resolve().parent
    versions = sorted(
        debian.glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if not versions:
        raise EngineUnavailable(
            f"PostgreSQL's initdb and pg_ctl are not on PATH nor under {debian}: {POSTGRES_INSTALL}"
        )
    return versions[-1].parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_server_user() -> tuple[list[str], str]:
    """The command prefix that runs a program as the database's owner, and that owner's name:
    nothing for an ordinary user, ``runuser -u postgres --`` for root."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        import getpass

        return [], getpass.getuser()
    runuser = shutil.which("runuser")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        runuser = None
    if runuser is None:
        raise EngineUnavailable(
            "PostgreSQL refuses to run as root, and there is no `postgres` user (or no "
            f"runuser) to run it as: {POSTGRES_INSTALL}"
        )
    return [runuser, "-u", "postgres", "--"], "postgres"


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A fresh PostgreSQL server for the duration of the block; its files are removed after."""
    programs = postgres_programs()
    prefix, user = _as_server_user()
    started = time.monotonic()
    # Not under pytest's tmp_path: that lies in root's private directory, which the postgres
    # user cannot enter.
    base = Path(tempfile.mkdtemp(prefix="envharness-pg-"))
    try:
        if prefix:
            shutil.chown(base, user="postgres")
        data = base / "data"
        _run(
            [
                *prefix,
                str(programs / "initdb"),
                "--pgdata",
                str(data),
                "--username",
                user,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C.UTF-8",
                "--no-sync",
                "--no-instructions",
            ],
            what="initdb",
        )
        try:
            port = _start(prefix, programs, data, base)
            yield PostgresServer("127.0.0.1", port, user, data, time.monotonic() - started)
        finally:  # also after a start that timed out: no server outlives the tests
            pg_ctl = [str(programs / "pg_ctl"), "--pgdata", str(data)]
            subprocess.run(
                [*prefix, *pg_ctl, "--mode", "immediate", "--wait", "stop"],
                capture_output=True,
                check=False,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _start(prefix: list[str], programs: Path, data: Path, base: Path) -> int:
    log = base / "server.log"
    for _ in range(START_ATTEMPTS):
        log.unlink(missing_ok=True)  # each attempt's own messages
        port = free_port()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
            "-c fsync=off -c full_page_writes=off -c max_connections=50"
        )
        started = subprocess.run(
            [
                *prefix,
                str(programs / "pg_ctl"),
                "--pgdata",
                str(data),
                "--log",
                str(log),
                "--options",
                options,
                "--wait",
                "--timeout",
                str(PG_CTL_WAIT_S),
                "start",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode == 0:
            return port
        said = log.read_text(errors="replace") if log.exists() else started.stderr
        if "already in use" not in said:
            raise EngineUnavailable(f"PostgreSQL did not start:\n{said[-2000:]}")
    raise EngineUnavailable(f"PostgreSQL found no free port in {START_ATTEMPTS} tries")


def _run(command: list[str], *, what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise EngineUnavailable(
            f"{what} failed (exit status {done.returncode}):\n{done.stderr[-2000:]}"
        )


@contextlib.contextmanager
def fresh_database(server: PostgresServer, prefix: str = "test") -> Iterator[str]:
    """The URL of a new, empty database on ``server``, dropped after the block (connections
    left open included): a test or module of its own, at ~0.1 s each."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield server.url(name)
    finally:
        with psycopg.connect(server.url(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def require_psycopg() -> None:
    """Fail with how to install it when the PostgreSQL driver is missing."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise EngineUnavailable(f"psycopg is not installed: {PSYCOPG_INSTALL}") from exc


@contextlib.contextmanager
def running_ray(num_cpus: int = 2) -> Iterator[RayCluster]:
    """A local Ray cluster, this process its driver, for the duration of the block.

    ``address="local"`` always starts a new cluster: never attach the tests to one a developer
    runs (``RAY_ADDRESS`` or ``ray start``). The object store is kept small (the default takes
    30% of memory) and Ray's files go to a short temporary directory of its own (its socket
    paths must stay under the OS's 107-character limit)."""
    try:
        import ray
    except ImportError as exc:
        raise EngineUnavailable(f"Ray is not installed: {RAY_INSTALL}") from exc
    if ray.is_initialized():
        raise EngineUnavailable("Ray is already initialised in this process: one cluster only")
    temp = Path(tempfile.mkdtemp(prefix="envh-ray-"))
    started = time.monotonic()
    # Token authentication stays on (Ray's default for a new local cluster, which sets
    # RAY_AUTH_MODE itself), with a token of this cluster's own: Ray would otherwise write one
    # to ~/.ray/auth_token, a world-readable file outliving the tests. Ray's processes inherit
    # the variables; they are restored when the cluster stops.
    saved = {name: os.environ.get(name) for name in RAY_AUTH_VARIABLES}
    for name in RAY_AUTH_VARIABLES:
        os.environ.pop(name, None)
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces it and shutdown leaves it
    try:
        try:
            context: Any = ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
                log_to_driver=False,
                logging_level=logging.WARNING,
                _temp_dir=str(temp),
            )
        except (RuntimeError, ConnectionError) as exc:
            ray.shutdown()  # the processes it did start
            raise EngineUnavailable(f"Ray did not start: {exc}") from exc
        cluster = RayCluster(str(context.address_info["gcs_address"]), time.monotonic() - started)
        try:
            yield cluster
        finally:
            ray.shutdown()
    finally:
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(temp, ignore_errors=True)
