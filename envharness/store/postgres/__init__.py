"""The evidence store in PostgreSQL (``envharness[postgres]``): several runners on several hosts
writing to one database at once, one viewer reading it.

:mod:`.driver` (connections, and errors that never hold a password), :mod:`.schema` (tables and
forward-only migrations), :mod:`.dialect` (the SQLite store's index rules run unchanged),
:mod:`.ownership` (owner locks: crash detection across hosts), :mod:`.writer` (one writer per
runner, group commit, positions in commit order), :mod:`.readers`, :mod:`.queries`,
:mod:`.liveness` (a reader's view of who is gone), :mod:`.recovery`, :mod:`.verify`,
:mod:`.store` (``open_postgres_store``, ``read_postgres_store``) and :mod:`.copy`
(``copy_store``, SQLite to PostgreSQL and back). psycopg is imported only when a store is
opened, so this package imports without the extra.
"""

from envharness.store.postgres.schema import SCHEMA_VERSION
from envharness.store.postgres.store import (
    PostgresStore,
    open_postgres_store,
    read_postgres_store,
)

__all__ = ["SCHEMA_VERSION", "PostgresStore", "open_postgres_store", "read_postgres_store"]
