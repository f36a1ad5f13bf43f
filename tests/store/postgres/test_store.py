"""The checks every store must pass, run on the SQLite store and on the PostgreSQL store alike:
appends acknowledged after commit, the chain and its index, conflicts, the readers, the
indexes of experiments and optimizer runs, owners and crash recovery, and ``verify``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import psycopg
import pytest

from envharness.errors import ChainConflictError, NameTakenError, NotFoundError, StoreError
from envharness.records import (
    ExperimentStatus,
    Log,
    RecordRow,
    Score,
    SegmentEnded,
    SegmentStarted,
    SessionChain,
)
from envharness.store import RecordFilter
from envharness.store.owners import this_process

from .._support import logs, new_session, plain, status_row, turn_rows
from ._support import BOTH, Opener, dead_runner, experiment_rows, opener, optimizer_rows, raw
from ._support import database as database


@pytest.fixture(params=BOTH)
def open_any(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    return opener(request, tmp_path)


pytestmark = pytest.mark.anyio


async def test_an_append_is_read_back_with_its_index(open_any: Opener) -> None:
    chain, created = new_session()
    first = logs(chain, 2)
    turn, blobs = turn_rows(chain, 1)
    more, more_blobs = turn_rows(chain, 2)
    async with open_any() as store:
        await store.append([created, *first, *turn], blobs)
        pending = await store.submit([*more, status_row(chain, "completed")], more_blobs)
        await pending.committed()
        info = await store.session(chain.session_id)
        rows = [row async for row in store.rows(chain.session_id)]
        records = [record async for record in store.records(chain.session_id)]
        (state,) = blobs
        blob = await store.blob(state)
        with pytest.raises(NotFoundError, match="no state blob"):
            await store.blob("0" * 64)
    assert pending.done
    assert pending.error is None
    assert (info.status, info.turns_completed, info.records) == ("completed", 2, 10)
    assert [row.seq for row in rows] == list(range(10))
    assert rows[0] == created  # the stored bytes, as sealed
    assert rows[3] == turn[0]
    assert [record.digest for record in records] == [row.digest for row in rows]
    assert blob == blobs[state]


async def test_a_taken_position_fails_only_its_own_request(open_any: Opener) -> None:
    chain, created = new_session()
    rival = SessionChain(chain.session_id)
    other, other_created = new_session()
    async with open_any() as store:
        await store.append([created])
        mine = logs(chain, 1)
        theirs = [rival.seal(Log(message="a second writer"))]  # seq 0 again
        first = await store.submit(theirs)
        second = await store.submit([other_created, *logs(other, 1)])
        with pytest.raises(ChainConflictError, match="already taken"):
            await first.committed()
        await second.committed()
        await store.append(mine)  # the chain is intact: its own writer goes on
        assert (await store.session(chain.session_id)).records == 2
        assert (await store.session(other.session_id)).records == 2


async def test_sessions_are_found_by_id_prefix_status_and_filter(open_any: Opener) -> None:
    chain, created = new_session()
    turns = [turn_rows(chain, turn) for turn in (1, 2, 3)]
    async with open_any() as store:
        await store.append(
            [created, *(row for rows, _ in turns for row in rows)],
            {k: v for _, blobs in turns for k, v in blobs.items()},
        )
        _, other = new_session()
        await store.append([status_row(chain, "failed", "boom"), other])
        found = await store.session(chain.session_id[:-1])
        listed = [info.id for info in await store.sessions(status="failed")]
        not_listed = [info.id for info in await store.sessions(status="completed")]
        picked = [
            (row.seq, row.turn, row.participant)
            async for row in store.rows(
                chain.session_id,
                RecordFilter(kinds=("log",), participant="bob", after=1, until=8, limit=2),
            )
        ]
        outcome = [row.turn async for row in store.rows(chain.session_id, RecordFilter(turn=2))]
        with pytest.raises(NotFoundError, match="no session"):
            await store.session("ses_missing")
        with pytest.raises(NotFoundError, match="empty session id"):
            await store.session(" ")
        with pytest.raises(NotFoundError, match="ambiguous"):
            await store.session("ses_")  # both sessions have it
    assert found.id == chain.session_id
    assert found.reason == "boom"
    assert chain.session_id in listed
    assert chain.session_id not in not_listed
    assert picked == [(2, 1, "bob"), (5, 2, "bob")]
    assert outcome == [2, 2, 2]


async def test_experiments_are_indexed_and_followed_by_position(open_any: Opener) -> None:
    experiment, rows = experiment_rows("sweep", 2)
    sessions = [new_session(experiment_id=experiment.session_id) for _ in range(2)]
    score = Score(version="1", metrics={"z": 1.0, "a": 0.5}, passed=True)
    async with open_any() as store:
        start = await store.last_position()
        await store.append([*rows, experiment.seal(ExperimentStatus(status="running", total=2))])
        for chain, created in sessions:
            await store.append([created, chain.seal(score), status_row(chain, "completed")])
        await store.append([experiment.seal(ExperimentStatus(status="completed", total=2))])
        end = await store.last_position()
        info = await store.experiment(experiment.session_id)
        listed = [found.id for found in await store.experiments()]
        members = await store.experiment_sessions(experiment.session_id)
        only_first = await store.experiment(
            experiment.session_id, among={sessions[0][0].session_id}
        )
        none = await store.experiments(among=set())
        facts = await store.session_facts(among={sessions[1][0].session_id})
        followed = await store.experiment_rows(
            experiment.session_id,
            kinds=("experiment.status", "score"),
            after=start,
            upto=end,
        )
        with pytest.raises(NotFoundError, match="that is a session id"):
            await store.experiment(sessions[0][0].session_id)
    assert info.name == "sweep"
    assert info.status == "completed"
    assert (info.total, info.sessions.completed) == (2, 2)
    assert experiment.session_id in listed
    assert none == []
    assert [member.session.id for member in members] == [c.session_id for c, _ in sessions]
    assert [(member.trial, member.seed) for member in members] == [(None, 0), (None, 0)]
    assert only_first.sessions.recorded == 1
    ((session_id, fact),) = facts.items()
    assert session_id == sessions[1][0].session_id
    assert (fact.environment, fact.participants, fact.passed) == ("test-env", ("alice",), True)
    assert list(fact.metrics.items()) == [("a", 0.5), ("z", 1.0)]  # in the stored order
    positions = [position for position, _ in followed]
    assert positions == sorted(positions)
    assert len(positions) == 4
    kinds = [row.kind for _, row in followed]
    assert kinds == ["experiment.status", "score", "score", "experiment.status"]


async def test_optimizer_runs_and_their_versions_are_indexed(open_any: Opener) -> None:
    version = f"harness-{id(open_any)}"
    rows = optimizer_rows("tune", version)
    async with open_any() as store:
        await store.append(rows)
        run = await store.optimizer_run(rows[0].session_id)
        runs = [found.id for found in await store.optimizer_runs()]
        versions = {found.version: found for found in await store.harness_versions()}
        with pytest.raises(NotFoundError, match="no optimizer run"):
            await store.optimizer_run("opt_missing")
    assert (run.name, run.status, run.head_seq) == ("tune", "running", 2)
    assert run.id in runs
    assert versions[version].run_id == run.id
    assert versions[version].seq == 2


async def test_an_owner_is_named_while_its_segment_runs(open_any: Opener) -> None:
    chain, created = new_session()
    async with open_any() as store:
        await store.append([created, chain.seal(SegmentStarted(segment=0, runner=this_process()))])
        running = await store.session_owner(chain.session_id)
        await store.append([chain.seal(SegmentEnded(segment=0, status="completed"))])
        ended = await store.session_owner(chain.session_id)
    assert running == this_process()
    assert ended is None


async def test_a_dead_runners_session_is_interrupted_when_a_store_opens(
    open_any: Opener,
) -> None:
    chain, created = new_session()
    runner = dead_runner()
    async with open_any() as store:
        await store.append([created, chain.seal(SegmentStarted(segment=0, runner=runner))])
    async with open_any(create=False) as store:
        info = await store.session(chain.session_id)
        tail = [row.kind async for row in store.rows(chain.session_id, RecordFilter(after=1))]
        owner = await store.session_owner(chain.session_id)
        report = await store.verify()
    assert info.status == "interrupted"
    assert info.reason is not None
    assert f"pid {runner.pid}" in info.reason
    assert tail == ["session.status", "segment.ended"]
    assert owner is None
    assert [b for b in report.breaks if b.session_id == chain.session_id] == []


async def test_verify_passes_a_sound_chain_and_names_each_chain_it_checks(
    open_any: Opener,
) -> None:
    chain, created = new_session()
    seen: list[str] = []
    async with open_any() as store:
        await store.append([created, *logs(chain, 3)])
        report = await store.verify(seen.append)
    assert [b for b in report.breaks if b.session_id == chain.session_id] == []
    assert chain.session_id in seen
    assert report.records >= 4


async def test_records_cannot_be_changed_or_deleted(
    open_any: Opener, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    chain, created = new_session()
    async with open_any() as store:
        await store.append([created])
        if request.node.callspec.params["open_any"] == "postgres":
            async with raw(request.getfixturevalue("database")) as connection:
                for statement in ("UPDATE records SET kind = 'x'", "DELETE FROM records"):
                    with pytest.raises(psycopg.Error, match="append-only"):
                        await anyio.to_thread.run_sync(connection.execute, statement)
        else:
            with (
                plain(tmp_path / "store") as connection,
                pytest.raises(sqlite3.DatabaseError, match="append-only"),
            ):
                connection.execute("DELETE FROM records")
        assert (await store.session(chain.session_id)).records == 1


async def test_verify_finds_an_altered_record_and_a_missing_blob(
    open_any: Opener, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    chain, created = new_session()
    turn, blobs = turn_rows(chain, 1)
    (state,) = blobs
    async with open_any() as store:
        await store.append([created, *turn], blobs)
        altered = (
            f"UPDATE records SET participant = 'mallory' WHERE session_id = '{chain.session_id}'"
            " AND seq = 1"
        )
        if request.node.callspec.params["open_any"] == "postgres":
            async with raw(request.getfixturevalue("database")) as connection:

                def tamper() -> None:
                    connection.execute("ALTER TABLE records DISABLE TRIGGER records_append_only")
                    connection.execute("ALTER TABLE blobs DISABLE TRIGGER blobs_append_only")
                    try:
                        connection.execute(altered)
                        connection.execute("DELETE FROM blobs WHERE digest = %s", (state,))
                    finally:
                        connection.execute("ALTER TABLE records ENABLE TRIGGER ALL")
                        connection.execute("ALTER TABLE blobs ENABLE TRIGGER ALL")

                await anyio.to_thread.run_sync(tamper)
        else:
            with plain(tmp_path / "store") as connection:
                connection.execute("DROP TRIGGER records_are_append_only_update")
                connection.execute(altered)
                connection.execute("DELETE FROM blobs WHERE digest = ?", (state,))
        report = await store.verify()
    found = {(b.seq, b.problem) for b in report.breaks if b.session_id == chain.session_id}
    assert (1, "digest mismatch: the 'log' record was altered") in found
    assert (3, f"state blob {state} is missing") in found


async def test_a_malformed_payload_or_a_taken_version_fails_only_its_own_request(
    open_any: Opener,
) -> None:
    bad_id = new_session()[0].session_id
    bad = RecordRow(bad_id, 0, "session.created", None, None, "2024-01-01T00:00:00Z",
                    b'{"kind":"session.created"}', None, "00" * 32)  # fmt: skip
    version = f"harness-taken-{id(bad)}"
    first, second = optimizer_rows("one", version), optimizer_rows("two", version)
    chain, created = new_session()
    async with open_any() as store:
        failing = await store.submit([bad])
        good = await store.submit([created, *logs(chain, 1)])
        with pytest.raises(StoreError, match="malformed"):
            await failing.committed()
        await good.committed()
        await store.append(first)
        with pytest.raises(NameTakenError, match="already in the store"):
            await store.append(second)
        await store.append(second[:2])  # the same run goes on, under another name later
        with pytest.raises(NotFoundError):
            await store.session(bad_id)
        assert (await store.session(chain.session_id)).records == 2
        assert (await store.optimizer_run(second[0].session_id)).head_seq == 1


async def test_participant_isolation_narrows_every_experiment_read(open_any: Opener) -> None:
    experiment, rows = experiment_rows("isolated", 2)
    (one, one_created), (two, two_created) = [
        new_session(experiment_id=experiment.session_id) for _ in range(2)
    ]
    among = {one.session_id}
    async with open_any() as store:
        start = await store.last_position()
        await store.append(rows)
        await store.append([one_created, *logs(one, 1), two_created, *logs(two, 1)])
        end = await store.last_position()
        members = await store.experiment_sessions(experiment.session_id, among=among)
        followed = await store.experiment_rows(
            experiment.session_id, kinds=("log",), after=start, upto=end, among=among
        )
        facts = await store.session_facts(among=among)
        listed = await store.experiments(among={two.session_id})
        with pytest.raises(NotFoundError):
            await store.experiment(experiment.session_id, among={"ses_other"})
    assert [member.session.id for member in members] == [one.session_id]
    assert [row.session_id for _, row in followed] == [one.session_id]
    assert list(facts) == [one.session_id]
    assert [(info.id, info.sessions.recorded) for info in listed] == [(experiment.session_id, 1)]
