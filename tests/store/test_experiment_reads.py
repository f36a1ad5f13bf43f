"""Reads over experiments for the service: a participant's cut (``among``), sessions placed by
trial and seed, and the store-wide positions an experiment's live stream resumes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from envharness.errors import NotFoundError
from envharness.store import open_store, read_store
from tests.service._support import ExperimentWriter, SessionWriter, write_session

pytestmark = pytest.mark.anyio

KINDS = ("session.created", "session.status", "experiment.status")


async def test_reads_of_experiments_cut_to_some_sessions(tmp_path: Path) -> None:
    sweep = ExperimentWriter(("first", "second"), trials=2)
    other = ExperimentWriter(("third",), trials=1)
    mine = [sweep.session("first", 0), sweep.session("second", 1)]
    theirs = [sweep.session("first", 1), other.session("third", 0)]
    async with open_store(tmp_path / "store") as store:
        assert await store.last_position() == -1
        await store.append(sweep.start())
        await store.append(other.start())
        for writer in [*mine, *theirs]:
            await write_session(store, writer, 1)
        await store.append(sweep.finish())
        alone = SessionWriter(["alice"])
        await write_session(store, alone, 1)
    reader = await read_store(tmp_path / "store")
    ids = [writer.id for writer in mine]

    everything = {info.id: info for info in await reader.experiments()}
    assert everything[sweep.id].sessions.completed == 3
    cut = await reader.experiments(among=[*ids, alone.id])
    assert [info.id for info in cut] == [sweep.id]
    assert cut[0].sessions.completed == cut[0].sessions.recorded == 2
    assert await reader.experiments(among=[]) == []
    assert (await reader.experiment(sweep.id, among=ids)).sessions.recorded == 2
    with pytest.raises(NotFoundError):
        await reader.experiment(other.id, among=ids)

    members = await reader.experiment_sessions(sweep.id)
    assert [(m.session.id, m.session.scenario_id, m.trial) for m in members] == [
        (mine[0].id, "first", 0), (mine[1].id, "second", 1), (theirs[0].id, "first", 1)
    ]  # fmt: skip
    assert [m.seed for m in members] == [mine[0].config.seed, mine[1].config.seed,
                                         theirs[0].config.seed]  # fmt: skip
    assert [m.session.id for m in await reader.experiment_sessions(sweep.id, among=ids[:1])] == [
        mine[0].id
    ]


async def test_experiment_rows_come_by_position_and_kind(tmp_path: Path) -> None:
    sweep = ExperimentWriter(("first",), trials=2)
    other = ExperimentWriter(("elsewhere",), trials=1)
    writers = [sweep.session("first", 0), sweep.session("first", 1)]
    async with open_store(tmp_path / "store") as store:
        await store.append(sweep.start())
        start = await store.last_position()
        await write_session(store, other.session("elsewhere", 0), 1)
        for writer in writers:
            await write_session(store, writer, 2)
        await store.append(sweep.finish())
        head = await store.last_position()
    reader = await read_store(tmp_path / "store")

    rows = await reader.experiment_rows(sweep.id, kinds=KINDS, after=-1, upto=head)
    positions = [pos for pos, _ in rows]
    assert positions == sorted(set(positions))
    assert [row.kind for _, row in rows].count("session.created") == 2
    assert {row.session_id for _, row in rows} == {sweep.id, *(w.id for w in writers)}
    assert rows[0][1].kind == "experiment.status"  # the experiment's own chain comes too
    assert rows[-1][1].kind == "experiment.status"
    later = await reader.experiment_rows(sweep.id, kinds=KINDS, after=start, upto=head)
    assert later == [(pos, row) for pos, row in rows if pos > start]
    assert await reader.experiment_rows(sweep.id, kinds=KINDS, after=-1, upto=start) == rows[:1]
    paged = await reader.experiment_rows(sweep.id, kinds=KINDS, after=positions[1], upto=head,
                                         limit=2)  # fmt: skip
    assert paged == rows[2:4]
    one = await reader.experiment_rows(
        sweep.id, kinds=("session.status",), after=-1, upto=head, among=[writers[1].id]
    )
    assert {row.session_id for _, row in one} == {writers[1].id}
    assert [row.kind for _, row in one] == ["session.status", "session.status"]
