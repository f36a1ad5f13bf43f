"""Moving chains' heads many to a statement (PostgreSQL's way) leaves the index exactly as one
statement per chain (SQLite's way) does: both run here on SQLite, over the same transaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness.store import open_store
from envharness.store.index_rules import (
    ROWS_PER_INSERT,
    _move_heads_one_by_one,
    _move_heads_together,
    _update_index,
)

from ._index_mix import index_of, mixed
from ._support import plain

pytestmark = pytest.mark.anyio


async def test_heads_moved_together_index_as_one_statement_per_chain(tmp_path: Path) -> None:
    mix = mixed()
    indexes = []
    for move_heads in (_move_heads_one_by_one, _move_heads_together):
        store_path = tmp_path / move_heads.__name__
        async with open_store(store_path) as store:
            await store.append(mix.before)
        with plain(store_path) as connection:
            connection.execute("BEGIN")
            heads = _update_index(connection, mix.together, move_heads)
            connection.execute("COMMIT")
            indexes.append(index_of(connection, mix))
        assert heads == {row.session_id: row for row in mix.together}
    one_by_one, together = indexes
    assert together == one_by_one
    # And what the transaction says happened is there (not two equally wrong indexes).
    sessions = {row[0]: row for row in together["sessions"]}
    ended = mix.together[0].session_id
    assert sessions[ended][3:5] == ("completed", "done")
    assert sessions[ended][7] == 2
    assert sessions[ended][10] is None
    branch = next(row for row in mix.together if row.kind == "branch")
    assert sessions[branch.session_id][3:5] == ("running", None)
    assert sessions[branch.session_id][11:] == (ended, 3)
    assert sessions[branch.session_id][10] is not None
    assert len(sessions) == len({row.session_id for row in mix.before + mix.together}) - 3
    assert [row[2] for row in together["experiments"]] == ["running"]
    assert [row[2] for row in together["optimizer_runs"]] == ["running"]
    assert len(together["harness_versions"]) == 1


async def test_nothing_to_move_makes_no_statement(tmp_path: Path) -> None:
    store_path = tmp_path / "store"
    async with open_store(store_path):
        pass
    with plain(store_path) as connection:
        calls: list[str] = []
        connection.set_trace_callback(calls.append)
        _move_heads_together(connection, [])
    assert calls == []


async def test_heads_moved_together_take_one_statement_per_64_chains_and_table(
    tmp_path: Path,
) -> None:
    """The point of moving heads together: on PostgreSQL each statement is a round trip."""
    mix = mixed()
    store_path = tmp_path / "store"
    async with open_store(store_path) as store:
        await store.append(mix.before)
    moved = [row for row in mix.together if row.kind == "log"]  # only heads move
    with plain(store_path) as connection:
        statements: list[str] = []
        connection.execute("BEGIN")
        connection.set_trace_callback(statements.append)
        _update_index(connection, moved, _move_heads_together)
        connection.set_trace_callback(None)
        connection.execute("ROLLBACK")
    chains = len({row.session_id for row in moved})
    assert chains > ROWS_PER_INSERT
    # The sessions in two statements; the few chains not found there (the experiment's, the
    # unindexed one, sessions created only in ``together``) in one among the experiments, and
    # those still not found in one among the optimizer runs.
    assert [statement.split(" UPDATE ")[1].split()[0] for statement in statements] == [
        "sessions",
        "sessions",
        "experiments",
        "optimizer_runs",
    ]
