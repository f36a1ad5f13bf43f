"""Read-side queries of the sources tables: each source's health, and where its episodes lie.

Both run inside one read transaction (the caller's connection), so every figure of an answer
comes from the same snapshot of the store.
"""

from __future__ import annotations

import sqlite3

import msgspec

from envharness.store.sources.chain import CAPTURE_FAILED
from envharness.store.sources.reports import EpisodeInfo, SourceGap, SourceHealth

__all__ = ["episodes_of", "health_of"]


def health_of(connection: sqlite3.Connection, only: str | None) -> list[SourceHealth]:
    where, arguments = ("WHERE source = ?", (only,)) if only is not None else ("", ())
    connection.execute("BEGIN")  # one snapshot for every query below
    try:
        names = [
            str(row[0])
            for row in connection.execute(
                f"SELECT DISTINCT source FROM source_imports {where} ORDER BY source", arguments
            )
        ]
        return [_one_health(connection, name) for name in names]
    finally:
        connection.execute("COMMIT")


def _one_health(connection: sqlite3.Connection, source: str) -> SourceHealth:
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
        " FROM source_imports WHERE source = ? ORDER BY at, rowid",
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


def episodes_of(
    connection: sqlite3.Connection, source: str, episode: str | None = None
) -> list[EpisodeInfo]:
    only, arguments = (" AND r.episode = ?", (source, episode)) if episode else ("", (source,))
    rows = connection.execute(
        "SELECT e.episode, e.first, e.last, e.count, r.hash, e.formats, e.importers, e.training"
        " FROM (SELECT r.episode, MIN(r.position) AS first, MAX(r.position) AS last,"
        " COUNT(*) AS count, json_group_array(DISTINCT i.format) AS formats,"
        " json_group_array(DISTINCT i.importer) AS importers, MIN(i.training) AS training"
        " FROM source_records r JOIN source_imports i ON i.id = r.import_id"
        f" WHERE r.source = ?{only} GROUP BY r.episode) AS e"
        " JOIN source_records r ON r.source = ? AND r.position = e.last ORDER BY e.first",
        (*arguments, source),
    ).fetchall()
    names = msgspec.json.Decoder(list[str])
    return [
        EpisodeInfo(
            source=source,
            episode=str(episode),
            first_position=int(first),
            last_position=int(last),
            records=int(count),
            head_hash=str(head_hash),
            formats=tuple(sorted(names.decode(formats))),
            importers=tuple(sorted(names.decode(importers))),
            training=bool(training),
        )
        for episode, first, last, count, head_hash, formats, importers, training in rows
    ]
