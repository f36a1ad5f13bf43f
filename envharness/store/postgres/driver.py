"""How a connection to a PostgreSQL store is made, and what a failure to make one says.

psycopg 3's blocking connection, always from a worker thread: its async connection (and
asyncpg) need asyncio, and envharness runs under trio too (``docs/architecture.md``). A URL may
carry a password; no message, log line or chained traceback built here ever holds it — errors
name the user, host, port and database instead, which is what a person needs to fix them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from envharness.errors import StoreError
from envharness.store.off_loop import refuse_event_loop

__all__ = [
    "INSTALL",
    "KEEPALIVES",
    "Connection",
    "Target",
    "connect",
    "failure",
    "psycopg_module",
    "target",
]

INSTALL = "pip install 'envharness[postgres]'"
KEEPALIVES: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
"""Connection settings unless the URL sets its own: TCP keepalives, so that a runner on a host
that drops off the network is noticed by the server (and its owner locks freed) in about a
minute, not after hours; and a bound on connecting, so an unreachable server is an error
within seconds instead of a long hang of the writer."""

Connection = Any
"""A ``psycopg.Connection``; psycopg is an optional dependency, so it is not named here."""


def psycopg_module() -> ModuleType:
    """psycopg, or a :class:`StoreError` that says which extra installs it."""
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            f"a postgresql:// store needs the PostgreSQL driver, which is not installed: {INSTALL}"
        ) from exc
    return psycopg


class Target:
    """Where a URL points, without its password: what every message names."""

    __slots__ = ("database", "host", "port", "user")

    def __init__(self, user: str, host: str, port: str, database: str) -> None:
        self.user = user
        self.host = host
        self.port = port
        self.database = database

    def __str__(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"


def target(url: str) -> Target:
    """The user, host, port and database ``url`` names (libpq's defaults where it names none);
    a URL libpq cannot parse is a :class:`StoreError` that does not repeat it."""
    psycopg = psycopg_module()
    unparsable = StoreError(
        "the PostgreSQL store URL cannot be parsed; write it as "
        "postgresql://USER@HOST:PORT/DATABASE, with any '@' in the user or password written "
        "%40 (better: put the password in ~/.pgpass or PGPASSWORD rather than in the URL)"
    )
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise unparsable from None
    if "@" in str(parts.get("host") or ""):
        # libpq splits at the first '@', so a password with a raw '@' leaves its tail in the
        # host, which every message names: refused before anything can repeat it.
        raise unparsable
    import getpass
    import os

    user = str(parts.get("user") or os.environ.get("PGUSER") or getpass.getuser())
    host = str(parts.get("host") or os.environ.get("PGHOST") or "localhost")
    port = str(parts.get("port") or os.environ.get("PGPORT") or "5432")
    database = str(parts.get("dbname") or os.environ.get("PGDATABASE") or user)
    return Target(user, host, port, database)


def connect(url: str) -> Connection:
    """A new autocommit connection (blocking: call it in a worker thread)."""
    refuse_event_loop("connecting to PostgreSQL")
    psycopg = psycopg_module()
    where = target(url)
    parts = psycopg.conninfo.conninfo_to_dict(url)
    options = {name: value for name, value in KEEPALIVES.items() if name not in parts}
    options.setdefault("application_name", "envharness")
    try:
        return psycopg.connect(url, autocommit=True, **options)
    except psycopg.Error as exc:  # a refused login, and a bad option (connect_timeout=abc)
        secret = parts.get("password")
        # ``from None``: psycopg's own error is replaced, not chained, so nothing it held
        # travels on in a traceback.
        raise connect_error(where, str(exc), None if secret is None else str(secret)) from None


def connect_error(where: Target, said: str, secret: str | None) -> StoreError:
    """Why connecting to ``where`` failed, with the fix; ``secret`` is scrubbed from ``said``."""
    reason = said.strip().splitlines()[-1].strip() if said.strip() else "no reason given"
    if secret:
        reason = reason.replace(secret, "***")
    reason = reason.removeprefix("connection failed: ")
    lowered = reason.lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        fix = (
            f"check the password of role {where.user!r} (in ~/.pgpass, PGPASSWORD or the URL) "
            "or ask the database's administrator to set it"
        )
    elif "database" in lowered and "does not exist" in lowered:
        fix = (
            f"create it first (createdb -h {where.host} -p {where.port} -U {where.user} "
            f"{where.database}) or name an existing database in the URL"
        )
    elif "role" in lowered and "does not exist" in lowered:
        fix = f"create the role {where.user!r} (CREATE ROLE ... LOGIN) or name another user"
    elif "pg_hba.conf" in lowered:
        fix = "the server refuses this user from this host: add a line for it to pg_hba.conf"
    else:
        fix = f"check that the server at {where.host}:{where.port} runs and accepts connections"
    return StoreError(
        f"cannot connect to the PostgreSQL store {where} (user {where.user!r}, host "
        f"{where.host!r}, port {where.port}, database {where.database!r}): {reason}; {fix}"
    )


def failure(where: Target, exc: BaseException, *, who: str) -> StoreError:
    """The store error a psycopg error means, naming the store without its password and only
    the first line of the server's text. A refused privilege names the role and what ``who``
    (a runner, this command) needs, since that is what the user must fix."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, psycopg_module().errors.InsufficientPrivilege):
        return StoreError(
            f"the PostgreSQL store {where} refused role {where.user!r}: {reason}; {who} needs "
            "the grants docs/postgresql.md lists, so grant them or give a URL with a role that "
            "has them"
        )
    return StoreError(f"the PostgreSQL store {where} failed: {reason}")
