"""The read queries in PostgreSQL's dialect, each returning the columns the SQLite store's row
decoders expect (:func:`~envharness.store.reader.session_info`,
:func:`~envharness.store.reader.experiment_infos`,
:func:`~envharness.store.facts.session_facts`, ...), which are reused as they are.

Where SQLite reads JSON with ``json_extract``, these read the payload as ``json`` (not
``jsonb``): ``json`` keeps an object's keys in the order they were written, and a roster's or
a score's metrics' order is part of what is shown.
"""

from __future__ import annotations

from envharness.store.optimizer_index import HARNESS_VERSIONS_QUERY, OPTIMIZER_RUNS_QUERY
from envharness.store.owners import ENDED
from envharness.store.reader import EXPERIMENT_QUERY, SESSION_COLUMNS, RecordFilter

__all__ = [
    "AMONG",
    "EXPERIMENT_MEMBERS",
    "HARNESS_VERSIONS",
    "OPTIMIZER_RUNS",
    "SESSION_COLUMNS",
    "experiment_query",
    "experiment_rows_query",
    "selected_rows_query",
    "session_facts_query",
    "sessions_query",
]

AMONG = "(SELECT unnest(%s::text[]))"
"""A SQL set of ids, bound to one array argument (a list of ids)."""

_PAYLOAD = "convert_from(payload, 'UTF8')::json"

OPTIMIZER_RUNS = OPTIMIZER_RUNS_QUERY
HARNESS_VERSIONS = HARNESS_VERSIONS_QUERY
_BY_ID_OR_PREFIX = " WHERE id = %s OR starts_with(id, %s) LIMIT 2"


def experiment_query(where: str) -> str:
    """:data:`~envharness.store.reader.EXPERIMENT_QUERY` (portable SQL) with its filter."""
    return EXPERIMENT_QUERY.format(where=where)


def by_id_or_prefix(query: str) -> str:
    """``query`` narrowed to one id or a prefix of ids (two rows at most: ambiguity shows)."""
    return query + _BY_ID_OR_PREFIX


def sessions_query(status: bool, experiment: bool) -> str:
    clauses = []
    if status:
        # Also the unended sessions of a runner that may be gone (shown by shown_status).
        ended = ", ".join(f"'{name}'" for name in sorted(ENDED))
        clauses.append(f"(status = %s OR (owner IS NOT NULL AND status NOT IN ({ended})))")
    if experiment:
        clauses.append("experiment_id = %s")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {SESSION_COLUMNS} FROM sessions{where} ORDER BY created_at, id"


EXPERIMENT_MEMBERS = (
    f"SELECT {SESSION_COLUMNS}, (SELECT json_build_array(p -> 'config' -> 'trial',"
    " p -> 'config' -> 'seed')::text"
    f" FROM records, LATERAL (SELECT {_PAYLOAD} AS p) AS decoded"
    " WHERE records.session_id = sessions.id AND records.seq = 0)"
    " FROM sessions WHERE experiment_id = %s"
)

_FACTS = (
    "SELECT id,"
    f" (SELECT {_PAYLOAD} -> 'config' -> 'environment' ->> 'name' FROM records"
    "  WHERE records.session_id = sessions.id AND records.seq = 0),"
    f" (SELECT ({_PAYLOAD} -> 'config' -> 'participants')::text FROM records"
    "  WHERE records.session_id = sessions.id AND records.seq = 0),"
    " (SELECT json_build_array(p -> 'passed', CASE WHEN json_typeof(p -> 'metrics') = 'object'"
    "   THEN p -> 'metrics' ELSE '{}'::json END)::text"
    f"  FROM records, LATERAL (SELECT {_PAYLOAD} AS p) AS decoded"
    "  WHERE records.session_id = sessions.id AND records.kind = 'score'"
    "  ORDER BY records.seq DESC LIMIT 1)"
    " FROM sessions"
)


def session_facts_query(among: bool) -> str:
    return _FACTS + (" WHERE id IN " + AMONG if among else "")


def experiment_rows_query(kinds: int, among: bool) -> str:
    """Records of some kinds, by ``pos`` range, in an experiment's chain and its sessions."""
    sessions = "SELECT id FROM sessions WHERE experiment_id = %s"
    if among:
        sessions += " AND id IN " + AMONG
    return (
        "SELECT pos, session_id, seq, kind, turn, participant, at, payload, prev, digest"
        f" FROM records WHERE pos > %s AND pos <= %s AND kind IN ({', '.join(['%s'] * kinds)})"
        f" AND session_id IN (SELECT %s UNION ALL {sessions}) ORDER BY pos LIMIT %s"
    )


def selected_rows_query(selection: RecordFilter) -> tuple[str, list[object]]:
    """A page of the rows ``selection`` picks: takes ``(session_id, after, *filters, limit)``,
    as :func:`envharness.store.reader.selected_rows_query` does for SQLite."""
    clauses = ["session_id = %s", "seq > %s"]
    filters: list[object] = []
    if selection.kinds:
        clauses.append("kind = ANY(%s)")
        filters.append(list(selection.kinds))
    if selection.participant is not None:
        clauses.append("participant = %s")
        filters.append(selection.participant)
    if selection.turn is not None:
        clauses.append("turn = %s")
        filters.append(selection.turn)
    if selection.until is not None:
        clauses.append("seq <= %s")
        filters.append(selection.until)
    query = (
        "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
        f" WHERE {' AND '.join(clauses)} ORDER BY seq LIMIT %s"
    )
    return query, filters
