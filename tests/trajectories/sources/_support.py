"""Helpers for the source tests: sealed records of a small source, and a plain SQLite look."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from envharness.store.database import DATABASE_NAME
from envharness.store.sources import SourceRow
from envharness.trajectories.sources import SourceChain, encode_source_row

SOURCE = "acme/nightly-evals"
FIXTURES = Path(__file__).parent / "fixtures"
OTEL_FIXTURE = FIXTURES / "otel_genai_agent.jsonl"
AT = "2026-01-05T09:00:00Z"


def episode(
    chain: SourceChain, name: str = "run-1", *, passed: bool | None = True
) -> list[SourceRow]:
    """A whole episode: started, two steps, a score citing them, ended."""
    start = chain.seal(
        name,
        "episode.started",
        {"environment": "grid@1", "scenario_id": "maze-3", "participants": {"bot": "gpt-x"}},
        at=AT,
    )
    step = chain.seal(name, "observation", {"cells": [1, 2]}, at=AT, turn=1, participant="bot")
    act = chain.seal(name, "action", {"move": "up"}, at=AT, turn=1, participant="bot")
    rows = [start, step, act]
    if passed is not None:
        rows.append(
            chain.seal(
                name,
                "score",
                {"scorer": "exact@1", "metrics": {"reward": 1.0}, "passed": passed,
                 "cites": [step.position, act.position]},
                at=AT,
            )
        )  # fmt: skip
    rows.append(chain.seal(name, "episode.ended", {"status": "completed"}, at=AT))
    return rows


def lines(rows: list[SourceRow]) -> list[bytes]:
    return [encode_source_row(row) + b"\n" for row in rows]


def write_lines(path: Path, rows: list[SourceRow]) -> Path:
    path.write_bytes(b"".join(lines(rows)))
    return path


@contextlib.contextmanager
def database(store: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(store / DATABASE_NAME, isolation_level=None)
    try:
        yield connection
    finally:
        connection.close()


def dump(store: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[object]]:
    """Everything evidence-like a refused import must leave alone."""
    if not (store / DATABASE_NAME).exists():
        return [], [], []
    with database(store) as connection:
        records = connection.execute("SELECT * FROM source_records ORDER BY pos").fetchall()
        heads = connection.execute("SELECT * FROM sources ORDER BY id").fetchall()
        native = connection.execute("SELECT * FROM records ORDER BY pos").fetchall()
    return records, heads, native
