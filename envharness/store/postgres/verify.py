"""Re-check a PostgreSQL store: every chain's records, head, blobs and artifacts, and every
imported source's chain.

One ``REPEATABLE READ`` transaction: the chains, their committed heads and their records are
read in one snapshot, so sessions may be written while it runs and a record appended meanwhile
is neither checked nor mistaken for a break. The SQLite store's file checks (header,
``quick_check``, the write-ahead log and its acknowledged mark) have no counterpart here: the
server guards its own files, and its columns hold only values of their declared types. What
each record must satisfy is the same: a dense ``seq``, its ``prev`` link, its digest recomputed
over the stored bytes, a payload that decodes to its ``kind``, and the state blobs and
artifacts it cites present with their sha256.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable

from envharness.store.postgres.dialect import SqliteStyle
from envharness.store.postgres.driver import Connection
from envharness.store.postgres.queries import record_row
from envharness.store.verify import ChainBreak, VerifyReport, check_record

__all__ = ["verify_chains"]

_FETCH = 2000
_HEADS = (
    "SELECT id, head_seq, head_digest FROM sessions"
    " UNION ALL SELECT id, head_seq, head_digest FROM experiments"
    " UNION ALL SELECT id, head_seq, head_digest FROM optimizer_runs"
)
_UNINDEXED = (
    "SELECT DISTINCT session_id FROM records WHERE session_id NOT IN"
    " (SELECT id FROM sessions UNION ALL SELECT id FROM experiments"
    " UNION ALL SELECT id FROM optimizer_runs)"
)
_CHAIN = (
    "SELECT session_id, seq, kind, turn, participant, at, payload, prev, digest FROM records"
    " WHERE session_id = %s ORDER BY seq"
)


def verify_chains(
    connection: Connection, on_session: Callable[[str], None] | None = None
) -> VerifyReport:
    """Check every chain on ``connection`` (blocking; a reader's connection)."""
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        heads = {
            str(chain): (int(seq), str(digest))
            for chain, seq, digest in connection.execute(_HEADS).fetchall()
        }
        unindexed = [str(row[0]) for row in connection.execute(_UNINDEXED).fetchall()]
        breaks: list[ChainBreak] = []
        blobs: dict[str, str | None] = {}
        artifacts: dict[str, str | None] = {}
        total = 0
        for chain_id in sorted({*heads, *unindexed}):
            head = heads.get(chain_id)
            found: list[ChainBreak] = []
            if head is None:
                found.append(
                    ChainBreak(
                        chain_id,
                        None,
                        "records exist but the session index has no entry for this session",
                    )
                )
            total += _check_chain(connection, chain_id, head, blobs, artifacts, found)
            breaks.extend(found)
            if on_session is not None:
                on_session(chain_id)
        # Imported sources keep their own chains; they count as chains, as on SQLite. Imported
        # here: the sources reach the PostgreSQL backend, whose store builds on this module.
        from envharness.store.sources.verify import verify_sources

        sources, imported, source_breaks = verify_sources(SqliteStyle(connection), begin=None)
        breaks.extend(ChainBreak(*found) for found in source_breaks)
    return VerifyReport(
        sessions=len(heads) + len(unindexed) + sources,
        records=total + imported,
        breaks=tuple(breaks),
    )


def _check_chain(
    connection: Connection,
    chain_id: str,
    head: tuple[int, str] | None,
    blobs: dict[str, str | None],
    artifacts: dict[str, str | None],
    breaks: list[ChainBreak],
) -> int:
    def problem(seq: int | None, text: str) -> None:
        breaks.append(ChainBreak(chain_id, seq, text))

    blob_problem = functools.partial(_content_problem, connection, "blobs", "digest", "data")

    def artifact_problem(sha256: str) -> str | None:
        if sha256 not in artifacts:
            found = _content_problem(connection, "artifacts", "sha256", "data", sha256)
            artifacts[sha256] = None if found is None else found.replace("state blob", "artifact")
        return artifacts[sha256]

    # The whole chain: in this snapshot the index and the records were committed together,
    # so a record beyond the index's head is a break, not a commit in progress.
    cursor = connection.cursor()
    cursor.execute(_CHAIN, (chain_id,))
    expected = 0
    prev: str | None = None
    head_digest: str | None = None
    count = 0
    while rows := cursor.fetchmany(_FETCH):
        for raw in rows:
            count += 1
            row = record_row(raw)
            if row.seq > expected:
                missing = f"{expected}" if row.seq == expected + 1 else f"{expected}..{row.seq - 1}"
                problem(expected, f"record(s) seq {missing} missing before seq {row.seq}")
            elif row.prev != prev:
                problem(row.seq, "prev does not match the previous record's digest")
            expected = row.seq + 1
            prev = row.digest
            if head is not None and row.seq == head[0]:
                head_digest = row.digest
            check_record(row, problem, blobs, blob_problem, artifact_problem)
    if head is not None:
        if expected - 1 < head[0]:
            problem(
                expected,
                f"chain ends at seq {expected - 1} but {head[0] + 1} records were committed:"
                f" seq {expected}..{head[0]} are missing",
            )
        else:
            if head_digest != head[1]:
                problem(head[0], f"the digest of seq {head[0]} differs from the committed head")
            if expected - 1 > head[0]:
                problem(
                    head[0] + 1,
                    f"records seq {head[0] + 1}..{expected - 1} lie beyond the committed head"
                    f" (seq {head[0]}) in the session index",
                )
    return count


def _content_problem(
    connection: Connection, table: str, key: str, column: str, digest: str
) -> str | None:
    found = connection.execute(
        f"SELECT {column} FROM {table} WHERE {key} = %s", (digest,)
    ).fetchone()
    if found is None:
        return f"state blob {digest} is missing"
    if hashlib.sha256(bytes(found[0])).hexdigest() != digest:
        return f"state blob {digest} was modified"
    return None
