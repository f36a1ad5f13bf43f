"""The store's database as one object: the way its helpers reach it, whichever engine holds it.

The helpers beside :class:`~envharness.store.store.Store` — stop and pause requests
(:mod:`.control`), service tokens (:mod:`.tokens`), snapshots and datasets (:mod:`.snapshots`),
imported sources (:mod:`.sources`) — each opened ``sqlite3`` connections on the store's
directory themselves. They now go through the :class:`SqliteBackend` the store hands them
(``Store.backend``), so that a second engine is a second backend, not an edit of every helper
(``docs/architecture.md``, "The store the runtime actually uses"). This is SQLite's: the same
connections, threads and transactions as before, behind one object.

What the helpers ask of a backend: a short read (:meth:`~SqliteBackend.read`) or a short write
in one transaction (:meth:`~SqliteBackend.write`) in a worker thread, a connection of their own
for a long transaction (:meth:`~SqliteBackend.connect`, blocking), whether the database exists
yet, and how to name the store in a message. The service and the optimizer read recorded
artifacts through it too (:meth:`~SqliteBackend.artifact`), so no caller builds a file path:
on SQLite they stay files beside the database, another engine may keep them in a table. Their
SQL is still SQLite's: a backend for another engine needs that SQL behind it too, which is the
next step.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import TypeVar

import anyio

from envharness.errors import DamagedStoreError, NotFoundError, StoreError
from envharness.store.artifacts import ArtifactFiles
from envharness.store.connections import read_in_thread, write_in_thread
from envharness.store.database import DATABASE_NAME, connect, translate_sqlite_error

__all__ = ["BackendOrPath", "SqliteBackend", "backend_of"]

_T = TypeVar("_T")


class SqliteBackend:
    """The SQLite database of the store at :attr:`directory`."""

    __slots__ = ("directory",)

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __repr__(self) -> str:
        return f"SqliteBackend({str(self.directory)!r})"

    @property
    def location(self) -> str:
        """Where the store is, as messages name it (``the store at {location!r}``)."""
        return str(self.directory)

    def exists(self) -> bool:
        """Whether the store's database exists yet (blocking: a ``stat``)."""
        return (self.directory / DATABASE_NAME).exists()

    async def read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` on a reused read-only connection, in a worker thread; a
        cancelled caller does not wait for it (reads change nothing)."""
        return await read_in_thread(self.directory, work)

    async def write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` in one ``BEGIN IMMEDIATE`` transaction on a connection of its
        own, in a worker thread; not abandoned on cancel, so the caller learns whether it
        happened."""
        return await write_in_thread(self.directory, work)

    def connect(self, *, create: bool) -> sqlite3.Connection:
        """A writable connection of the caller's own, schema migrated (blocking: call it from a
        worker thread, and close it there)."""
        return connect(self.directory, create=create)

    def translate(self, exc: sqlite3.Error) -> StoreError:
        """The store error an ``sqlite3`` error means here (busy, full, unwritable, ...)."""
        return translate_sqlite_error(exc, self.directory)

    async def artifact(self, sha256: str) -> bytes:
        """An artifact's bytes, checked against its sha256 in the worker thread that reads
        them: :class:`NotFoundError` when the store has none by that sha256,
        :class:`DamagedStoreError` when its content no longer has it."""
        files = self._artifacts()
        return await anyio.to_thread.run_sync(_checked_artifact, files, sha256, self.location)

    async def artifact_prefix(self, sha256: str, limit: int) -> bytes | None:
        """At most the first ``limit`` bytes of an artifact, unchecked (a preview); ``None``
        when it cannot be read."""
        return await anyio.to_thread.run_sync(_artifact_prefix, self._artifacts(), sha256, limit)

    def _artifacts(self) -> ArtifactFiles:
        return ArtifactFiles(self.directory / _ARTIFACTS_FOLDER)


_ARTIFACTS_FOLDER = "artifacts"
"""The folder of a SQLite store's artifact files, beside its database."""


BackendOrPath = SqliteBackend | str | PathLike[str]
"""A store's database, or the directory of a SQLite store: what the public functions that
take "the store" accept (a user names a store by its path; the service passes its backend)."""


def backend_of(where: BackendOrPath) -> SqliteBackend:
    """The backend a helper was given, or the one of the store directory it was given: callers
    outside :mod:`envharness.store` still pass a directory (the public API takes the store's
    path) until they pass ``Store.backend``."""
    return where if isinstance(where, SqliteBackend) else SqliteBackend(Path(where))


def _checked_artifact(files: ArtifactFiles, sha256: str, location: str) -> bytes:
    try:
        data = files.get(sha256)
    except FileNotFoundError:
        raise NotFoundError(
            f"artifact {sha256} is missing from the store at {location!r}; run `envharness "
            "verify` to see what else is damaged"
        ) from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise DamagedStoreError(
            f"artifact {sha256} in the store at {location!r} was modified (its content no "
            "longer has that sha256); run `envharness verify` to see what else is damaged"
        )
    return data


def _artifact_prefix(files: ArtifactFiles, sha256: str, limit: int) -> bytes | None:
    try:
        with files.path(sha256).open("rb") as stream:
            return stream.read(limit)
    except OSError:
        return None
