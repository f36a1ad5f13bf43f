"""The PostgreSQL store's tables and forward-only migrations, its version in a one-row table.

The tables are the SQLite store's (:mod:`envharness.store.database`), in PostgreSQL's types:
``TEXT`` → ``text``, ``BLOB`` → ``bytea``, ``INTEGER`` → ``bigint``, so that every query and
index rule keeps its meaning. The first migration is the SQLite schema as it stood at its
version 9; later changes are appended here as they are there, never edited once released.

Two runners opening one new database at once migrate it once: the migration runs under a
session-level advisory lock, and the version is read again once the lock is held. Records are
append-only by trigger (``UPDATE``, ``DELETE`` and ``TRUNCATE`` raise), whatever role writes.
"""

from __future__ import annotations

from envharness.errors import StoreError, StoreLayoutError, StoreVersionError
from envharness.store.postgres.driver import Connection, Target, failure, psycopg_module

__all__ = ["LOCKS", "SCHEMA_VERSION", "current_version", "migrate", "refuse_unreadable"]


class LOCKS:
    """Advisory lock keys in the two-integer key space (``pg_advisory_lock(int, int)``), which
    PostgreSQL keeps apart from the one-``bigint`` space that sessions' owner locks use."""

    NAMESPACE = 0x656E76  # "env"
    POSITIONS = 1
    MIGRATION = 2
    SOURCE_IMPORTS = NAMESPACE + 1
    """The first key of a source's import lock; the second is a digest of the source's name
    (:mod:`envharness.store.sources.store`)."""


def _append_only(table: str, what: str) -> str:
    return f"""
    CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION envharness_refuse_change('{what}');
    CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION envharness_refuse_change('{what}');
    """


_MIGRATIONS: tuple[str, ...] = (
    # 1: the SQLite store's schema at its version 9.
    """
    CREATE FUNCTION envharness_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% (% refused)', TG_ARGV[0], TG_OP
            USING ERRCODE = 'integrity_constraint_violation';
    END $$;
    CREATE TABLE sessions (
        id              text PRIMARY KEY,
        experiment_id   text,
        scenario_id     text NOT NULL,
        status          text NOT NULL,
        reason          text,
        created_at      text NOT NULL,
        updated_at      text NOT NULL,
        turns_completed bigint NOT NULL DEFAULT 0,
        head_seq        bigint NOT NULL,
        head_digest     text NOT NULL,
        owner           text,
        parent_id       text,
        parent_seq      bigint
    );
    CREATE INDEX sessions_by_experiment ON sessions (experiment_id, created_at);
    CREATE INDEX sessions_owned ON sessions (owner) WHERE owner IS NOT NULL;
    CREATE INDEX sessions_by_parent ON sessions (parent_id) WHERE parent_id IS NOT NULL;
    CREATE TABLE records (
        pos         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id  text NOT NULL,
        seq         bigint NOT NULL,
        kind        text NOT NULL,
        turn        bigint,
        participant text,
        at          text NOT NULL,
        payload     bytea NOT NULL,
        prev        text,
        digest      text NOT NULL,
        CONSTRAINT records_chain_position UNIQUE (session_id, seq)
    );
    CREATE INDEX records_by_kind ON records (session_id, kind, seq);
    CREATE TABLE blobs (
        digest text PRIMARY KEY,
        data   bytea NOT NULL
    );
    CREATE TABLE artifacts (
        sha256 text PRIMARY KEY,
        data   bytea NOT NULL
    );
    CREATE TABLE tokens (
        id            text PRIMARY KEY,
        secret_sha256 text NOT NULL UNIQUE,
        role          text NOT NULL CHECK (role IN ('admin', 'viewer', 'participant')),
        participant   text,
        sessions      text,
        label         text NOT NULL DEFAULT '',
        created_at    text NOT NULL,
        expires_at    text,
        revoked_at    text,
        CHECK ((role = 'participant') = (participant IS NOT NULL))
    );
    CREATE TABLE experiments (
        id          text PRIMARY KEY,
        name        text NOT NULL,
        status      text NOT NULL,
        reason      text,
        total       bigint NOT NULL,
        created_at  text NOT NULL,
        updated_at  text NOT NULL,
        head_seq    bigint NOT NULL,
        head_digest text NOT NULL,
        owner       text
    );
    CREATE INDEX experiments_by_time ON experiments (created_at);
    CREATE INDEX experiments_owned ON experiments (owner) WHERE owner IS NOT NULL;
    CREATE TABLE snapshots (
        id         text PRIMARY KEY,
        header     bytea NOT NULL,
        created_at text NOT NULL
    );
    CREATE TABLE snapshot_trajectories (
        snapshot_id text NOT NULL,
        position    bigint NOT NULL,
        session_id  text NOT NULL,
        trajectory  bytea NOT NULL,
        PRIMARY KEY (snapshot_id, position)
    );
    CREATE INDEX snapshot_trajectories_by_session ON snapshot_trajectories (session_id);
    CREATE TABLE datasets (
        name       text PRIMARY KEY,
        id         text NOT NULL UNIQUE,
        content    bytea NOT NULL,
        created_at text NOT NULL
    );
    CREATE TABLE sources (
        id            text PRIMARY KEY,
        created_at    text NOT NULL,
        updated_at    text NOT NULL,
        head_position bigint NOT NULL,
        head_hash     text NOT NULL
    );
    CREATE TABLE source_imports (
        id               text PRIMARY KEY,
        source           text NOT NULL,
        at               text NOT NULL,
        format           text NOT NULL,
        importer         text NOT NULL,
        origin           text NOT NULL,
        training         bigint NOT NULL,
        first_position   bigint,
        last_position    bigint,
        stored           bigint NOT NULL,
        duplicates       bigint NOT NULL,
        status           text NOT NULL CHECK (status IN ('stored', 'duplicate', 'refused')),
        problem          text,
        problem_kind     text,
        problem_position bigint
    );
    CREATE INDEX source_imports_by_source ON source_imports (source, at);
    CREATE TABLE source_records (
        pos            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        source         text NOT NULL,
        position       bigint NOT NULL,
        schema_version bigint NOT NULL,
        episode        text NOT NULL,
        kind           text NOT NULL,
        turn           bigint,
        participant    text,
        at             text NOT NULL,
        payload        bytea NOT NULL,
        prev           text,
        hash           text NOT NULL,
        import_id      text NOT NULL,
        UNIQUE (source, position)
    );
    CREATE INDEX source_records_by_episode ON source_records (source, episode, position);
    CREATE INDEX source_records_by_kind ON source_records (source, kind, position);
    CREATE TABLE optimizer_runs (
        id          text PRIMARY KEY,
        name        text NOT NULL,
        status      text NOT NULL,
        reason      text,
        created_at  text NOT NULL,
        updated_at  text NOT NULL,
        head_seq    bigint NOT NULL,
        head_digest text NOT NULL,
        owner       text
    );
    CREATE TABLE harness_versions (
        version    text PRIMARY KEY,
        run_id     text NOT NULL,
        seq        bigint NOT NULL,
        parent     text,
        digest     text NOT NULL,
        created_at text NOT NULL
    );
    CREATE INDEX harness_versions_by_run ON harness_versions (run_id, seq);
    CREATE TABLE control_requests (
        id           bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        target       text NOT NULL,
        verb         text NOT NULL CHECK (verb IN ('stop', 'pause')),
        runner       text NOT NULL,
        asked_by     text NOT NULL,
        asked_at     text NOT NULL,
        taken_at     text,
        withdrawn_at text
    );
    CREATE INDEX control_requests_pending ON control_requests (runner)
        WHERE taken_at IS NULL AND withdrawn_at IS NULL;
    """
    + _append_only("records", "evidence records are append-only")
    + _append_only("blobs", "state blobs are append-only")
    + _append_only("artifacts", "artifacts are append-only")
    + _append_only("snapshots", "snapshots are immutable")
    + _append_only("snapshot_trajectories", "snapshots are immutable")
    + _append_only("datasets", "datasets are immutable")
    + _append_only("source_records", "imported records are append-only")
    + _append_only("source_imports", "the import log is append-only"),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_VERSION_TABLE = "envharness_schema"
_READ_VERSION = f"SELECT version FROM {_VERSION_TABLE}"


def current_version(connection: Connection, where: Target) -> int | None:
    """The schema version of the connected database; ``None`` when it holds no store.

    It is the first table any command reads, so a role without grants is refused here, by
    name and with where the grants are listed, rather than as the driver's bare error."""
    found = connection.execute("SELECT to_regclass(%s)", (_VERSION_TABLE,)).fetchone()
    if found is None or found[0] is None:
        return None
    try:
        row = connection.execute(_READ_VERSION).fetchone()
    except psycopg_module().errors.InsufficientPrivilege as exc:
        raise failure(where, exc, who="every role that opens the store") from None
    return None if row is None else int(row[0])


def migrate(connection: Connection, where: Target, *, create: bool) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` (blocking; the connection in autocommit).

    Refuses a newer store (nothing changed) and, without ``create``, a database that holds no
    store."""
    found = current_version(connection, where)
    if found == SCHEMA_VERSION:
        return
    _refuse(found, where, create=create)
    psycopg = psycopg_module()
    lock = (LOCKS.NAMESPACE, LOCKS.MIGRATION)
    connection.execute("SELECT pg_advisory_lock(%s, %s)", lock)
    try:
        found = current_version(connection, where)  # another runner may have migrated meanwhile
        if found == SCHEMA_VERSION:
            return
        _refuse(found, where, create=create)
        start = found or 0
        with connection.transaction():
            if found is None:
                connection.execute(
                    f"CREATE TABLE {_VERSION_TABLE} (one boolean PRIMARY KEY DEFAULT true"
                    " CHECK (one), version bigint NOT NULL)"
                )
                connection.execute(f"INSERT INTO {_VERSION_TABLE} (version) VALUES (0)")
            for script in _MIGRATIONS[start:]:
                connection.execute(script)
            connection.execute(f"UPDATE {_VERSION_TABLE} SET version = %s", (SCHEMA_VERSION,))
    except psycopg.Error as exc:
        # The first line only: the rest quotes the DDL at length.
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StoreError(
            f"the PostgreSQL store {where} could not be brought to schema version "
            f"{SCHEMA_VERSION} (nothing was changed): {reason}; the role "
            f"{where.user!r} needs CREATE on the database's schema to set it up"
        ) from None
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s, %s)", lock)


def refuse_unreadable(found: int | None, where: Target) -> None:
    """Refuse a database whose schema version (``found``) cannot be read: none, or newer."""
    _refuse(found, where, create=False)


def _refuse(found: int | None, where: Target, *, create: bool) -> None:
    if found is not None and found > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the PostgreSQL store {where} has schema version {found}, newer than the "
            f"{SCHEMA_VERSION} this envharness understands; upgrade envharness to open it "
            "(nothing was changed)"
        )
    if found is None and not create:
        raise StoreLayoutError(
            f"the PostgreSQL database {where} holds no envharness store (no {_VERSION_TABLE} "
            "table); check the URL, or run a session first to create it"
        )
