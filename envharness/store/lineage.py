"""Lineage queries: a session's parent (and checkpoint) and the branches made from it."""

from __future__ import annotations

import sqlite3

import msgspec

__all__ = ["BranchRef", "Lineage", "lineage_of"]


class BranchRef(msgspec.Struct, frozen=True):
    session_id: str
    checkpoint_seq: int


class Lineage(msgspec.Struct, frozen=True, kw_only=True):
    """``parent`` is where the session branched from (``None`` for an original session);
    ``children`` are the sessions branched from it, oldest first."""

    session_id: str
    parent: BranchRef | None
    children: tuple[BranchRef, ...]


def lineage_of(connection: sqlite3.Connection, session_id: str) -> Lineage:
    row = connection.execute(
        "SELECT parent_id, parent_seq FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    parent = BranchRef(row[0], row[1]) if row is not None and row[0] is not None else None
    children = tuple(
        BranchRef(child, seq)
        for child, seq in connection.execute(
            "SELECT id, parent_seq FROM sessions WHERE parent_id = ? ORDER BY created_at, id",
            (session_id,),
        )
    )
    return Lineage(session_id=session_id, parent=parent, children=children)
