"""Finding sessions in the Sessions list: search, filters, sort, paging, compare selected, and
the same isolation as everywhere else for a participant's token."""

from __future__ import annotations

import re
from typing import Any

import anyio
import msgspec
import pytest

from envharness.records import Score, SessionStatus
from envharness.store import open_store
from tests.service._support import SessionWriter, World, make_world, write_session

pytestmark = pytest.mark.anyio

MAZE_EASY = SessionWriter(["alice", "bob"], experiment_id="exp_maze", scenario="maze-easy")
MAZE_HARD = SessionWriter(["carol"], experiment_id="exp_maze", scenario="maze-hard")
CHESS_ALICE = SessionWriter(["alice"], scenario="chess-opening")
CHESS_CAROL = SessionWriter(["carol"], experiment_id="exp_carol", scenario="chess-endgame")
CHESS_CAROL.config = msgspec.structs.replace(
    CHESS_CAROL.config,
    environment=msgspec.structs.replace(CHESS_CAROL.config.environment, name="chess-board"),
)


async def _unscored(store: Any, writer: SessionWriter, turns: int, passed: bool | None) -> None:
    """A session that ends with a score of ``passed`` (``None``: it is left running)."""
    await write_session(store, writer, turns, finish=False)
    if passed is not None:
        score = Score(version="t@1", metrics={"reward": 0.25, "total": 1.0}, passed=passed)
        await store.append([writer.chain.seal(score), writer.chain.seal(SessionStatus(
            status="failed", reason="ended failed"))], {})  # fmt: skip


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> World:
    store_path = tmp_path_factory.mktemp("session-search") / "store"

    async def write() -> None:
        async with open_store(store_path) as store:
            await write_session(store, MAZE_EASY, 3)  # completed, passed
            await _unscored(store, MAZE_HARD, 2, passed=False)  # failed, not passed
            await _unscored(store, CHESS_ALICE, 1, passed=None)  # running, no verdict
            await write_session(store, CHESS_CAROL, 2)  # completed, passed

    anyio.run(write)
    return make_world(store_path)


def _listed(page: str) -> list[str]:
    """The session ids the list shows, in order."""
    return re.findall(r'<a class="mono" href="/sessions/(ses_\w+)">', page)


async def _ids(world: World, role: str, **params: Any) -> list[str]:
    async with world.client(role) as client:
        response = await client.get("/sessions", params=params)
    assert response.status_code == 200, response.text
    return _listed(response.text)


async def test_search_matches_scenario_participant_environment_experiment_and_id(
    found: World,
) -> None:
    assert set(await _ids(found, "viewer", q="chess")) == {CHESS_ALICE.id, CHESS_CAROL.id}
    assert set(await _ids(found, "viewer", q="CAROL")) == {MAZE_HARD.id, CHESS_CAROL.id}
    assert set(await _ids(found, "viewer", q="carol chess")) == {CHESS_CAROL.id}
    assert set(await _ids(found, "viewer", q="exp_maze")) == {MAZE_EASY.id, MAZE_HARD.id}
    assert await _ids(found, "viewer", q=MAZE_HARD.id[:-4]) == [MAZE_HARD.id]
    environment = MAZE_EASY.config.environment.name
    assert len(await _ids(found, "viewer", q=environment)) == 3
    assert await _ids(found, "viewer", q="chess-board") == [CHESS_CAROL.id]
    # The middle of an id is not a prefix.
    assert await _ids(found, "viewer", q=MAZE_HARD.id[4:]) == []


async def test_filters_keep_status_experiment_and_verdict(found: World) -> None:
    assert set(await _ids(found, "viewer", status="completed")) == {MAZE_EASY.id, CHESS_CAROL.id}
    assert set(await _ids(found, "viewer", experiment="exp_maze")) == {MAZE_EASY.id, MAZE_HARD.id}
    assert set(await _ids(found, "viewer", passed="yes")) == {MAZE_EASY.id, CHESS_CAROL.id}
    assert await _ids(found, "viewer", passed="no") == [MAZE_HARD.id]
    assert await _ids(found, "viewer", passed="none") == [CHESS_ALICE.id]
    assert await _ids(found, "viewer", passed="yes", q="maze") == [MAZE_EASY.id]


async def test_sort_orders_by_created_updated_or_turns(found: World) -> None:
    # Grouped by experiment (in the order the sort meets them, standalone last), ordered
    # within each group.
    assert await _ids(found, "viewer", sort="created", order="asc") == [
        MAZE_EASY.id, MAZE_HARD.id, CHESS_CAROL.id, CHESS_ALICE.id,
    ]  # fmt: skip
    assert await _ids(found, "viewer") == [
        CHESS_CAROL.id, MAZE_HARD.id, MAZE_EASY.id, CHESS_ALICE.id,
    ]  # fmt: skip
    assert await _ids(found, "viewer", sort="updated", q="maze") == [MAZE_HARD.id, MAZE_EASY.id]
    assert await _ids(found, "viewer", sort="turns", order="asc", q="maze") == [
        MAZE_HARD.id,
        MAZE_EASY.id,
    ]
    assert await _ids(found, "viewer", sort="turns", q="maze") == [MAZE_EASY.id, MAZE_HARD.id]
    async with found.client("viewer") as client:
        page = (await client.get("/sessions", params={"sort": "turns", "order": "asc"})).text
    assert "standalone sessions last. Fewest turns first." in page
    assert '<option value="turns" selected>' in page


async def test_unknown_filter_values_are_refused_naming_the_allowed_ones(found: World) -> None:
    async with found.client("viewer") as client:
        for params, named in (
            ({"status": "done"}, ["completed", "created", "interrupted", "running", "stopped"]),
            ({"passed": "maybe"}, ["yes", "no", "none"]),
            ({"sort": "name"}, ["created", "updated", "turns"]),
            ({"order": "up"}, ["desc", "asc"]),
            ({"experiment": "exp_nope"}, ["/experiments lists them"]),
        ):
            page = await client.get("/sessions", params=params)
            assert page.status_code == 422, params
            assert all(name in page.text for name in named), params
            if "experiment" not in params:
                assert "give one of: " in page.text, params


async def test_the_api_refuses_unknown_filter_values_naming_the_allowed_ones(
    found: World,
) -> None:
    async with found.client("viewer") as client:
        for path, params, named in (
            ("/api/sessions", {"status": "done"}, "completed, created, failed, interrupted, "
             "paused, running, stopped"),
            ("/api/sessions", {"passed": "maybe"}, "no, none, yes"),
            ("/api/sessions", {"sort": "name"}, "created, turns, updated"),
            ("/api/sessions", {"order": "up"}, "asc, desc"),
            ("/api/experiments", {"status": "done"}, "completed, created, failed"),
            ("/experiments", {"status": "done"}, "completed, created, failed"),
        ):  # fmt: skip
            refused = await client.get(path, params=params)
            assert refused.status_code == 422, (path, params)
            [(name, given)] = params.items()
            said = refused.text.replace("&#x27;", "'")
            assert f"query parameter {name!r}" in said, (path, params)
            assert repr(given) in said, (path, params)
            assert f"give one of: {named}" in said, (path, params)


async def test_the_form_as_a_browser_sends_it_keeps_everything(found: World) -> None:
    """Without JavaScript, "any" is sent as an empty value."""
    params = {"q": "", "status": "", "experiment": "", "passed": "", "sort": "created",
              "order": "desc"}  # fmt: skip
    assert len(await _ids(found, "viewer", **params)) == 4


async def test_no_results_says_so_and_keeps_the_search(found: World) -> None:
    async with found.client("viewer") as client:
        page = (await client.get("/sessions", params={"q": "backgammon"})).text
    assert "No session matches “backgammon” with these filters" in page
    assert 'value="backgammon"' in page
    assert "0 of 4 sessions" in page


async def test_rows_carry_a_human_title_and_the_result(found: World) -> None:
    async with found.client("viewer") as client:
        page = (await client.get("/sessions", params={"q": "maze-hard"})).text
    assert "<b>maze-hard</b> · carol · exp_maze" in page
    assert 'class="tag tag-blocked">not passed</span>' in page
    assert '<span class="muted">reward</span> 0.25' in page  # the metric the report leads with
    async with found.client("viewer") as client:
        page = (await client.get("/sessions", params={"q": "chess-opening"})).text
    assert "<b>chess-opening</b> · alice · <span" in page
    assert "standalone" in page
    assert "no verdict" in page


async def test_paging_keeps_the_filters_in_its_links(found: World) -> None:
    async with found.client("viewer") as client:
        page = await client.get("/sessions", params={"q": "maze", "page": 2})
    assert page.status_code == 404  # one page of two sessions
    from envharness.service.pages.session_search import SessionsPageQuery, page_href

    query = SessionsPageQuery(q="a b", status="failed", sort="turns")
    assert page_href(query, page=3) == "/sessions?q=a+b&status=failed&sort=turns&page=3"
    assert page_href(SessionsPageQuery()) == "/sessions"


async def test_compare_selected_goes_to_compare_with_two_and_explains_otherwise(
    found: World,
) -> None:
    async with found.client("viewer") as client:
        two = await client.get(
            "/sessions", params=[("compare", MAZE_EASY.id), ("compare", MAZE_HARD.id)]
        )
        assert two.status_code == 303
        assert two.headers["location"] == f"/compare?left={MAZE_EASY.id}&right={MAZE_HARD.id}"
        one = await client.get("/sessions", params=[("q", "maze"), ("compare", MAZE_EASY.id)])
        assert one.status_code == 200
        assert "Compare takes exactly two sessions; 1 was ticked" in one.text
        assert f'value="{MAZE_EASY.id}" form="search-compare" aria-label' in one.text
        assert " checked>" in one.text
        # The compare form carries the search, so a refused choice shows the same list.
        assert '<input type="hidden" name="q" value="maze">' in one.text
        assert set(_listed(one.text)) == {MAZE_EASY.id, MAZE_HARD.id}


async def test_a_participant_finds_only_its_own_sessions(found: World) -> None:
    mine = {MAZE_EASY.id, CHESS_ALICE.id}
    assert set(await _ids(found, "alice")) == mine
    # Searching for what only others' sessions hold finds nothing, and counts nothing.
    async with found.client("alice") as client:
        for params in ({"q": "carol"}, {"q": "chess-endgame"}, {"q": CHESS_CAROL.id[:-2]},
                       {"q": "bob"}):  # fmt: skip
            page = (await client.get("/sessions", params=params)).text
            assert _listed(page) == [], params
            assert "0 of 2 sessions" in page
            shown = page.replace(params["q"], "")  # the search box echoes what was typed
            assert all(hidden not in shown for hidden in (
                CHESS_CAROL.id, MAZE_HARD.id, "chess-endgame", "maze-hard", "carol", "bob",
            ))  # fmt: skip
        page = (await client.get("/sessions", params={"experiment": "exp_maze"})).text
        assert _listed(page) == [MAZE_EASY.id]
        assert "1 of 2 sessions" in page
        assert "maze-hard" not in page
        assert "<b>maze-easy</b> · alice · exp_maze" in page
        # Scores are about everyone: no result column, and no filtering by it.
        assert "Result" not in page
        assert "passed" not in page
        refused = await client.get("/sessions", params={"passed": "yes"})
        assert refused.status_code == 422
        assert "cannot filter by them" in refused.text
    # An experiment only others take part in is refused like one that does not exist.
    assert await _refusal(found, "alice", "exp_carol") == await _refusal(found, "alice", "nope")
    assert set(await _ids(found, "viewer", experiment="exp_carol")) == {CHESS_CAROL.id}


async def _refusal(world: World, role: str, experiment: str) -> str:
    async with world.client(role) as client:
        page = await client.get("/sessions", params={"experiment": experiment})
    assert page.status_code == 422
    return page.text.replace(experiment, "EXP")


async def _api_ids(world: World, role: str, **params: Any) -> list[str]:
    async with world.client(role) as client:
        response = await client.get("/api/sessions", params=params)
    assert response.status_code == 200, response.text
    return [summary["id"] for summary in response.json()["sessions"]]


async def test_the_json_listing_takes_the_same_search_and_keeps_its_order(found: World) -> None:
    created = [MAZE_EASY.id, MAZE_HARD.id, CHESS_ALICE.id, CHESS_CAROL.id]
    assert await _api_ids(found, "viewer") == created  # unchanged: oldest first
    assert await _api_ids(found, "viewer", q="carol") == [MAZE_HARD.id, CHESS_CAROL.id]
    assert await _api_ids(found, "viewer", passed="none") == [CHESS_ALICE.id]
    assert await _api_ids(found, "viewer", sort="turns", order="desc", q="maze") == [
        MAZE_EASY.id,
        MAZE_HARD.id,
    ]
    assert await _api_ids(found, "viewer", experiment="exp_nope") == []  # as before
    paged = await _api_ids(found, "viewer", q="chess", limit=1, after=CHESS_ALICE.id)
    assert paged == [CHESS_CAROL.id]
    assert await _api_ids(found, "alice", q="carol") == []
    assert await _api_ids(found, "alice", q="alice") == [MAZE_EASY.id, CHESS_ALICE.id]
    async with found.client("viewer") as client:
        refused = await client.get("/api/sessions", params={"sort": "name"})
        assert refused.status_code == 422
        assert "give one of: created, turns, updated" in refused.text
    async with found.client("alice") as client:
        refused = await client.get("/api/sessions", params={"passed": "no"})
        assert refused.status_code == 422


async def test_compare_says_what_lines_up_across_environments(found: World) -> None:
    async with found.client("viewer") as client:
        apart = (await client.get(
            "/compare", params={"left": MAZE_HARD.id, "right": CHESS_CAROL.id}
        )).text  # fmt: skip
        same = (await client.get(
            "/compare", params={"left": MAZE_EASY.id, "right": MAZE_HARD.id}
        )).text  # fmt: skip
    environment = MAZE_EASY.config.environment.name
    assert "These sessions ran different environments" in apart
    assert f"<b>{environment}</b> (left) and <b>chess-board</b> (right)" in apart
    assert "scores line up only for metrics both reports name" in apart
    assert "different environments" not in same
    # What lined up, and what only one side has, by name.
    assert (
        "Lined up: turns <b>1\u20132</b>, participants <b>carol</b>, metrics <b>total</b>" in apart
    )
    assert "Not compared: metrics only the left has: <b>reward</b>." in apart
    async with found.client("viewer") as client:
        api = (await client.get(
            "/api/compare", params={"left": MAZE_EASY.id, "right": CHESS_CAROL.id}
        )).json()["alignment"]  # fmt: skip
    assert api["left_only_participants"] == ["alice", "bob"]
    assert api["right_only_participants"] == ["carol"]
    assert (api["participants"], api["left_only_turns"]) == ([], [3])
