"""SQLite schema, forward-only migrations, and how every connection to a store is opened.

The store uses the standard library's ``sqlite3`` from worker threads (``anyio.to_thread``),
never ``aiosqlite``: aiosqlite is bound to asyncio, and envharness must run under trio too.
``docs/architecture.md`` records that decision.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from envharness.errors import StoreBusyError, StoreError, StoreLayoutError, StoreVersionError
from envharness.store.blobs import add_sql_functions
from envharness.store.damage import open_failure, refuse_damage
from envharness.store.handles import open_connection
from envharness.store.off_loop import refuse_event_loop
from envharness.store.wal import MARK_SUFFIX, check_after_open, check_before_open
from envharness.store.walscan import WAL_SUFFIX

__all__ = [
    "BUSY_TIMEOUT_S",
    "DATABASE_NAME",
    "SCHEMA_VERSION",
    "connect",
    "migrate",
    "translate_sqlite_error",
    "unwritable_store",
]

DATABASE_NAME = "evidence.sqlite3"
BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's write transaction before giving up."""

# Each entry upgrades the schema by one version; never edit a released entry, append a new one.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id              TEXT PRIMARY KEY,
        experiment_id   TEXT,
        scenario_id     TEXT NOT NULL,
        status          TEXT NOT NULL,
        reason          TEXT,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        turns_completed INTEGER NOT NULL DEFAULT 0,
        head_seq        INTEGER NOT NULL,
        head_digest     TEXT NOT NULL
    );
    CREATE INDEX sessions_by_experiment ON sessions (experiment_id, created_at);
    CREATE TABLE records (
        pos         INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        turn        INTEGER,
        participant TEXT,
        at          TEXT NOT NULL,
        payload     BLOB NOT NULL,
        prev        TEXT,
        digest      TEXT NOT NULL,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX records_by_kind ON records (session_id, kind, seq);
    CREATE TRIGGER records_are_append_only_update BEFORE UPDATE ON records
        BEGIN SELECT RAISE(ABORT, 'evidence records are append-only'); END;
    CREATE TRIGGER records_are_append_only_delete BEFORE DELETE ON records
        BEGIN SELECT RAISE(ABORT, 'evidence records are append-only'); END;
    CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        data   BLOB NOT NULL
    ) WITHOUT ROWID;
    """,
    # 2: bearer tokens for the local service (envharness.store.tokens). Not evidence: rows are
    # updated when revoked. Only the sha256 of each secret is kept.
    """
    CREATE TABLE tokens (
        id            TEXT PRIMARY KEY,
        secret_sha256 TEXT NOT NULL UNIQUE,
        role          TEXT NOT NULL CHECK (role IN ('admin', 'viewer', 'participant')),
        participant   TEXT,
        sessions      TEXT,
        label         TEXT NOT NULL DEFAULT '',
        created_at    TEXT NOT NULL,
        expires_at    TEXT,
        revoked_at    TEXT,
        CHECK ((role = 'participant') = (participant IS NOT NULL))
    );
    """,
    # 3: experiments: an index of experiment chains (their records are evidence, this is not).
    """
    CREATE TABLE experiments (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        status      TEXT NOT NULL,
        reason      TEXT,
        total       INTEGER NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        head_seq    INTEGER NOT NULL,
        head_digest TEXT NOT NULL
    );
    CREATE INDEX experiments_by_time ON experiments (created_at);
    """,
    # 4: the runner of each live segment (JSON of RunnerRef), so a crashed owner is found at once.
    """
    ALTER TABLE sessions ADD COLUMN owner TEXT;
    ALTER TABLE experiments ADD COLUMN owner TEXT;
    CREATE INDEX sessions_owned ON sessions (owner) WHERE owner IS NOT NULL;
    CREATE INDEX experiments_owned ON experiments (owner) WHERE owner IS NOT NULL;
    """,
    # 5: lineage: a branch's parent session and checkpoint, queryable both ways.
    """
    ALTER TABLE sessions ADD COLUMN parent_id TEXT;
    ALTER TABLE sessions ADD COLUMN parent_seq INTEGER;
    CREATE INDEX sessions_by_parent ON sessions (parent_id) WHERE parent_id IS NOT NULL;
    """,
    # 6: snapshots and datasets (envharness.store.snapshots): content-addressed, append-only.
    # The id is the sha256 of the stored bytes, so a row cannot change without its id changing.
    """
    CREATE TABLE snapshots (
        id         TEXT PRIMARY KEY,
        header     BLOB NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE snapshot_trajectories (
        snapshot_id TEXT NOT NULL,
        position    INTEGER NOT NULL,
        session_id  TEXT NOT NULL,
        trajectory  BLOB NOT NULL,
        PRIMARY KEY (snapshot_id, position)
    ) WITHOUT ROWID;
    CREATE INDEX snapshot_trajectories_by_session ON snapshot_trajectories (session_id);
    CREATE TABLE datasets (
        name       TEXT PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,
        content    BLOB NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TRIGGER snapshots_are_immutable_update BEFORE UPDATE ON snapshots
        BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END;
    CREATE TRIGGER snapshots_are_immutable_delete BEFORE DELETE ON snapshots
        BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END;
    CREATE TRIGGER snapshot_trajectories_are_immutable_update BEFORE UPDATE
        ON snapshot_trajectories
        BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END;
    CREATE TRIGGER snapshot_trajectories_are_immutable_delete BEFORE DELETE
        ON snapshot_trajectories
        BEGIN SELECT RAISE(ABORT, 'snapshots are immutable'); END;
    CREATE TRIGGER datasets_are_immutable_update BEFORE UPDATE ON datasets
        BEGIN SELECT RAISE(ABORT, 'datasets are immutable'); END;
    CREATE TRIGGER datasets_are_immutable_delete BEFORE DELETE ON datasets
        BEGIN SELECT RAISE(ABORT, 'datasets are immutable'); END;
    """,
    # 7: sources: imported external records (envharness.store.sources). Each source keeps its own
    # hash chain; records and the import log are append-only, `sources` is an index of heads.
    """
    CREATE TABLE sources (
        id            TEXT PRIMARY KEY,
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL,
        head_position INTEGER NOT NULL,
        head_hash     TEXT NOT NULL
    );
    CREATE TABLE source_imports (
        id               TEXT PRIMARY KEY,
        source           TEXT NOT NULL,
        at               TEXT NOT NULL,
        format           TEXT NOT NULL,
        importer         TEXT NOT NULL,
        origin           TEXT NOT NULL,
        training         INTEGER NOT NULL,
        first_position   INTEGER,
        last_position    INTEGER,
        stored           INTEGER NOT NULL,
        duplicates       INTEGER NOT NULL,
        status           TEXT NOT NULL CHECK (status IN ('stored', 'duplicate', 'refused')),
        problem          TEXT,
        problem_kind     TEXT,
        problem_position INTEGER
    );
    CREATE INDEX source_imports_by_source ON source_imports (source, at);
    CREATE TABLE source_records (
        pos            INTEGER PRIMARY KEY,
        source         TEXT NOT NULL,
        position       INTEGER NOT NULL,
        schema_version INTEGER NOT NULL,
        episode        TEXT NOT NULL,
        kind           TEXT NOT NULL,
        turn           INTEGER,
        participant    TEXT,
        at             TEXT NOT NULL,
        payload        BLOB NOT NULL,
        prev           TEXT,
        hash           TEXT NOT NULL,
        import_id      TEXT NOT NULL,
        UNIQUE (source, position)
    );
    CREATE INDEX source_records_by_episode ON source_records (source, episode, position);
    CREATE INDEX source_records_by_kind ON source_records (source, kind, position);
    CREATE TRIGGER source_records_are_append_only_update BEFORE UPDATE ON source_records
        BEGIN SELECT RAISE(ABORT, 'imported records are append-only'); END;
    CREATE TRIGGER source_records_are_append_only_delete BEFORE DELETE ON source_records
        BEGIN SELECT RAISE(ABORT, 'imported records are append-only'); END;
    CREATE TRIGGER source_imports_are_append_only_update BEFORE UPDATE ON source_imports
        BEGIN SELECT RAISE(ABORT, 'the import log is append-only'); END;
    CREATE TRIGGER source_imports_are_append_only_delete BEFORE DELETE ON source_imports
        BEGIN SELECT RAISE(ABORT, 'the import log is append-only'); END;
    """,
    # 8: optimizer runs (an index of their chains, like experiments) and the harness versions they
    # accepted (an index of their optimizer.accepted records). Evidence stays in the records.
    """
    CREATE TABLE optimizer_runs (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        status      TEXT NOT NULL,
        reason      TEXT,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        head_seq    INTEGER NOT NULL,
        head_digest TEXT NOT NULL,
        owner       TEXT
    );
    CREATE TABLE harness_versions (
        version    TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        parent     TEXT,
        digest     TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX harness_versions_by_run ON harness_versions (run_id, seq);
    """,
    # 9: requests from another process to stop or pause a running session or experiment
    # (envharness.store.control). Operational state, not evidence: a row is updated when its
    # runner takes it or its asker withdraws it; what the stop or pause did is in the records.
    """
    CREATE TABLE control_requests (
        id           INTEGER PRIMARY KEY,
        target       TEXT NOT NULL,
        verb         TEXT NOT NULL CHECK (verb IN ('stop', 'pause')),
        runner       TEXT NOT NULL,
        asked_by     TEXT NOT NULL,
        asked_at     TEXT NOT NULL,
        taken_at     TEXT,
        withdrawn_at TEXT
    );
    CREATE INDEX control_requests_pending ON control_requests (runner)
        WHERE taken_at IS NULL AND withdrawn_at IS NULL;
    """,
    # 10: blobs kept compressed (envharness.store.blobs), each row saying how (`codec`,
    # raw by default), in a rowid table: a WITHOUT ROWID table spills rows over ~1 KB into
    # overflow pages left mostly empty. The digest stays the sha256 of the uncompressed bytes.
    # Each row is written once, compressed on the way (envharness_zlib: NULL when compressing
    # does not make it smaller, or it is not bytes), then the rest are copied as they are.
    # `LIMIT -1` keeps SQLite from flattening the subquery, which would compress twice.
    """
    CREATE TABLE blobs_kept (
        digest TEXT PRIMARY KEY NOT NULL,
        codec  INTEGER NOT NULL DEFAULT 0,
        data   BLOB NOT NULL
    );
    INSERT INTO blobs_kept (digest, codec, data)
        SELECT digest, 1, packed
        FROM (SELECT digest, envharness_zlib(data) AS packed FROM blobs LIMIT -1)
        WHERE packed IS NOT NULL ORDER BY digest;
    INSERT INTO blobs_kept (digest, data)
        SELECT digest, data FROM blobs WHERE digest NOT IN (SELECT digest FROM blobs_kept)
        ORDER BY digest;
    DROP TABLE blobs;
    ALTER TABLE blobs_kept RENAME TO blobs;
    """,
)
SCHEMA_VERSION = len(_MIGRATIONS)


def connect(directory: Path, *, create: bool) -> sqlite3.Connection:
    """Open the store's database in autocommit mode with WAL and full durability.

    Raises :class:`StoreLayoutError` when ``directory`` is a file or (with ``create=False``)
    holds no store, :class:`StoreVersionError` when a newer program wrote it, and
    :class:`WalDamageError` when opening it would lose acknowledged commits (checked before
    SQLite recovers its write-ahead log: :mod:`envharness.store.wal`).

    A new store is its owner's alone: the folder 0700, the database 0600 (SQLite gives its
    ``-wal`` and ``-shm`` files the database's mode), whatever the umask. A store that could not
    be created is removed again, so no empty database is left behind.
    """
    refuse_event_loop("connect()")  # before anything touches the file: never on a loop
    if directory.exists() and not directory.is_dir():
        raise StoreLayoutError(
            f"store path {str(directory)!r} is a file; a store is a directory "
            "(pass --store with a directory path, new or existing)"
        )
    database = directory / DATABASE_NAME
    if not create and not database.exists():
        raise StoreLayoutError(
            f"no evidence store at {str(directory)!r} (no {DATABASE_NAME} there); "
            "check --store, or run a session first to create it"
        )
    if database.exists():
        check_before_open(database)
    made: list[Path] = []
    try:
        made = _make_folders(directory)
        if _make_database(database):
            made.append(database)
        # Counted for its file (envharness.store.handles): the header checks read the file
        # without closing a descriptor that this process's SQLite locks depend on.
        connection = open_connection(database, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        _remove_new(made)
        raise unwritable_store(directory) or StoreLayoutError(
            f"cannot open the store at {str(directory)!r}: {exc}"
        ) from exc
    try:
        _prepare_patiently(connection, directory)
    except BaseException as exc:
        connection.close()
        if not _is_busy_error(exc):  # busy: another process is making the same store
            _remove_new(made)
            if made and _is_full(exc):
                raise StoreError(
                    f"cannot create the store at {str(directory)!r}: the disk is full "
                    "(nothing was left behind); free some space on it and run again"
                ) from exc
        if (damage := open_failure(directory / DATABASE_NAME, exc)) is not None:
            raise damage from exc
        if isinstance(exc, sqlite3.Error):
            raise _open_error(exc, directory) from exc
        raise
    return connection


def _prepare(connection: sqlite3.Connection, directory: Path) -> None:
    # Refuse a damaged store (header, implausible schema version: envharness.store.damage) and
    # a newer one before anything below (journal mode, migrations) can write to it.
    refuse_damage(connection, directory / DATABASE_NAME, _MIGRATIONS)
    found = _user_version(connection)
    if found > SCHEMA_VERSION:
        raise _newer_store(directory, found)
    check_after_open(connection, directory / DATABASE_NAME)
    if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise StoreLayoutError(
                f"the store at {str(directory)!r} cannot use write-ahead logging (SQLite kept "
                f"journal mode {mode!r}); put the store on a local filesystem"
            )
    # FULL: a commit is on disk before it is acknowledged; group commit amortises the fsync.
    connection.execute("PRAGMA synchronous=FULL")
    migrate(connection, directory)


def _prepare_patiently(connection: sqlite3.Connection, directory: Path) -> None:
    """:func:`_prepare`, retried while another process holds a lock, up to the busy timeout.

    SQLite answers some lock conflicts at open time with an immediate ``SQLITE_BUSY`` instead
    of calling the busy handler — switching a new database to WAL while another process does
    the same, or reading one while another recovers its WAL — so those are retried here. Every
    step is idempotent.
    """
    refuse_event_loop("connect()")
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.002
    while True:
        try:
            _prepare(connection, directory)
            return
        except (sqlite3.OperationalError, StoreBusyError) as exc:
            busy = isinstance(exc, StoreBusyError) or _is_busy(exc)
            if not busy or time.monotonic() + pause > deadline:
                raise
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def migrate(connection: sqlite3.Connection, directory: Path) -> None:
    """Bring the schema up to :data:`SCHEMA_VERSION`; refuse a store from the future."""
    found = _user_version(connection)
    if found == SCHEMA_VERSION:
        return
    if found > SCHEMA_VERSION:
        raise _newer_store(directory, found)
    try:
        connection.execute("BEGIN IMMEDIATE")
        found = _user_version(connection)  # another process may have migrated meanwhile
        if found > SCHEMA_VERSION:
            raise _newer_store(directory, found)
        add_sql_functions(connection)
        for script in _MIGRATIONS[found:]:
            for statement in _statements(script):
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException as exc:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise translate_sqlite_error(exc, directory) from exc
        raise


def translate_sqlite_error(exc: sqlite3.Error, directory: Path) -> StoreError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        return StoreBusyError(
            f"the store at {str(directory)!r} stayed locked by another process for more than "
            f"{BUSY_TIMEOUT_S:g}s; wait for it to finish or stop it, then retry"
        )
    if "readonly database" in message or "unable to open database file" in message:
        unwritable = unwritable_store(directory)
        if unwritable is not None:
            return unwritable
    if _is_full(exc):
        return _disk_full(directory, message)
    return StoreError(f"the store at {str(directory)!r} failed: {message}")


def _disk_full(directory: Path, message: str) -> StoreError:
    """A full disk, with what to free: the commit that met it was rolled back whole, so
    nothing acknowledged is lost. Going on needs room for the write-ahead log to be copied
    into the database (a checkpoint grows the database by up to the log's size)."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    try:
        log = os.stat(directory / f"{DATABASE_NAME}{WAL_SUFFIX}").st_size
    except OSError:
        log = 0
    needed = log + (1 << 20)
    free_now = "" if free is None else f"; {_size(free)} free"
    held = f" (its write-ahead log holds {_size(log)}, which SQLite copies into the database)"
    return StoreError(
        f"the disk holding the store at {str(directory)!r} is full ({message}{free_now}). "
        "Nothing acknowledged was lost: the commit that needed the space was rolled back "
        "whole, and every record acknowledged before it is in the store. Free at least "
        f"{_size(needed)} on that disk{held if log else ''}, then run again; a session this "
        "interrupted resumes from its last committed turn (`envharness resume SESSION`)"
    )


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count / 1024:.0f} KiB"


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _is_full(exc: BaseException) -> bool:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL


def _is_busy_error(exc: BaseException) -> bool:
    return isinstance(exc, StoreBusyError) or (isinstance(exc, sqlite3.Error) and _is_busy(exc))


def _make_folders(directory: Path) -> list[Path]:
    """Create the store folder (0700, whatever the umask) and any missing parents; return the
    folders made, outermost first. An existing folder keeps the mode it has."""
    missing = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    if directory in missing:
        os.chmod(directory, 0o700)
    return missing[::-1]


def _make_database(database: Path) -> bool:
    """Create an empty database file, mode 0600, unless there is one; ``True`` if made here.

    Made as a temporary file (``mkstemp``: 0600), closed, then linked into place: no file
    descriptor of the database is ever closed by this process, which would release the
    advisory locks its SQLite connections hold on it (POSIX locks belong to the process).
    An acknowledged-commits mark left by a store deleted before is not the new store's.
    """
    if database.exists():
        return False
    handle, temporary = tempfile.mkstemp(dir=database.parent, prefix=".new-store-")
    os.close(handle)
    try:
        os.link(temporary, database)
    except FileExistsError:
        return False  # another process made it first
    finally:
        os.unlink(temporary)
    Path(f"{database}{MARK_SUFFIX}").unlink(missing_ok=True)
    return True


def _remove_new(made: list[Path]) -> None:
    """Remove what a failed creation made: the database and what SQLite put beside it, then
    the folders, innermost first (only while empty)."""
    for path in reversed(made):
        if path.is_dir():
            try:
                path.rmdir()
            except OSError:
                return
        else:
            for suffix in ("", WAL_SUFFIX, "-shm", MARK_SUFFIX):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _open_error(exc: sqlite3.Error, directory: Path) -> StoreError:
    """What opening the database failed on, as a store error that says which file is wrong."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB:
        return StoreLayoutError(
            f"{str(directory / DATABASE_NAME)!r} is not an envharness store (not an SQLite "
            "database); point --store at a store directory or at a new, empty one"
        )
    if not _is_busy(exc) and (unwritable := unwritable_store(directory)) is not None:
        return unwritable
    return translate_sqlite_error(exc, directory)


def unwritable_store(directory: Path) -> StoreLayoutError | None:
    """Why a store that exists could not be opened or written, when permissions are why.

    SQLite writes beside the database (its ``-wal`` and ``-shm`` files), so the directory and
    the database must both be writable. ``None`` when permissions are not the problem.
    """
    database = directory / DATABASE_NAME
    if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
        return StoreLayoutError(
            f"cannot open the store at {str(directory)!r}: the directory is not writable by "
            "this user, and SQLite needs to create files there (evidence.sqlite3-wal, -shm); "
            "give this user write permission on it (e.g. chmod u+w, or chown), or pass "
            "another --store"
        )
    if database.is_file() and not os.access(database, os.R_OK | os.W_OK):
        return StoreLayoutError(
            f"cannot open the store at {str(directory)!r}: {str(database)!r} is not readable "
            "and writable by this user; give this user read and write permission on it "
            "(e.g. chmod u+rw, or chown), or pass another --store"
        )
    return None


def _user_version(connection: sqlite3.Connection) -> int:
    row = connection.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _newer_store(directory: Path, found: int) -> StoreVersionError:
    return StoreVersionError(
        f"the store at {str(directory)!r} has schema version {found}, newer than the "
        f"{SCHEMA_VERSION} this envharness understands; upgrade envharness to open it "
        "(nothing was changed)"
    )


def _statements(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (``BEGIN … END;``) whole."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
