"""The read queries in PostgreSQL's dialect, each returning the columns the SQLite store's row
decoders expect (:func:`~envharness.store.reader.session_info`,
:func:`~envharness.store.reader.experiment_infos`,
:func:`~envharness.store.facts.session_facts`, ...), which are reused as they are.

Where SQLite reads JSON with ``json_extract``, these read the payload as ``json`` (not
``jsonb``): ``json`` keeps an object's keys in the order they were written, and a roster's or
a score's metrics' order is part of what is shown.
"""

from __future__ import annotations

from collections.abc import Sequence

from envharness.records import RecordRow
from envharness.store import reader
from envharness.store.index_reads import ReadDialect
from envharness.store.postgres.dialect import translate
from envharness.store.reader import SESSION_COLUMNS, RecordFilter

__all__ = [
    "AMONG",
    "EXPERIMENT_MEMBERS",
    "POSTGRES_READS",
    "record_row",
    "selected_rows_query",
    "session_facts_query",
]

AMONG = "(SELECT unnest(%s::text[]))"
"""A SQL set of ids, bound to one array argument (a list of ids)."""

_PAYLOAD = "convert_from(payload, 'UTF8')::json"


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


def selected_rows_query(selection: RecordFilter) -> tuple[str, list[object]]:
    """A page of the rows ``selection`` picks: the SQLite store's statement
    (:func:`envharness.store.reader.selected_rows_query`), in psycopg's placeholders."""
    query, filters = reader.selected_rows_query(selection)
    return translate(query), filters


def record_row(raw: Sequence[object]) -> RecordRow:
    """A stored row as the SQLite store gives it (``bytea`` comes back as ``bytes``)."""
    session_id, seq, kind, turn, participant, at, payload, prev, digest = raw
    return RecordRow(
        str(session_id),
        int(str(seq)),
        str(kind),
        None if turn is None else int(str(turn)),
        None if participant is None else str(participant),
        str(at),
        bytes(payload),  # type: ignore[call-overload]
        None if prev is None else str(prev),
        str(digest),
    )


POSTGRES_READS = ReadDialect(
    placeholder="%s",
    by_id_or_prefix=" WHERE id = %s OR starts_with(id, %s) LIMIT 2",
    prefix_arguments=2,
    among=AMONG,
    among_argument=sorted,
    experiment_members=EXPERIMENT_MEMBERS,
    session_facts_query=session_facts_query,
    record_row=record_row,
)
