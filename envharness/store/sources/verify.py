"""``verify`` over imported sources: every chain and its acknowledged head, from the bytes."""

from __future__ import annotations

from typing import Any, NamedTuple

from envharness.store.sources.chain import COLUMNS, SourceRow, chain_problem, position_span

__all__ = ["SourceBreak", "verify_sources"]


class SourceBreak(NamedTuple):
    """One problem in a source's stored chain: the source, the position (``None``: the chain
    as a whole) and what is wrong."""

    chain: str
    position: int | None
    problem: str


def verify_sources(
    connection: Any, only: str | None = None, *, begin: str | None = "BEGIN"
) -> tuple[int, int, list[SourceBreak]]:
    """Re-check every source's chain (or ``only`` that one) and its acknowledged head, in one
    read transaction.

    ``connection`` is a ``sqlite3`` connection or, on PostgreSQL, a
    :class:`~envharness.store.postgres.dialect.SqliteStyle`, with ``begin`` the statement that
    starts a read transaction there (:class:`~envharness.store.sources.reads.Dialect`), or
    ``None`` inside the caller's own (PostgreSQL's ``verify`` reads the sessions' chains and
    the sources' in one snapshot). Returns the number of chains and records checked and each
    problem found, by source and position (a tampered row is reported, never raised).
    """
    breaks: list[SourceBreak] = []
    total = 0
    arguments = (only,) if only is not None else ()
    index_where, records_where = (" WHERE id = ?", " WHERE source = ?") if arguments else ("", "")
    if begin is not None:
        connection.execute(begin)
    try:
        heads = {
            str(row[0]): (row[1], row[2])
            for row in connection.execute(
                f"SELECT id, head_position, head_hash FROM sources{index_where}", arguments
            )
        }
        chains = sorted(
            {*heads, *(str(row[0]) for row in connection.execute(
                f"SELECT DISTINCT source FROM source_records{records_where}", arguments
            ))}
        )  # fmt: skip
        for source in chains:
            total += _verify_source(connection, source, heads.get(source), breaks)
    finally:
        if begin is not None:
            connection.execute("COMMIT")
    return len(chains), total, breaks


def _verify_source(
    connection: Any,
    source: str,
    head: tuple[object, object] | None,
    breaks: list[SourceBreak],
) -> int:
    previous: SourceRow | None = None
    count = 0
    cursor = connection.execute(
        f"SELECT {COLUMNS} FROM source_records WHERE source = ? ORDER BY position", (source,)
    )
    while page := cursor.fetchmany(2000):
        for raw in page:
            count += 1
            row = SourceRow(*raw)
            if not _typed(row):
                breaks.append(
                    SourceBreak(source, None, f"a record holds a wrong SQL type: {raw!r}")
                )
                previous = None
                continue
            expected = 0 if previous is None else previous.position + 1
            if row.position != expected:
                missing = position_span(expected, row.position - 1)
                breaks.append(
                    SourceBreak(source, expected,
                                f"position(s) {missing} missing before position {row.position}")
                )  # fmt: skip
            found = chain_problem(previous if row.position == expected else None, row, stored=True)
            if found is not None:
                breaks.append(SourceBreak(source, row.position, found[1]))
            previous = row
    last = previous.position if previous is not None else -1
    if head is None:
        breaks.append(SourceBreak(source, None, "records exist but the sources index has no entry"))
    elif head[0] != last or (previous is not None and head[1] != previous.hash):
        breaks.append(
            SourceBreak(
                source,
                last if last >= 0 else None,
                f"the chain ends at position {last} (hash {previous.hash if previous else None})"
                f" but the acknowledged head is position {head[0]} (hash {head[1]})",
            )
        )  # fmt: skip
    return count


def _typed(row: SourceRow) -> bool:
    return (
        type(row.position) is int
        and type(row.schema_version) is int
        and isinstance(row.payload, bytes)
        and all(isinstance(value, str) for value in (row.source, row.episode, row.kind, row.at))
        and all(isinstance(value, str) for value in (row.hash,))
        and (row.prev is None or isinstance(row.prev, str))
        and (row.turn is None or type(row.turn) is int)
        and (row.participant is None or isinstance(row.participant, str))
    )
