"""What was spent, in the viewer and the API: an experiment's totals and each session's (the
numbers of ``experiments show``), a session's own by participant, the mark of a budget stop —
and a participant token that learns only what its own calls cost."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from envharness import AgentReply, Budget, Cost, EnvironmentHarness, Scenario
from envharness.client import AsyncClient
from envharness.fixtures import SyntheticAgent, SyntheticEnvironment, SyntheticScenarioInput
from envharness.scoring import experiment_report
from envharness.service.pages import experiments
from envharness.service.wire.sessions import CostsOut, ExperimentDetail, SessionDetail
from envharness.store import RecordFilter, read_store
from tests.service._support import BASE, World, get_page, make_world

pytestmark = pytest.mark.anyio

SCENARIOS = [
    Scenario(id=f"start-{i}", input=SyntheticScenarioInput(starting_total=i)) for i in range(2)
]
BUDGET_REASON = "budget: used 40 tokens of a 25-token budget"


class Priced:
    """Ten tokens and a cent a call."""

    implementation = "priced@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        cost = Cost(input_tokens=7, output_tokens=3, usd=0.01, seconds=0.5, model="m")
        return AgentReply({"value": 1}, cost)


class Unpriced:
    """Ten tokens a call, at no reported price."""

    implementation = "unpriced@1"
    runs_inline = True

    def act(self, observation: Any) -> AgentReply:
        return AgentReply({"value": 0}, Cost(input_tokens=10, output_tokens=0))


@dataclass(frozen=True)
class Spent:
    world: World
    costly: str
    """An experiment: alice (priced) and bob (unpriced), 2 scenarios x 3 turns."""
    capped: str
    """The same at a 25-token session budget: each session stops after turn 2."""
    free: str
    """An experiment whose agent reported no cost."""
    stopped: str
    """A standalone session its budget stopped."""


@pytest.fixture(scope="module")
def spent(tmp_path_factory: pytest.TempPathFactory) -> Spent:
    store = tmp_path_factory.mktemp("cost-views") / "store"
    agents: dict[str, Any] = {"alice": Priced, "bob": Unpriced}
    paying = EnvironmentHarness(store, environment=SyntheticEnvironment, agents=agents)
    costly = paying.experiment("costly", SCENARIOS, turns=3).run()
    capped = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents=agents, budget=Budget(tokens=25)
    )
    capped_run = capped.experiment("capped", SCENARIOS, turns=5).run()
    stopped = capped.run(SCENARIOS[0], turns=5)
    assert (stopped.status, stopped.reason) == ("stopped", BUDGET_REASON)
    free = EnvironmentHarness(
        store, environment=SyntheticEnvironment, agents={"alice": SyntheticAgent}
    )
    cheap = free.experiment("free", SCENARIOS, turns=1).run()
    return Spent(make_world(store), costly.id, capped_run.id, cheap.id, stopped.id)


async def _detail(world: World, role: str, experiment_id: str) -> ExperimentDetail:
    async with world.client(role) as client:
        response = await client.get(f"/api/experiments/{experiment_id}")
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=ExperimentDetail)


async def _own_costs(store_path: Path, session_id: str, participant: str) -> list[Cost]:
    store = await read_store(store_path)
    selection = RecordFilter(kinds=("cost",), participant=participant)
    found = [record.payload async for record in store.records(session_id, selection)]
    return [payload for payload in found if isinstance(payload, Cost)]


def _tiles(page: str) -> dict[str, tuple[str, str]]:
    """The Spent card's tiles: key -> (figure, detail)."""
    return {
        key: (figure, detail)
        for key, figure, detail in re.findall(
            r'<div class="stat" data-cost="(\w+)"><div class="stat-n">([^<]*)</div>'
            r'<div class="stat-l">[^<]*</div><div class="stat-d">([^<]*)</div>',
            page,
        )
    }


def _card(page: str) -> str:
    start = page.index('id="spent"')
    return page[start : page.index("</section>", start)]


# -- the API -----------------------------------------------------------------------------------


async def test_the_api_sums_what_experiments_show_sums(spent: Spent) -> None:
    detail = await _detail(spent.world, "viewer", spent.costly)
    report = await experiment_report(spent.world.service.store, spent.costly)
    assert detail.costs is not None
    assert msgspec.structs.asdict(detail.costs) == msgspec.structs.asdict(report.costs)
    assert (detail.costs.calls, detail.costs.priced, detail.costs.tokens) == (12, 6, 120)
    assert detail.costs.usd == pytest.approx(0.06)
    expected = {each.session_id: each.costs for each in report.session_costs}
    for session in detail.sessions:
        assert session.costs is not None
        assert msgspec.structs.asdict(session.costs) == msgspec.structs.asdict(expected[session.id])
        assert (session.costs.calls, session.costs.tokens) == (6, 60)


async def test_a_participant_s_api_counts_its_own_calls_only(spent: Spent) -> None:
    for participant, usd, priced in (("alice", 0.06, 6), ("bob", 0.0, 0)):
        detail = await _detail(spent.world, participant, spent.costly)
        assert detail.costs is not None
        total = detail.costs
        assert (total.calls, total.priced, total.tokens) == (6, priced, 60)
        assert total.usd == pytest.approx(usd)
        assert total.wall_seconds is None  # how long it ran is about everyone
        for session in detail.sessions:
            own = await _own_costs(spent.world.store, session.id, participant)
            assert session.costs is not None
            assert session.costs.calls == len(own) == 3
            assert session.costs.input_tokens == sum(c.input_tokens or 0 for c in own)
            assert session.costs.output_tokens == sum(c.output_tokens or 0 for c in own)
            assert session.costs.wall_seconds is None
            assert session.reason is None


async def _session(world: World, role: str, session_id: str) -> SessionDetail:
    async with world.client(role) as client:
        response = await client.get(f"/api/sessions/{session_id}")
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=SessionDetail)


async def test_a_session_s_api_gives_the_totals_its_experiment_gives(spent: Spent) -> None:
    experiment = await _detail(spent.world, "viewer", spent.costly)
    for member in experiment.sessions:
        detail = await _session(spent.world, "viewer", member.id)
        assert detail.costs == member.costs
        assert detail.costs is not None
        assert detail.costs.wall_seconds is not None
        by_participant = detail.participant_costs
        assert list(by_participant) == ["alice", "bob"]
        assert (by_participant["alice"].usd, by_participant["bob"].priced) == (
            pytest.approx(0.03),
            0,
        )
        assert sum(own.tokens for own in by_participant.values()) == detail.costs.tokens == 60


async def test_a_session_s_api_gives_what_its_overview_shows(spent: Spent) -> None:
    detail = await _session(spent.world, "viewer", spent.stopped)
    tiles = _tiles(_card(await get_page(spent.world, "viewer", f"/sessions/{spent.stopped}")))
    assert detail.costs is not None
    assert (detail.costs.tokens, detail.costs.input_tokens, detail.costs.output_tokens) == (
        40,
        34,
        6,
    )
    assert tiles["tokens"] == (f"{detail.costs.tokens}", "34 in · 6 out")
    assert tiles["usd"][0] == f"${detail.costs.usd:.4f}"
    assert tiles["calls"][0] == str(detail.costs.calls)


async def test_a_participant_s_session_api_counts_its_own_calls_only(spent: Spent) -> None:
    detail = await _session(spent.world, "alice", spent.stopped)
    own = await _own_costs(spent.world.store, spent.stopped, "alice")
    assert detail.costs is not None
    assert (detail.costs.calls, detail.costs.tokens) == (len(own), 20)
    assert detail.costs.wall_seconds is None
    assert list(detail.participant_costs) == ["alice"]
    async with spent.world.client("alice") as client:
        assert "bob" not in (await client.get(f"/api/sessions/{spent.stopped}")).text


async def test_a_session_without_costs_has_zero_totals(spent: Spent) -> None:
    experiment = await _detail(spent.world, "viewer", spent.free)
    detail = await _session(spent.world, "viewer", experiment.sessions[0].id)
    assert detail.costs is not None
    assert (detail.costs.calls, detail.costs.tokens, detail.costs.usd) == (0, 0, 0.0)
    assert detail.participant_costs == {}


async def test_the_client_decodes_the_costs(spent: Spent) -> None:
    transport = httpx.ASGITransport(spent.world.app)
    async with AsyncClient(BASE, spent.world.secrets["viewer"], transport=transport) as client:
        detail = await client.experiment(spent.costly)
    assert isinstance(detail.costs, CostsOut)
    assert (detail.costs.calls, detail.costs.tokens) == (12, 120)
    assert detail.costs.wall_seconds is not None
    assert all(session.costs is not None for session in detail.sessions)


async def test_an_answer_without_costs_still_decodes() -> None:
    """An older server's answer (no ``costs``) decodes, with ``costs`` null."""
    old = {
        "experiment": {
            "id": "exp_x", "name": "n", "status": "completed", "terminal": True, "reason": None,
            "total": 0, "created_at": "t", "updated_at": "t",
            "sessions": {"created": 0, "running": 0, "paused": 0, "completed": 0, "failed": 0,
                         "stopped": 0, "interrupted": 0},
        },
        "config": None,
        "sessions": [],
    }  # fmt: skip
    detail = msgspec.json.decode(msgspec.json.encode(old), type=ExperimentDetail)
    assert detail.costs is None


# -- an experiment's page ----------------------------------------------------------------------


async def test_an_experiment_page_shows_what_it_spent(spent: Spent) -> None:
    page = await get_page(spent.world, "viewer", f"/experiments/{spent.costly}")
    card = _card(page)
    tiles = _tiles(card)
    assert tiles["tokens"] == ("120", "102 in · 18 out")
    assert tiles["usd"] == ("$0.0600", "+ 6 unpriced calls")
    assert tiles["calls"] == ("12", "3.0 s in calls")
    assert tiles["wall"][1] == "how long it ran"
    assert "<h3>The most expensive sessions</h3>" in card
    rows = re.findall(r'<tr><td><a class="mono" href="/sessions/(ses_\w+)">.*?</tr>', card)
    detail = await _detail(spent.world, "viewer", spent.costly)
    assert sorted(rows) == sorted(session.id for session in detail.sessions)
    assert card.count('<td class="num">$0.0300</td>') == 2
    # each cell's tooltip says what its session spent
    assert page.count("60 tokens · $0.0300 in 6 calls") == 2


async def test_the_card_lists_the_most_expensive_sessions_first(
    spent: Spent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(experiments, "COST_ROWS", 1)
    page = await get_page(spent.world, "viewer", f"/experiments/{spent.capped}")
    card = _card(page)
    [shown] = re.findall(r'<a class="mono" href="/sessions/(ses_\w+)">', card)
    detail = await _detail(spent.world, "viewer", spent.capped)
    assert shown == detail.sessions[0].id  # equal costs: in the report's order
    assert "… 1 more: <code>envharness experiments show --json</code>" in card


async def test_an_experiment_page_marks_what_its_budget_stopped(spent: Spent) -> None:
    page = await get_page(spent.world, "admin", f"/experiments/{spent.capped}")
    head = page[page.index("<h1>") : page.index("</h1>")]
    assert 'class="tag tag-budget"' in head  # the experiment itself
    runs = re.findall(r'<a class="run" [^>]*>.*?</a>', page)
    assert len(runs) == 2
    for run in runs:
        assert f'title="{BUDGET_REASON}">budget</span>' in run
    assert _card(page).count("tag-budget") == 2  # and in the table of sessions


async def test_an_experiment_without_costs_says_so(spent: Spent) -> None:
    page = await get_page(spent.world, "viewer", f"/experiments/{spent.free}")
    card = _card(page)
    assert re.search(r"No costs reported · ran \d+\.\d s\.", card)
    assert "data-cost" not in card


async def test_a_participant_s_experiment_page_shows_its_own_spending(spent: Spent) -> None:
    page = await get_page(spent.world, "bob", f"/experiments/{spent.costly}")
    card = _card(page)
    assert "<h2>Your spending</h2>" in card
    tiles = _tiles(card)
    assert tiles == {
        "tokens": ("60", "60 in · 0 out"),
        "usd": ("\u2013", "no call had a price"),
        "calls": ("6", "0.0 s in calls"),
    }  # no wall time, and nothing of alice's
    assert "Wall time" not in card
    assert not re.search(r">120\b|\b120 (in|tokens)", card)  # alice's and bob's together
    assert "$0.0" not in card
    assert "<h3>Your sessions</h3>" in card
    assert page.count("60 tokens in 6 calls") == 0
    assert page.count("30 tokens in 3 calls") == 2
    capped = await get_page(spent.world, "alice", f"/experiments/{spent.capped}")
    assert "tag-budget" not in capped
    assert "budget:" not in capped


# -- a session's overview ----------------------------------------------------------------------


async def test_a_session_overview_shows_its_totals_by_participant(spent: Spent) -> None:
    page = await get_page(spent.world, "viewer", f"/sessions/{spent.stopped}")
    card = _card(page)
    tiles = _tiles(card)
    assert tiles["tokens"] == ("40", "34 in · 6 out")
    assert tiles["usd"] == ("$0.0200", "+ 2 unpriced calls")
    assert tiles["calls"] == ("4", "1.0 s in calls")
    assert "wall" in tiles
    rows = re.findall(r"<tr><td><b>(\w+)</b></td>(.*?)</tr>", card)
    assert [(name, re.findall(r">([^<]+)</td>", cells)) for name, cells in rows] == [
        ("alice", ["2", "20", "$0.0200", "1.0 s"]),
        ("bob", ["2", "20", "\u2013", "0.0 s"]),
    ]


async def test_a_session_its_budget_stopped_says_so(spent: Spent) -> None:
    page = await get_page(spent.world, "viewer", f"/sessions/{spent.stopped}")
    head = page[page.index("<h1>") : page.index("</h1>")]
    assert f'<span class="tag tag-budget" title="{BUDGET_REASON}">budget</span>' in head
    callout = re.search(r'<div class="callout warn budget">(.*?)</div>', page, re.DOTALL)
    assert callout is not None
    assert "Session stopped by its budget." in callout.group(1)
    assert BUDGET_REASON in callout.group(1)
    assert 'class="callout bad"' not in page
    # every tab shares the head
    turns = await get_page(spent.world, "viewer", f"/sessions/{spent.stopped}/turns")
    assert 'class="tag tag-budget"' in turns


async def test_a_session_stopped_otherwise_has_no_budget_mark(spent: Spent) -> None:
    detail = await _detail(spent.world, "viewer", spent.free)
    for session in detail.sessions:
        page = await get_page(spent.world, "viewer", f"/sessions/{session.id}")
        assert "tag-budget" not in page
        assert "callout warn budget" not in page
        assert re.search(r"No costs reported · ran \d+\.\d s\.", _card(page))


async def test_a_participant_s_session_overview_shows_its_own_spending(spent: Spent) -> None:
    page = await get_page(spent.world, "alice", f"/sessions/{spent.stopped}")
    card = _card(page)
    assert "<h2>Your spending</h2>" in card
    assert _tiles(card) == {
        "tokens": ("20", "14 in · 6 out"),
        "usd": ("$0.0200", "every call priced"),
        "calls": ("2", "1.0 s in calls"),
    }
    assert "bob" not in card
    assert "By participant" not in card
    # the budget stop is told through its reason, which is about everyone
    assert "tag-budget" not in page
    assert "budget:" not in page
    assert "callout" not in page
    detail = await _detail(spent.world, "alice", spent.free)
    for session in detail.sessions:  # no cost of its own: a line says so, without wall time
        own = _card(await get_page(spent.world, "alice", f"/sessions/{session.id}"))
        assert "No costs reported." in own
        assert " ran " not in own


async def test_a_participant_cannot_read_another_s_session_costs(spent: Spent) -> None:
    """bob is in none of the free experiment's sessions: its pages and API answer 404."""
    detail = await _detail(spent.world, "viewer", spent.free)
    for session in detail.sessions:
        await get_page(spent.world, "bob", f"/sessions/{session.id}", status=404)
    await get_page(spent.world, "bob", f"/experiments/{spent.free}", status=404)
    async with spent.world.client("bob") as client:
        response = await client.get(f"/api/experiments/{spent.free}")
    assert response.status_code == 404
