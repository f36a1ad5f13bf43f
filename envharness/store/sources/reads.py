"""Read-side queries of the sources tables: each source's health, and where its episodes lie.

Health runs inside one read transaction (the caller's connection), so every figure of an answer
comes from the same snapshot of the store. The SQL is what SQLite and PostgreSQL both run (on
PostgreSQL through :class:`~envharness.store.postgres.dialect.SqliteStyle`); the two places the
engines differ — how a read transaction sees one snapshot, and what orders imports made in the
same microsecond — are a :class:`Dialect`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from envharness.store.sources.chain import CAPTURE_FAILED
from envharness.store.sources.reports import EpisodeInfo, SourceGap, SourceHealth

__all__ = ["POSTGRES", "SQLITE", "Dialect", "episodes_of", "health_of"]


class Dialect(NamedTuple):
    """What the sources' reads say differently per engine."""

    begin: str
    """Starts a read transaction that sees one snapshot for every statement in it (SQLite's
    plain ``BEGIN`` does; PostgreSQL's default, read committed, would not)."""
    import_order: str
    """Orders one source's import log: by time, then by insertion where SQLite keeps it
    (``rowid``); PostgreSQL's table has no such column, and its imports into one source are
    serialized by a lock and timed once they hold it, so a tie there is broken by id."""


SQLITE = Dialect(begin="BEGIN", import_order="at, rowid")
POSTGRES = Dialect(begin="BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", import_order="at, id")


def health_of(connection: Any, only: str | None, dialect: Dialect = SQLITE) -> list[SourceHealth]:
    """Every source's health (or ``only`` that one's), in name order; ``connection`` is a
    ``sqlite3`` connection or a :class:`~envharness.store.postgres.dialect.SqliteStyle`."""
    where, arguments = ("WHERE source = ?", (only,)) if only is not None else ("", ())
    connection.execute(dialect.begin)  # one snapshot for every query below
    try:
        names = [
            str(row[0])
            for row in connection.execute(
                f"SELECT DISTINCT source FROM source_imports {where} ORDER BY source", arguments
            )
        ]
        return [_one_health(connection, name, dialect) for name in names]
    finally:
        connection.execute("COMMIT")


def _one_health(connection: Any, source: str, dialect: Dialect) -> SourceHealth:
    held = connection.execute(
        "SELECT head_position, head_hash, updated_at FROM sources WHERE id = ?", (source,)
    ).fetchone()
    head, head_hash = (int(held[0]), str(held[1])) if held else (-1, None)
    records, episodes = connection.execute(
        "SELECT COUNT(*), COUNT(DISTINCT episode) FROM source_records WHERE source = ?",
        (source,),
    ).fetchone()
    imports = connection.execute(
        "SELECT status, format, at, first_position, last_position, problem, problem_kind"
        f" FROM source_imports WHERE source = ? ORDER BY {dialect.import_order}",
        (source,),
    ).fetchall()
    offered = max((int(row[4]) for row in imports if row[4] is not None), default=-1)
    refused_since: list[tuple[object, ...]] = []
    for row in imports:
        if row[0] != "refused":
            refused_since = []
        else:
            refused_since.append(row)
    skipped = [
        int(row[3])
        for row in imports
        if row[0] == "refused" and row[6] == "gap" and row[3] is not None and row[3] > head + 1
    ]
    gaps = (SourceGap(head + 1, min(skipped) - 1),) if skipped else ()
    failure = connection.execute(
        "SELECT COUNT(*), MAX(position) FROM source_records WHERE source = ? AND kind = ?",
        (source, CAPTURE_FAILED),
    ).fetchone()
    last_failure = None
    if failure[0]:
        payload = connection.execute(
            "SELECT payload FROM source_records WHERE source = ? AND position = ?",
            (source, failure[1]),
        ).fetchone()[0]
        last_failure = f"position {failure[1]}: {_detail(payload)}"
    return SourceHealth(
        source=source,
        head_position=head,
        head_hash=head_hash,
        records=int(records),
        episodes=int(episodes),
        formats=tuple(sorted({str(row[1]) for row in imports if row[0] != "refused"})),
        offered_position=max(offered, head),
        backlog=max(offered - head, 0),
        gaps=gaps,
        capture_failures=int(failure[0]),
        last_capture_failure=last_failure,
        imports=len(imports),
        refused=len(refused_since),
        last_refusal=str(refused_since[-1][5]) if refused_since else None,
        updated_at=str(imports[-1][2]) if imports else "",
    )


def _detail(payload: object) -> str:
    """The ``detail`` of a capture-failure payload, or its bytes when it has none."""
    try:
        decoded = msgspec.json.decode(payload) if isinstance(payload, bytes) else None
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("detail"), str):
        return str(decoded["detail"])
    return repr(payload)[:200]


def episodes_of(connection: Any, source: str, episode: str | None = None) -> list[EpisodeInfo]:
    """``source``'s episodes (or the one named), in the order their first records were
    imported. Grouped by episode and import in SQL both engines run; the few groups per
    episode (one per import that brought some of it) are merged here."""
    only, arguments = (" AND episode = ?", (source, episode)) if episode else ("", (source,))
    rows = connection.execute(
        "SELECT g.episode, g.first, g.last, g.count, r.hash, i.format, i.importer, i.training"
        " FROM (SELECT episode, import_id, MIN(position) AS first, MAX(position) AS last,"
        " COUNT(*) AS count FROM source_records"
        f" WHERE source = ?{only} GROUP BY episode, import_id) AS g"
        " JOIN source_imports i ON i.id = g.import_id"
        " JOIN source_records r ON r.source = ? AND r.position = g.last",
        (*arguments, source),
    ).fetchall()
    merged: dict[str, _Episode] = {}
    for name, first, last, count, head_hash, format_, importer, training in rows:
        found = merged.setdefault(str(name), _Episode())
        found.add(int(first), int(last), int(count), str(head_hash), str(format_), str(importer))
        found.training = found.training and bool(training)
    return sorted(
        (found.info(source, name) for name, found in merged.items()),
        key=lambda info: info.first_position,
    )


class _Episode:
    """One episode's figures, summed over the imports that brought its records."""

    __slots__ = ("count", "first", "formats", "head_hash", "importers", "last", "training")

    def __init__(self) -> None:
        self.first = self.last = -1
        self.count = 0
        self.head_hash = ""
        self.formats: set[str] = set()
        self.importers: set[str] = set()
        self.training = True

    def add(
        self, first: int, last: int, count: int, head_hash: str, format_: str, importer: str
    ) -> None:
        self.first = first if self.first < 0 else min(self.first, first)
        if last > self.last:
            self.last, self.head_hash = last, head_hash
        self.count += count
        self.formats.add(format_)
        self.importers.add(importer)

    def info(self, source: str, episode: str) -> EpisodeInfo:
        return EpisodeInfo(
            source=source,
            episode=episode,
            first_position=self.first,
            last_position=self.last,
            records=self.count,
            head_hash=self.head_hash,
            formats=tuple(sorted(self.formats)),
            importers=tuple(sorted(self.importers)),
            training=self.training,
        )
