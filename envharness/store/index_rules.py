"""The session index's rules: what the records a transaction commits change in the derived
tables (``sessions``, ``experiments``, ``optimizer_runs``, ``harness_versions``).

One set of rules serves both engines — the SQLite journal runs them on its connection, the
PostgreSQL writer through :class:`~envharness.store.postgres.dialect.SqliteStyle` — and only how
their statements are written is the engine's choice: how existing chains' heads move
(``move_heads``: one ``UPDATE`` a chain is cheapest in process, one statement per 64 chains
across a network) and how new sessions' NULLs are bound (``insert_sessions``: as stand-ins in
process, :data:`NULL_INTEGER`; as they are where parameters are typed from the statement).
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Callable, Sequence

import msgspec

from envharness.records import (
    Branch,
    ExperimentCreated,
    ExperimentStatus,
    OptimizerAccepted,
    OptimizerStarted,
    OptimizerStatus,
    RecordRow,
    SegmentStarted,
    SessionStatus,
)

__all__ = [
    "NULL_INTEGER",
    "NULL_TEXT",
    "ROWS_PER_INSERT",
    "HeadMove",
    "NewSession",
    "insert_sessions_as_they_are",
    "insert_rows",
    "insert_sessions_standing_in",
]

ROWS_PER_INSERT = 64
"""Rows one INSERT statement carries at most (:func:`insert_rows` puts the rest of a
transaction's in statements of 32, 16, … 1)."""


class _IndexedScenario(msgspec.Struct):
    id: str


class _IndexedConfig(msgspec.Struct):
    scenario: _IndexedScenario
    experiment_id: str | None = None


class _IndexedCreation(msgspec.Struct):
    """The two fields of a ``session.created`` record that the index keeps: decoding only
    these skips building the whole config (schemas, participants, the scenario's input), four
    times the cost, on the writer's thread, once per session."""

    config: _IndexedConfig


_created_decoder = msgspec.json.Decoder(_IndexedCreation)
_status_decoder = msgspec.json.Decoder(SessionStatus)
_experiment_decoder = msgspec.json.Decoder(ExperimentCreated)
_experiment_status_decoder = msgspec.json.Decoder(ExperimentStatus)
_segment_decoder = msgspec.json.Decoder(SegmentStarted)
_branch_decoder = msgspec.json.Decoder(Branch)
_optimizer_decoder = msgspec.json.Decoder(OptimizerStarted)
_optimizer_status_decoder = msgspec.json.Decoder(OptimizerStatus)
_accepted_decoder = msgspec.json.Decoder(OptimizerAccepted)
_encode = msgspec.json.Encoder().encode

_INSERT_SESSIONS = (
    "INSERT INTO sessions (id, experiment_id, scenario_id, created_at, updated_at,"
    " turns_completed, head_seq, head_digest, status, reason, owner, parent_id, parent_seq)"
    " VALUES "
)
_SESSION_VALUES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_SESSION_STAND_INS = (
    "(?, NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?, NULLIF(?, 0), NULLIF(?, 0), NULLIF(?, 0),"
    " NULLIF(?, ''))"
)
NULL_INTEGER = ""
"""Bound for a NULL in an integer column, as ``NULLIF(?, '')``: ``sqlite3`` binds ``None``
(and ``bytes``) only after asking its adapter registry, then the statement's protocol, to
adapt it, and the protocol says no by raising and clearing an AttributeError, some 3,000
instructions a value; ``str``, ``int`` and ``bytearray`` it binds directly. SQLite compares
bare values without converting them, so no integer equals text: no value turns into NULL."""
NULL_TEXT = 0
"""Bound for a NULL in a text column, as ``NULLIF(?, 0)`` (no text equals an integer)."""


@functools.cache
def _insert_sessions(count: int) -> str:
    """The statement that inserts ``count`` sessions' index rows (at most
    :data:`ROWS_PER_INSERT`)."""
    return _INSERT_SESSIONS + ", ".join([_SESSION_VALUES] * count)


@functools.cache
def _insert_sessions_standing_in(count: int) -> str:
    """:func:`_insert_sessions` for values whose NULLs are stand-ins (:data:`NULL_TEXT`,
    :data:`NULL_INTEGER`)."""
    return _INSERT_SESSIONS + ", ".join([_SESSION_STAND_INS] * count)


_INDEXED_KINDS = frozenset(
    {
        "outcome",
        "session.created",
        "session.status",
        "segment.started",
        "segment.ended",
        "branch",
        "experiment.created",
        "experiment.status",
        "optimizer.started",
        "optimizer.status",
        "optimizer.accepted",
    }
)
"""The kinds that change an index; every other record only moves its chain's head."""
_SESSION_COLUMNS = ("status", "reason", "owner", "parent_id", "parent_seq")
"""The columns a session's records change after its creation (folded per transaction)."""
NewSession = tuple[object, ...]
"""A new session's index row: the values of :data:`_INSERT_SESSIONS`' columns, in order."""
HeadMove = tuple[str, RecordRow, int, dict[str, object]]
"""A chain's end after a transaction: its id, its last row, the highest turn its outcomes
reached (0 if none), and the session columns its records set."""


def _update_index(
    connection: sqlite3.Connection,
    rows: Sequence[RecordRow],
    move_heads: Callable[[sqlite3.Connection, Sequence[HeadMove]], None] | None = None,
    insert_sessions: Callable[[sqlite3.Connection, list[NewSession]], None] | None = None,
) -> dict[str, RecordRow]:
    """Keep the ``sessions`` table (a derived index) in step with the records just inserted;
    returns each chain's last row.

    What a session's records change is folded per chain first, so that each session costs one
    statement however many of its records arrive in the transaction (its ``session.created``
    row is inserted with its later status and owner already applied): the same rows as one
    statement per record, at a fraction of the cost. Readers never see the steps in between,
    which share the transaction. ``move_heads`` writes the chains that already existed: one
    statement each by default (SQLite), or :func:`_move_heads_together` where a statement is a
    round trip — the rules stay one, only the statements that apply them differ. So with
    ``insert_sessions``, which writes the new sessions' rows: as they are by default
    (:func:`insert_sessions_as_they_are`), or with :func:`insert_sessions_standing_in`.
    """
    heads: dict[str, RecordRow] = {}
    new_sessions: list[NewSession] = []
    turns: dict[str, int] = {}
    changed: dict[str, dict[str, object]] = {}
    created: dict[str, tuple[str | None, str, str]] = {}
    for row in rows:
        chain_id = row.session_id
        heads[chain_id] = row
        kind = row.kind
        if kind not in _INDEXED_KINDS:
            continue
        if kind == "outcome":
            if row.turn is not None and row.turn > turns.get(chain_id, 0):
                turns[chain_id] = row.turn
        elif kind == "session.created":
            config = _created_decoder.decode(row.payload).config
            created[chain_id] = (config.experiment_id, config.scenario.id, row.at)
            changed[chain_id] = {"status": "created"}
        elif kind == "session.status":
            status = _status_decoder.decode(row.payload)
            changes = changed.setdefault(chain_id, {})
            changes["status"] = status.status
            changes["reason"] = status.reason
        elif kind == "segment.started":
            runner = _segment_decoder.decode(row.payload).runner
            if runner is not None:
                changed.setdefault(chain_id, {})["owner"] = _encode(runner).decode()
        elif kind == "segment.ended":
            changed.setdefault(chain_id, {})["owner"] = None
        elif kind == "branch":
            branch = _branch_decoder.decode(row.payload)
            changes = changed.setdefault(chain_id, {})
            changes["parent_id"] = branch.parent_session
            changes["parent_seq"] = branch.checkpoint_seq
        elif kind == "experiment.created":
            experiment = _experiment_decoder.decode(row.payload).config
            total = len(experiment.scenarios) * experiment.trials
            connection.execute(
                "INSERT INTO experiments (id, name, status, total, created_at, updated_at,"
                " head_seq, head_digest) VALUES (?, ?, 'created', ?, ?, ?, ?, ?)",
                (chain_id, experiment.name, total, row.at, row.at, row.seq, row.digest),
            )
        elif kind == "experiment.status":
            change = _experiment_status_decoder.decode(row.payload)
            owner = _encode(change.runner).decode() if change.runner is not None else None
            connection.execute(
                "UPDATE experiments SET status = ?, reason = ?, owner = ? WHERE id = ?",
                (change.status, change.reason, owner, chain_id),
            )
        else:
            _index_optimizer(connection, row)
    moved: list[HeadMove] = []
    for chain_id, head in heads.items():
        changes = changed.get(chain_id, {})
        turn = turns.get(chain_id, 0)
        start = created.get(chain_id)
        if start is None:
            moved.append((chain_id, head, turn, changes))
            continue
        new_sessions.append(
            (chain_id, *start, head.at, turn, head.seq, head.digest,
             *map(changes.get, _SESSION_COLUMNS))
        )  # fmt: skip
    (move_heads or _move_heads_one_by_one)(connection, moved)
    if new_sessions:
        (insert_sessions or insert_sessions_as_they_are)(connection, new_sessions)
    return heads


def insert_sessions_as_they_are(connection: sqlite3.Connection, sessions: list[NewSession]) -> None:
    """Insert the new sessions' rows, :data:`ROWS_PER_INSERT` to a statement: one statement
    per session was the writer's last per-session hand-back of the GIL (see
    :func:`insert_rows`)."""
    flat = itertools.chain.from_iterable
    for first in range(0, len(sessions), ROWS_PER_INSERT):
        chunk = sessions[first : first + ROWS_PER_INSERT]
        connection.execute(_insert_sessions(len(chunk)), tuple(flat(chunk)))


def insert_sessions_standing_in(connection: sqlite3.Connection, sessions: list[NewSession]) -> None:
    """:func:`insert_sessions_as_they_are`, each NULL bound as its stand-in: SQLite's way (see
    :data:`NULL_INTEGER`), which a client-server engine, typing each parameter from the
    statement, would refuse."""
    values: list[object] = []
    for (chain_id, experiment, scenario, created, updated, turns, seq, digest, status,
         reason, owner, parent, parent_seq) in sessions:  # fmt: skip
        values += (
            chain_id,
            NULL_TEXT if experiment is None else experiment,
            scenario,
            created,
            updated,
            turns,
            seq,
            digest,
            status,
            NULL_TEXT if reason is None else reason,
            NULL_TEXT if owner is None else owner,
            NULL_TEXT if parent is None else parent,
            NULL_INTEGER if parent_seq is None else parent_seq,
        )
    insert_rows(connection, _insert_sessions_standing_in, 13, values)


def insert_rows(
    connection: sqlite3.Connection,
    statement: Callable[[int], str],
    width: int,
    values: list[object],
) -> None:
    """Insert the rows of ``width`` ``values`` each (``statement(n)`` inserts ``n`` of them):
    :data:`ROWS_PER_INSERT` to a statement, the rest in statements of 32, 16, … 1 rows (one
    per binary digit of their number).

    ``sqlite3`` gives up the GIL and takes it back around every statement it steps, and each
    retake waits on the event loop's thread, busy playing sessions: a statement per row paid
    that at every row, one per 64 rows pays it once for them all (and binds less). Seven
    sizes, prepared once each, stay in the connection's statement cache: a size for every
    number of rows left over was prepared again and again (SQLite prepares a statement of
    64 rows in about a third of a millisecond)."""
    rows = len(values) // width
    start = 0
    count = ROWS_PER_INSERT
    while rows:
        while count > rows:
            count >>= 1
        end = start + count * width
        connection.execute(statement(count), values[start:end])
        start = end
        rows -= count


def _move_heads_one_by_one(connection: sqlite3.Connection, moved: Sequence[HeadMove]) -> None:
    """SQLite's way: a statement per chain, which in process costs a couple of microseconds —
    less than one ``UPDATE … FROM`` over them all, which builds and joins a table first
    (measured: 2.1 against 9.4 µs for one chain, 126 against 213 µs for 64)."""
    for chain_id, head, turn, changes in moved:
        columns = [name for name in _SESSION_COLUMNS if name in changes]
        updated = connection.execute(
            "UPDATE sessions SET head_seq = ?, head_digest = ?, updated_at = ?,"
            " turns_completed = MAX(turns_completed, ?)"
            + "".join(f", {name} = ?" for name in columns)
            + " WHERE id = ?",
            (head.seq, head.digest, head.at, turn, *(changes[name] for name in columns), chain_id),
        )
        if updated.rowcount == 0:  # not a session: an experiment's chain
            updated = connection.execute(
                "UPDATE experiments SET head_seq = ?, head_digest = ?, updated_at = ? WHERE id = ?",
                (head.seq, head.digest, head.at, chain_id),
            )
        if updated.rowcount == 0:  # nor an experiment: an optimizer run's chain
            connection.execute(
                "UPDATE optimizer_runs SET head_seq = ?, head_digest = ?, updated_at = ?"
                " WHERE id = ?",
                (head.seq, head.digest, head.at, chain_id),
            )


def _move_heads_together(connection: sqlite3.Connection, moved: Sequence[HeadMove]) -> None:
    """A client-server engine's way (PostgreSQL): :data:`ROWS_PER_INSERT` chains to a
    statement, since there every statement is a round trip to the server and one per chain was
    half of a transaction's time. The chains a table does not hold go on to the next: sessions,
    then experiments, then optimizer runs. SQL both engines run (SQLite's ``UPDATE … FROM`` and
    ``RETURNING``), so tests can hold it to :func:`_move_heads_one_by_one` on either."""
    sessions: list[tuple[object, ...]] = []
    for chain_id, head, turn, changes in moved:
        set_or_keep: list[object] = []
        for name in _SESSION_COLUMNS:
            set_or_keep += (1, changes[name]) if name in changes else (0, None)
        sessions.append((chain_id, head.seq, head.digest, head.at, turn, *set_or_keep))
    rest = _heads_in(connection, _update_sessions, sessions)
    rest = _heads_in(connection, _update_chain_heads("experiments"), rest)
    _heads_in(connection, _update_chain_heads("optimizer_runs"), rest)


_SESSION_HEADS = "chain, seq, digest, at, turn, " + ", ".join(
    f"set_{name}, new_{name}" for name in _SESSION_COLUMNS
)
_SESSION_SETS = "".join(
    f", {name} = CASE WHEN v.set_{name} = 1 THEN CAST(v.new_{name} AS {kind}) ELSE {name} END"
    for name, kind in zip(_SESSION_COLUMNS, ("TEXT", "TEXT", "TEXT", "TEXT", "BIGINT"), strict=True)
)


@functools.cache
def _update_sessions(count: int) -> str:
    """The statement that moves ``count`` sessions' heads and sets the columns each one's
    records changed, keeping the others; it returns the ids it found.

    Each optional column travels as a flag and a value, since "keep it" and "set it to NULL"
    (an owner whose segment ended) must differ. The casts give PostgreSQL the types that a
    ``VALUES`` column of NULLs alone does not."""
    values = ", ".join(["(" + ", ".join(["?"] * (5 + 2 * len(_SESSION_COLUMNS))) + ")"] * count)
    return (
        f"WITH v ({_SESSION_HEADS}) AS (VALUES {values})"
        " UPDATE sessions SET head_seq = v.seq, head_digest = v.digest, updated_at = v.at,"
        " turns_completed = CASE WHEN v.turn > turns_completed THEN v.turn"
        f" ELSE turns_completed END{_SESSION_SETS}"
        " FROM v WHERE sessions.id = v.chain RETURNING sessions.id"
    )


@functools.cache
def _update_chain_heads(table: str) -> Callable[[int], str]:
    """How ``table`` (experiments or optimizer runs) moves ``count`` chains' heads in one
    statement, which returns the ids it found."""

    @functools.cache
    def statement(count: int) -> str:
        values = ", ".join(["(?, ?, ?, ?)"] * count)
        return (
            f"WITH v (chain, seq, digest, at) AS (VALUES {values})"
            f" UPDATE {table} SET head_seq = v.seq, head_digest = v.digest, updated_at = v.at"
            f" FROM v WHERE {table}.id = v.chain RETURNING {table}.id"
        )

    return statement


def _heads_in(
    connection: sqlite3.Connection,
    statement: Callable[[int], str],
    chains: Sequence[tuple[object, ...]],
) -> list[tuple[object, ...]]:
    """Run ``statement`` over ``chains`` (each its id first), :data:`ROWS_PER_INSERT` to a
    statement; returns those it did not find, as (id, seq, digest, at) for the next table."""
    if not chains:
        return []
    found: set[object] = set()
    flat = itertools.chain.from_iterable
    for first in range(0, len(chains), ROWS_PER_INSERT):
        chunk = chains[first : first + ROWS_PER_INSERT]
        cursor = connection.execute(statement(len(chunk)), tuple(flat(chunk)))
        found.update(chain for (chain,) in cursor.fetchall())
    return [chain[:4] for chain in chains if chain[0] not in found]


def _index_optimizer(connection: sqlite3.Connection, row: RecordRow) -> None:
    """An optimizer run's chain: its index entry, its status, and the versions it accepted."""
    if row.kind == "optimizer.started":
        config = _optimizer_decoder.decode(row.payload).config
        connection.execute(
            "INSERT INTO optimizer_runs (id, name, status, created_at, updated_at, head_seq,"
            " head_digest) VALUES (?, ?, 'created', ?, ?, ?, ?)",
            (row.session_id, config.name, row.at, row.at, row.seq, row.digest),
        )
    elif row.kind == "optimizer.status":
        change = _optimizer_status_decoder.decode(row.payload)
        owner = _encode(change.runner).decode() if change.runner is not None else None
        connection.execute(
            "UPDATE optimizer_runs SET status = ?, reason = ?, owner = ? WHERE id = ?",
            (change.status, change.reason, owner, row.session_id),
        )
    elif row.kind == "optimizer.accepted":
        accepted = _accepted_decoder.decode(row.payload)
        connection.execute(
            "INSERT INTO harness_versions (version, run_id, seq, parent, digest, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (accepted.version, row.session_id, row.seq, accepted.parent, accepted.digest, row.at),
        )
