"""``envharness.client``: the typed API client, async and blocking, against the real app."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path

import anyio
import httpx
import pytest

from envharness import EnvironmentHarness, Scenario
from envharness.client import AsyncClient, Client, ServiceError
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.service.wire.sessions import (
    ExperimentStatusEvent,
    SessionCreatedEvent,
    SessionStatusEvent,
)
from envharness.store import open_store
from tests.service._support import (
    BASE,
    ExperimentWriter,
    SessionWriter,
    World,
    make_world,
    write_session,
    write_store,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path) -> World:
    store = tmp_path / "store"
    write_store(
        store,
        [(SessionWriter(["alice", "bob"], session_id=f"ses_{n:022x}"), 3) for n in range(1, 8)],
    )
    return make_world(store)


def _client(world: World, role: str = "admin") -> AsyncClient:
    transport = httpx.ASGITransport(world.app)
    return AsyncClient(BASE, world.secrets.get(role), transport=transport)


async def test_reads_decode_into_the_wire_types(world: World) -> None:
    async with _client(world, "viewer") as client:
        assert (await client.health()).status == "ok"
        ids = [summary.id async for summary in client.iter_sessions()]
        assert ids == [f"ses_{n:022x}" for n in range(1, 8)]
        page = await client.sessions(limit=3)
        assert len(page.sessions) == 3
        assert page.next_after == ids[2]
        detail = await client.session(ids[0])
        assert detail.config is not None
        assert detail.scores[0].kind == "score"
        records = [record async for record in client.iter_records(ids[0])]
        assert [record.seq for record in records] == list(range(len(records)))
        blocked = await client.records(ids[0], kinds=["action.blocked"])
        assert [record.participant for record in blocked.records] == ["bob"]
        async with aclosing(client.export(ids[0])) as lines:
            exported = [line async for line in lines]
        assert len(exported) == len(records)
        async with aclosing(client.events(ids[0], after=5)) as events:
            streamed = [record.seq async for record in events]
        assert streamed == list(range(6, len(records)))
        assert (await client.verify()).ok


async def test_a_participant_client_sees_its_own_records(world: World) -> None:
    async with _client(world, "alice") as client:
        session_id = (await client.sessions()).sessions[0].id
        page = await client.records(session_id, limit=1000)
        assert {record.participant for record in page.records} == {"alice"}
        with pytest.raises(ServiceError) as refused:
            await client.records(session_id, participant="bob")
        assert refused.value.status == 404


async def test_errors_carry_status_message_and_parameter(world: World) -> None:
    async with _client(world, "viewer") as client:
        with pytest.raises(ServiceError) as bad:
            await client.records("ses_00000000000000000000001", limit=0)
        assert bad.value.status == 422
        assert bad.value.parameter == "limit"
        with pytest.raises(ServiceError, match="404"):
            await client.session("ses_nope")
        with pytest.raises(ServiceError) as forbidden:
            await client.tokens()
        assert forbidden.value.status == 403
    async with _client(world, "revoked") as client:
        with pytest.raises(ServiceError) as revoked:
            await client.sessions()
        assert revoked.value.status == 401


async def test_an_admin_client_manages_tokens(world: World) -> None:
    async with _client(world) as client:
        issued = await client.issue_token("participant", participant="bob", label="bob's bot")
        assert issued.token.startswith("eht_")
        assert issued.info.id in {info.id for info in await client.tokens()}
        revoked = await client.revoke_token(issued.info.id)
        assert revoked.revoked_at is not None


def test_the_blocking_client_is_the_same_api(world: World) -> None:
    with Client(BASE, world.secrets["viewer"], transport=httpx.ASGITransport(world.app)) as c:
        ids = [summary.id for summary in c.iter_sessions()]
        assert len(ids) == 7
        assert c.session(ids[1]).session.id == ids[1]
        count = c.session(ids[1]).session.records
        assert count is not None
        assert len(list(c.iter_records(ids[1]))) == count
        assert [r.seq for r in c.events(ids[1], after=20)] == list(range(21, count))
        first = next(iter(c.export(ids[1])))  # leaving early closes the stream
        assert first.startswith(b'{"session_id"')
        assert c.verify().ok
        assert c.health().status == "ok"
        with pytest.raises(ServiceError):
            c.tokens()


@pytest.fixture
def experiments(tmp_path: Path) -> tuple[World, list[ExperimentWriter]]:
    store = tmp_path / "store"
    sweeps = [ExperimentWriter(("first", "second")), ExperimentWriter(("third",), trials=1)]

    async def write() -> None:
        async with open_store(store) as opened:
            for sweep in sweeps:
                await opened.append(sweep.start())
                for scenario in sweep.config.scenarios:
                    for trial in range(sweep.config.trials):
                        await write_session(opened, sweep.session(scenario.id, trial), 1)
                await opened.append(sweep.finish())

    anyio.run(write)
    return make_world(store), sweeps


async def test_experiments_decode_into_the_wire_types(
    experiments: tuple[World, list[ExperimentWriter]],
) -> None:
    world, sweeps = experiments
    async with _client(world, "viewer") as client:
        assert [e.id async for e in client.iter_experiments()] == [s.id for s in sweeps]
        page = await client.experiments(limit=1)
        assert page.next_after == sweeps[0].id
        detail = await client.experiment(sweeps[0].id)
        assert detail.experiment.total == 4
        assert detail.config is not None
        assert sorted((s.scenario_id, s.trial) for s in detail.sessions) == [
            ("first", 0), ("first", 1), ("second", 0), ("second", 1)
        ]  # fmt: skip
        async with aclosing(client.experiment_events(sweeps[0].id)) as stream:
            got = [event async for event in stream]
        assert [type(e) for e in got].count(SessionCreatedEvent) == 4
        assert [type(e) for e in got].count(SessionStatusEvent) == 8
        assert isinstance(got[-1], ExperimentStatusEvent)
        assert got[-1].status == "completed"
        with pytest.raises(ServiceError) as missing:
            await client.experiment("exp_nope")
        assert missing.value.status == 404
    async with _client(world, "alice") as client:
        mine = await client.experiment(sweeps[1].id)
        assert mine.config is None
        assert all(session.seed is None for session in mine.sessions)


def test_the_blocking_client_follows_experiments(
    experiments: tuple[World, list[ExperimentWriter]],
) -> None:
    world, sweeps = experiments
    with Client(BASE, world.secrets["viewer"], transport=httpx.ASGITransport(world.app)) as c:
        assert [e.id for e in c.iter_experiments()] == [s.id for s in sweeps]
        assert c.experiments(status="completed").next_after is None
        assert c.experiment(sweeps[1].id).experiment.name == sweeps[1].config.name
        events = list(c.experiment_events(sweeps[1].id))
        assert [type(e).__name__ for e in events] == [
            "ExperimentStatusEvent", "SessionCreatedEvent", "SessionStatusEvent",
            "SessionStatusEvent", "ExperimentStatusEvent",
        ]  # fmt: skip


@pytest.fixture
def branched(tmp_path: Path) -> tuple[World, str, str]:
    """A session checkpointed after two turns, a branch with its total reset, both continued."""
    store = tmp_path / "store"
    harness = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    start = Scenario(id="start", input=SyntheticScenarioInput(starting_total=5))
    parent = harness.run(start, turns=2)
    checkpoint = harness.checkpoint(parent)
    child = harness.branch(checkpoint, intervention={"kind": "reset-total", "value": -3},
                           reason="what if")  # fmt: skip
    harness.continue_(parent, turns=2)
    harness.continue_(child, turns=2)
    return make_world(store), parent.id, child.id


async def test_lineage_and_compare_decode_into_the_wire_types(
    branched: tuple[World, str, str],
) -> None:
    world, parent, child = branched
    async with _client(world, "viewer") as client:
        lineage = await client.lineage(child)
        assert lineage.parent is not None
        assert lineage.parent.session.id == parent
        assert (lineage.parent.checkpoint_turn, lineage.parent.reason) == (2, "what if")
        assert lineage.parent.intervention == {"kind": "reset-total", "value": -3}
        assert [c.session.id for c in (await client.lineage(parent)).children] == [child]
        diff = await client.compare(parent, child)
        assert diff.turns_compared == [3, 4]
        first = diff.differences[0]
        assert (first.turn, first.kind) == (3, "outcome")
        assert {s.metric: s.left != s.right for s in diff.scores} == {"total": True, "turns": False}
        assert not diff.identical
        with pytest.raises(ServiceError) as missing:
            await client.compare(parent, "ses_nope")
        assert missing.value.status == 404


def test_the_blocking_client_reads_lineage_and_compares(branched: tuple[World, str, str]) -> None:
    world, parent, child = branched
    with Client(BASE, world.secrets["alice"], transport=httpx.ASGITransport(world.app)) as c:
        parent_link = c.lineage(child).parent
        assert parent_link is not None
        assert parent_link.intervention is None  # a participant reads no session-level record
        diff = c.compare(parent, child)
        assert diff.scores == []
        assert {d.participant for d in diff.differences} == {"alice"}


async def test_iterating_follows_next_after_across_pages() -> None:
    """The iter_* methods share one pager: every page is fetched, in order, until the last."""
    from dataclasses import dataclass

    from envharness.client.wire import every as _every

    @dataclass
    class Page:
        items: list[int]
        next_after: int | None

    pages = {None: Page([1, 2], 2), 2: Page([3, 4], 4), 4: Page([5], None)}
    asked: list[int | None] = []

    async def fetch(after: int | None) -> Page:
        asked.append(after)
        return pages[after]

    assert [item async for item in _every(fetch, lambda page: page.items)] == [1, 2, 3, 4, 5]
    assert asked == [None, 2, 4]


async def test_ids_are_sent_as_one_exact_path_segment() -> None:
    """An id holding ``%``, ``?``, ``#``, ``/`` or dots names that id: it never becomes a query
    string, a fragment or another endpoint (``..`` once reached ``/api/health``)."""
    asked: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.raw_path)
        return httpx.Response(404, json={"status": 404, "message": "no", "parameter": None})

    weird = "x%?#/.."
    async with AsyncClient(BASE, "eht_x", transport=httpx.MockTransport(answer)) as client:
        calls = [
            lambda: client.experiment(weird),
            lambda: client.session(weird),
            lambda: client.lineage(".."),
            lambda: client.records("."),
            lambda: client.snapshot(weird),
            lambda: client.dataset("d %?#"),
            lambda: client.harness_version(".."),
            lambda: client.optimizer_run(weird),
            lambda: client.revoke_token(weird),
            lambda: client.trajectory("acme/runs:x/../y?z#w"),
        ]
        for call in calls:
            with pytest.raises(ServiceError):
                await call()
        for stream in (client.export(weird), client.events(weird), client.export_snapshot("..")):
            with pytest.raises(ServiceError):
                await _drain(stream)
        for empty in (lambda: client.session(""), lambda: client.revoke_token("")):
            with pytest.raises(ValueError, match="must not be empty"):
                await empty()
        with pytest.raises(ValueError, match="by its id"):
            await client.dataset("team/sft")
    quoted = "x%25%3F%23%2F.."
    assert asked == [
        f"/api/experiments/{quoted}".encode(),
        f"/api/sessions/{quoted}".encode(),
        b"/api/sessions/%2E%2E/lineage",
        b"/api/sessions/%2E/records?after=-1&limit=100",
        f"/api/snapshots/{quoted}?check=false&after=-1&limit=100".encode(),
        b"/api/datasets/d%20%25%3F%23",
        b"/api/harness/versions/%2E%2E",
        f"/api/optimizer/runs/{quoted}".encode(),
        f"/api/tokens/{quoted}".encode(),
        b"/api/trajectories/acme/runs:x/%2E%2E/y%3Fz%23w?check=true",
        f"/api/sessions/{quoted}/export".encode(),
        f"/api/sessions/{quoted}/events".encode(),
        b"/api/snapshots/%2E%2E/export",
    ]


async def _drain(stream: AsyncGenerator[object, None]) -> None:
    async with aclosing(stream) as items:
        async for _ in items:
            pass


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            httpx.Response(404, html="<!doctype html><title>Not found</title>"),
            "GET /api/sessions/ses_x answered Not Found (text/html), not a JSON problem: is "
            "this the envharness service, and the path one of its API endpoints?",
        ),
        (
            httpx.Response(307, headers={"Location": "http://127.0.0.1:8765/api/sessions"}),
            "GET /api/sessions/ses_x answered Temporary Redirect, to "
            "'http://127.0.0.1:8765/api/sessions': not an API answer",
        ),
        (httpx.Response(502, text="Bad gateway"), "GET /api/sessions/ses_x: Bad gateway"),
    ],
)
async def test_an_error_that_is_not_a_problem_says_what_came_back(
    response: httpx.Response, expected: str
) -> None:
    transport = httpx.MockTransport(lambda request: response)
    async with AsyncClient(BASE, "eht_x", transport=transport) as client:
        with pytest.raises(ServiceError) as failed:
            await client.session("ses_x")
    assert (failed.value.status, failed.value.message) == (response.status_code, expected)
