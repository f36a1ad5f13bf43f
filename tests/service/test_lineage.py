"""Lineage and comparison through the service: the API, a participant's cut of them, and the
viewer's lineage cards, Turns markers and Compare page, over the quickstart's checkpointed
trio and its branch."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import msgspec
import pytest

from envharness.api.harness import AsyncEnvironmentHarness
from envharness.cli.quickstart import BRANCH as PLAN
from envharness.cli.quickstart import STANDALONE, BoardEnvironment
from envharness.errors import ConfigurationError
from envharness.runtime.branching import CheckpointRef
from envharness.runtime.compare import compare_sessions
from envharness.service.wire.sessions import ComparisonOut, LineageOut, Problem
from envharness.store import RecordFilter
from tests.service._support import (
    BRANCH,
    FLAKY,
    SOLO,
    TRIO,
    SessionWriter,
    World,
    make_world,
    write_store,
)

pytestmark = pytest.mark.anyio

MISSING = "ses_00000000000000000000ff"


async def _ids(world: World) -> list[str]:
    async with world.client("admin") as client:
        return [s["id"] for s in (await client.get("/api/sessions")).json()["sessions"]]


async def _lineage(world: World, session_id: str, role: str = "viewer") -> LineageOut:
    async with world.client(role) as client:
        response = await client.get(f"/api/sessions/{session_id}/lineage")
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=LineageOut)


async def _compare(world: World, left: str, right: str, role: str = "viewer") -> ComparisonOut:
    async with world.client(role) as client:
        response = await client.get("/api/compare", params={"left": left, "right": right})
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=ComparisonOut)


# -- the API ---------------------------------------------------------------------------------


async def test_lineage_names_the_parent_checkpoint_and_intervention_and_the_branches(
    world: World,
) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    parent = await _lineage(world, trio)
    assert (parent.session_id, parent.parent) == (trio, None)
    [child] = parent.children
    assert child.session.id == branch
    assert (child.checkpoint_turn, child.checkpoint_label) == (3, "turn 3")
    assert (child.intervention, child.reason) == (dict(PLAN.intervention), PLAN.reason)
    assert child.session.status == "completed"
    assert child.session.turns_completed == 3 + PLAN.turns

    lineage = await _lineage(world, branch)
    assert lineage.children == []
    assert lineage.parent is not None
    assert lineage.parent.session.id == trio
    assert lineage.parent.checkpoint_seq == child.checkpoint_seq
    assert lineage.parent.intervention == dict(PLAN.intervention)
    async with world.client("viewer") as client:
        record = (
            await client.get(
                f"/api/sessions/{trio}/records",
                params={"after": child.checkpoint_seq - 1, "limit": 1},
            )
        ).json()["records"][0]
    assert (record["kind"], record["payload"]["turn"]) == ("checkpoint", 3)

    original = await _lineage(world, ids[SOLO])
    assert (original.parent, original.children) == (None, [])


async def test_compare_answers_what_the_harness_compare_finds(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    found = await _compare(world, trio, branch)
    expected = await compare_sessions(world.service.store, trio, branch)
    assert (found.left.id, found.right.id) == (trio, branch)
    assert found.turns_compared == list(expected.turns_compared) == [4, 5]
    assert found.differences == list(expected.differences)
    assert {s.metric: (s.left, s.right) for s in found.scores} == expected.scores
    assert found.identical is expected.identical is False
    first = next(d for d in found.differences if d.kind == "observation")
    assert (first.turn, first.participant) == (4, "alice")
    assert first.right["total"] == PLAN.intervention["value"]
    assert {d.participant for d in found.differences} == {None, "alice", "bob", "carol"}
    same = await _compare(world, trio, trio)
    assert same.identical
    assert same.differences == []


async def test_bad_lineage_and_compare_requests_name_what_is_wrong(world: World) -> None:
    ids = await _ids(world)
    async with world.client("viewer") as client:
        for params, parameter in (({"left": ids[0]}, "right"), ({"right": ids[0]}, "left")):
            response = await client.get("/api/compare", params=params)
            assert response.status_code == 422
            problem = msgspec.json.decode(response.content, type=Problem)
            assert problem.parameter == parameter
            assert f"'{parameter}' is required" in problem.message
        extra = await client.get(
            "/api/compare", params={"left": ids[0], "right": ids[1], "turn": 2}
        )
        assert (extra.status_code, extra.json()["parameter"]) == (422, "turn")
        for url in (
            f"/api/compare?left={ids[0]}&right={MISSING}",
            f"/api/compare?left={ids[0][:-2]}&right={ids[1]}",  # a prefix is not an id
            f"/api/sessions/{MISSING}/lineage",
            f"/api/sessions/{ids[0][:-2]}/lineage",
        ):
            assert (await client.get(url)).status_code == 404, url


# -- a participant's cut ---------------------------------------------------------------------


async def test_a_participant_compares_only_its_own_records(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    full = await _compare(world, trio, branch)
    for name in ("alice", "bob"):
        mine = await _compare(world, trio, branch, role=name)
        assert mine.differences == [d for d in full.differences if d.participant == name]
        assert mine.scores == []
        assert mine.turns_compared == full.turns_compared
        assert mine.left.records is None
        assert mine.left.reason is None
        async with world.client(name) as client:
            body = (await client.get("/api/compare", params={"left": trio, "right": branch})).text
            page = (await client.get("/compare", params={"left": trio, "right": branch})).text
        other = "bob" if name == "alice" else "alice"
        for text in (body, page):
            assert other not in text
            assert "carol" not in text
            assert "environment" not in text.replace("envharness", "")


async def test_a_participant_sees_lineage_without_the_session_level_records(
    world: World,
) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    lineage = await _lineage(world, branch, role="alice")
    assert lineage.parent is not None
    link = lineage.parent
    full = await _lineage(world, branch)
    assert full.parent is not None
    assert (link.session.id, link.checkpoint_seq) == (trio, full.parent.checkpoint_seq)
    assert (link.checkpoint_turn, link.checkpoint_label, link.intervention, link.reason) == (
        None,
        None,
        None,
        None,
    )
    assert link.session.records is None
    assert [c.session.id for c in (await _lineage(world, trio, role="bob")).children] == [branch]


async def test_hidden_sessions_answer_like_missing_ones(world: World) -> None:
    ids = await _ids(world)
    flaky, solo = ids[FLAKY], ids[SOLO]  # dana's; alice's alone
    async with world.client("bob") as client:
        pairs = [
            (f"/api/sessions/{flaky}/lineage", f"/api/sessions/{MISSING}/lineage"),
            (f"/api/compare?left={ids[TRIO]}&right={solo}",
             f"/api/compare?left={ids[TRIO]}&right={MISSING}"),
            (f"/api/compare?left={solo}&right={ids[TRIO]}",
             f"/api/compare?left={MISSING}&right={ids[TRIO]}"),
            (f"/compare?left={ids[TRIO]}&right={solo}",
             f"/compare?left={ids[TRIO]}&right={MISSING}"),
        ]  # fmt: skip
        for hidden_url, missing_url in pairs:
            hidden, missing = await client.get(hidden_url), await client.get(missing_url)
            assert hidden.status_code == missing.status_code == 404, hidden_url
            assert hidden.text.replace(flaky, "X").replace(solo, "X") == missing.text.replace(
                MISSING, "X"
            )


async def test_a_bound_token_sees_only_the_lineage_it_is_bound_to(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    issued = await world.service.tokens.issue("participant", participant="carol", sessions=[trio])
    headers = {"Authorization": f"Bearer {issued.secret}"}
    async with world.client("none", headers=headers) as client:
        lineage = msgspec.json.decode(
            (await client.get(f"/api/sessions/{trio}/lineage")).content, type=LineageOut
        )
        assert (lineage.parent, lineage.children) == (None, [])
        assert (await client.get(f"/api/sessions/{branch}/lineage")).status_code == 404
        compared = await client.get("/api/compare", params={"left": trio, "right": branch})
        assert compared.status_code == 404
        page = await client.get(f"/sessions/{trio}")
        assert page.status_code == 200
        assert branch not in page.text


# -- the viewer ------------------------------------------------------------------------------


async def test_session_pages_show_the_lineage_with_links_to_compare(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    compare = f'href="/compare?left={trio}&amp;right={branch}"'
    async with world.client("viewer") as client:
        parent = (await client.get(f"/sessions/{trio}")).text
        child = (await client.get(f"/sessions/{branch}")).text
        config = (await client.get(f"/sessions/{branch}/config")).text
        original = (await client.get(f"/sessions/{ids[SOLO]}")).text
        original_config = (await client.get(f"/sessions/{ids[SOLO]}/config")).text
    assert 'id="lineage"' in parent
    assert f'href="/sessions/{branch}"' in parent
    assert compare in parent
    assert PLAN.reason in parent
    assert "reset-total" in parent
    assert f'href="/sessions/{trio}/records/' in parent  # the checkpoint record
    for page in (child, config):
        assert f'href="/sessions/{trio}"' in page
        assert compare in page
        assert "Compare with parent" in page
        assert "after turn 3" in page
    assert "5 of 5 turns" in child
    assert "3, then continued to turn 5" in config
    assert 'id="lineage"' not in original  # nothing to say on an original's overview
    assert "An original session" in original_config


async def test_the_turns_of_a_branch_start_after_its_checkpoint(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    async with world.client("viewer") as client:
        turns = (await client.get(f"/sessions/{branch}/turns")).text
        from_four = (await client.get(f"/sessions/{branch}/turns", params={"turn": 4})).text
    assert [int(n) for n in re.findall(r'data-turn="(\d+)"', turns)] == [4, 5]
    opening = turns.index('class="marker marker-branch"')
    assert opening < turns.index('id="turn-4"')
    assert f'href="/sessions/{trio}"' in turns[opening:]
    assert "reset-total" in turns
    assert PLAN.reason in turns
    assert f'href="/compare?left={trio}&amp;right={branch}"' in turns
    assert [int(n) for n in re.findall(r'data-turn="(\d+)"', from_four)] == [4, 5]
    assert 'class="marker marker-branch"' in from_four
    async with world.client("alice") as client:
        mine = (await client.get(f"/sessions/{branch}/turns")).text
    assert [int(n) for n in re.findall(r'data-turn="(\d+)"', mine)] == [4, 5]
    assert "marker" not in mine  # session-level records are not a participant's


async def test_checkpoints_and_continuations_are_marked_between_turns(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    lineage = await _lineage(world, trio)
    seq = lineage.children[0].checkpoint_seq
    async with world.client("viewer") as client:
        turns = (await client.get(f"/sessions/{trio}/turns")).text
        only_bob = await client.get(f"/sessions/{trio}/turns", params={"participant": "bob"})
    checkpoint = turns.index(f'<div class="marker marker-checkpoint" id="r{seq}">')
    continued = turns.index("<b>Continued</b> after turn 3, to turn 5")
    assert turns.index('id="turn-3"') < checkpoint < continued < turns.index('id="turn-4"')
    assert "after turn 3: the state kept to branch from" in turns
    assert f'href="/sessions/{branch}"' in turns[checkpoint:continued]
    assert "marker" not in only_bob.text


@pytest.fixture
def refused(world: World) -> tuple[World, str]:
    """The quickstart with an intervention the environment refused, on the solo session."""

    async def refuse() -> str:
        [solo_plan] = [plan for plan in STANDALONE if plan.name == "solo"]
        harness = AsyncEnvironmentHarness(
            world.store, environment=lambda: BoardEnvironment(3), agents=solo_plan.agents
        )
        solo = (await _ids(world))[SOLO]
        checkpoint: CheckpointRef = await harness.checkpoint(solo, label="before the chaos")
        with pytest.raises(ConfigurationError, match="rejected the intervention"):
            await harness.branch(checkpoint, intervention={"kind": "explode"}, reason="chaos")
        return solo

    return world, anyio.run(refuse)


async def test_a_refused_intervention_shows_where_it_was_asked(
    refused: tuple[World, str],
) -> None:
    world, solo = refused
    async with world.client("viewer") as client:
        turns = (await client.get(f"/sessions/{solo}/turns")).text
    assert "<b>Intervention refused</b>" in turns
    assert "explode" in turns
    assert "(no branch was made)" in turns
    assert "“before the chaos”" in turns
    assert turns.index("marker-checkpoint") < turns.index("marker-refused")


async def test_the_compare_page_shows_differences_side_by_side(world: World) -> None:
    ids = await _ids(world)
    trio, branch = ids[TRIO], ids[BRANCH]
    found = await _compare(world, trio, branch)
    async with world.client("viewer") as client:
        page = (await client.get("/compare", params={"left": trio, "right": branch})).text
        swapped = (await client.get("/compare", params={"left": branch, "right": trio})).text
        unrelated = (await client.get("/compare", params={"left": ids[SOLO], "right": trio})).text
        missing = await client.get("/compare", params={"left": trio})
        beyond = await client.get("/compare", params={"left": trio, "right": branch, "turn": 9})
    assert "Turns 4\u20135 compared" in page
    assert "<b>Right</b> is a branch of <b>left</b>" in page
    assert "<b>Left</b> is a branch of <b>right</b>" in swapped
    assert "not a parent and its branch" in unrelated
    assert [
        int(n) for n in re.findall(r'<section class="turn card[^"]*" id="turn-(\d+)"', page)
    ] == [
        4,
        5,
    ]
    rows = page.count('<td class="c-left">')
    assert rows == page.count('<td class="c-right">') == len(found.differences)
    for label in ("observation", "executed action", "outcome"):
        assert f'<div class="what">{label}</div>' in page
    assert 'class="kv changed"' in page  # the total that differs is marked
    scores = {s.metric: s for s in found.scores}
    assert scores["total"].left != scores["total"].right
    assert '<td class="num delta">' in page
    assert f'href="/compare?left={branch}&amp;right={trio}"' in page  # swap sides
    assert missing.status_code == 422
    assert "right" in missing.text
    assert beyond.status_code == 404


@pytest.fixture
def long_pair(tmp_path: Path) -> tuple[World, str, str]:
    first = SessionWriter(["alice"], turns=45)
    second = SessionWriter(["alice"], turns=45)
    store = tmp_path / "store"
    write_store(store, [(first, 45), (second, 45)])
    return make_world(store), first.id, second.id


async def test_the_compare_page_is_windowed_over_long_sessions(
    long_pair: tuple[World, str, str],
) -> None:
    world, left, right = long_pair
    async with world.client("viewer") as client:
        first = (await client.get("/compare", params={"left": left, "right": right})).text
        later = await client.get("/compare", params={"left": left, "right": right, "turn": 21})
    shown = [int(n) for n in re.findall(r'class="turn card[^"]*" id="turn-(\d+)"', first)]
    assert shown == list(range(1, 21))
    assert "no differences" in first
    assert f"/compare?left={left}&amp;right={right}&amp;turn=21" in first
    assert "turns 1&ndash;20 of 45 compared" in first
    assert [int(n) for n in re.findall(r'id="turn-(\d+)"', later.text)] == list(range(21, 41))
    assert "Turns 1\u201345 compared" in first
    assert "no differences, and the same scores" in first


async def test_the_branch_records_read_back_as_stored(world: World) -> None:
    """The branch is evidence like any other: chained, and its lineage in its own records."""
    ids = await _ids(world)
    branch = ids[BRANCH]
    kinds = [
        record.kind
        async for record in world.service.store.records(
            branch, RecordFilter(kinds=("branch", "intervention", "segment.started"))
        )
    ]
    assert kinds == ["branch", "intervention", "segment.started", "segment.started"]
    async with world.client("viewer") as client:
        assert (await client.get("/api/verify")).json()["ok"]


@pytest.fixture
def paused(world: World) -> tuple[World, str, str]:
    """A second branch of the trio, from a new checkpoint, not continued yet."""

    async def branch_again() -> tuple[str, str]:
        [trio_plan] = [plan for plan in STANDALONE if plan.name == "trio"]
        harness = AsyncEnvironmentHarness(
            world.store, environment=lambda: BoardEnvironment(3), agents=trio_plan.agents
        )
        trio = (await _ids(world))[TRIO]
        checkpoint = await harness.checkpoint(trio)
        child = await harness.branch(
            checkpoint, intervention={"kind": "reset-total", "value": 9}, reason="later"
        )
        return trio, child.id

    return world, *anyio.run(branch_again)


async def test_a_paused_branch_says_where_it_starts_and_waits(
    paused: tuple[World, str, str],
) -> None:
    world, trio, child = paused
    lineage = await _lineage(world, trio)
    assert [(c.session.id, c.checkpoint_turn, c.reason) for c in lineage.children][1:] == [
        (child, 5, "later")
    ]
    async with world.client("viewer") as client:
        turns = (await client.get(f"/sessions/{child}/turns")).text
        page = (await client.get("/compare", params={"left": trio, "right": child})).text
        parent_turns = (await client.get(f"/sessions/{trio}/turns")).text
    assert "the branch is paused until it is continued" in turns
    assert 'class="marker marker-branch"' in turns
    assert f'data-live="{child}"' in turns  # paused is not an end: it streams what comes
    assert " 0 turns " in turns
    assert "reached no turn in common" in page
    assert parent_turns.count('class="marker marker-checkpoint"') == 2
    assert parent_turns.index(f'href="/sessions/{child}"') > parent_turns.index('id="turn-5"')
