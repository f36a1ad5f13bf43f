"""Which engine holds a store, decided once from how it is named: a ``postgresql://`` (or
``postgres://``) URL is a PostgreSQL database, anything else a SQLite store directory.

The command line and other callers that take a store from a user go through here, so the rule
lives in one place. A URL is kept a string: a path would collapse its ``//``. Both stores give
the same read methods (``docs/postgresql.md``), so a caller that only reads holds either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from os import PathLike, fspath
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envharness.store.postgres import PostgresStore, open_postgres_store, read_postgres_store
from envharness.store.postgres.driver import target
from envharness.store.store import Store, open_store, read_store

__all__ = [
    "URL_SCHEMES",
    "AnyStore",
    "describe",
    "opening_store",
    "postgres_url",
    "reading_store",
    "without_password",
]

URL_SCHEMES = ("postgresql://", "postgres://")
"""The schemes libpq accepts for a connection URL."""

AnyStore = Store | PostgresStore
"""An open store of either engine, as the runtime, the API and the executors hold it. A union
rather than a Protocol: mypy then checks every call they make against both classes as they
are, so a method one engine lacks, or types differently, is an error where it is called,
without a third list of signatures to keep in step with the two."""


def postgres_url(location: str | PathLike[str]) -> str | None:
    """``location`` when it is a PostgreSQL URL (a string with one of :data:`URL_SCHEMES`,
    the scheme in any case); ``None`` for a store directory."""
    if not isinstance(location, str):
        return None
    return location if location.lower().startswith(URL_SCHEMES) else None


def describe(location: str | PathLike[str]) -> str:
    """``location`` as a message may name it: a URL without its password (it may hold one),
    a directory as given."""
    url = postgres_url(location)
    return fspath(location) if url is None else str(target(url))


def without_password(url: str) -> tuple[str, bool]:
    """``url`` as a printed command may carry it, and whether it held a password.

    Unlike :func:`describe`, the URL is kept as written (its hosts, database and query, e.g.
    ``sslmode``), so that the command reaches the same database; only the password goes, from
    the user part and from a ``password=`` query parameter. The command then connects with
    the password from ``~/.pgpass`` or ``$PGPASSWORD``, as libpq does for any URL without one.
    """
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    pairs = parts.query.split("&") if parts.query else []
    kept = [pair for pair in pairs if unquote(pair.partition("=")[0]) != "password"]
    netloc = f"{user}@{hosts}" if at and user else hosts
    # Joined by hand: urlunsplit drops an empty host, turning postgresql:///db into a path.
    query = f"?{'&'.join(kept)}" if kept else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    shareable = f"{parts.scheme}://{netloc}{parts.path}{query}{fragment}"
    return shareable, bool(colon) or len(kept) != len(pairs)


@asynccontextmanager
async def reading_store(
    location: str | PathLike[str], *, damaged: bool = False
) -> AsyncIterator[AnyStore]:
    """The store at ``location`` to read from, for the block; never creates one. ``damaged``
    is SQLite's (:func:`~envharness.store.store.read_store`): a PostgreSQL server keeps its own
    files whole, so there it changes nothing."""
    url = postgres_url(location)
    if url is None:
        yield await read_store(Path(fspath(location)), damaged=damaged)
        return
    async with read_postgres_store(url) as store:
        yield store


@asynccontextmanager
async def opening_store(
    location: str | PathLike[str], *, create: bool = True
) -> AsyncIterator[AnyStore]:
    """The store at ``location`` open for writing (its writer started, crashed runners'
    chains recovered), for the block."""
    url = postgres_url(location)
    if url is None:
        async with open_store(Path(fspath(location)), create=create) as store:
            yield store
        return
    async with open_postgres_store(url, create=create) as postgres:
        yield postgres
