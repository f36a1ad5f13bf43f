"""The viewer's Trajectories destination, a trajectory's page, a session's Trajectory tab, and
the snapshot, dataset and source pages — for each role, with bad input, and at 10,000 turns."""

from __future__ import annotations

import re

import pytest

from tests.service._support import World, get_page
from tests.service._trajectory_support import (
    frozen_names,
    solo_session,
    trio_session,
)
from tests.trajectories._support import flip_payload_byte

pytestmark = pytest.mark.anyio

GAME_1, GAME_2 = "quickstart/replay:game-1", "quickstart/replay:game-2"


def _rows(text: str) -> list[str]:
    """The trajectory ids listed in a trajectories table, in order."""
    table = text.split('<table class="table trajectories">', 1)[-1].split("</table>", 1)[0]
    return re.findall(r'<a class="mono" href="/trajectories/([^"]+)">', table)


async def test_trajectories_is_a_global_destination_listing_every_trajectory(world: World) -> None:
    text = await get_page(world, "viewer", "/")
    assert '<a href="/trajectories">Trajectories</a>' in text
    text = await get_page(world, "viewer", "/trajectories")
    assert 'aria-current="page" class="active">Trajectories</a>' in text
    rows = _rows(text)
    assert len(rows) == 16
    assert rows[-2:] == [GAME_1, GAME_2]
    for label in ("Snapshots", "Datasets", "Sources", "Verified outcome", "Collection"):
        assert label in text
    assert 'class="tag st st-gaps"' in text
    assert 'class="tag tag-imported">imported' in text
    snapshot, _ = await frozen_names(world)
    assert text.count(f'href="/snapshots/{snapshot}"') == 10  # the experiment's, frozen


async def test_filters_narrow_the_list_and_count_each_state(world: World) -> None:
    text = await get_page(world, "viewer", "/trajectories?collection=gaps")
    assert _rows(text) == [GAME_2]
    assert '<a class="chip active" href="/trajectories?collection=gaps">gaps' in text
    assert _rows(await get_page(world, "viewer", "/trajectories?origin=imported")) == [
        GAME_1,
        GAME_2,
    ]
    assert _rows(await get_page(world, "viewer", "/trajectories?source=quickstart/replay")) == [
        GAME_1,
        GAME_2,
    ]
    none = await get_page(world, "viewer", "/trajectories?outcome=disputed")
    assert _rows(none) == []
    assert "No trajectory matches these filters." in none
    experiment = await get_page(world, "viewer", "/experiments")
    [experiment_id] = re.findall(r'href="/experiments/(exp_[0-9a-f]+)"', experiment)[:1]
    grid = await get_page(world, "viewer", f"/experiments/{experiment_id}")
    assert f'href="/trajectories?experiment={experiment_id}">their trajectories' in grid
    grouped = await get_page(world, "viewer", f"/trajectories?experiment={experiment_id}")
    assert len(_rows(grouped)) == 10
    assert "(all experiments)" in grouped


async def test_a_trajectory_page_shows_states_segments_binding_and_check(world: World) -> None:
    trio = await trio_session(world)
    text = await get_page(world, "viewer", f"/trajectories/{trio}")
    for part in (
        "States",
        "Digest binding",
        "Segments",
        "Reward chain",
        "Participants",
        "Intact.",
        "sha256-chain/1",
        "resume",
        "after segment 0",
    ):
        assert part in text, part
    assert f'href="/sessions/{trio}"' in text  # links to its session
    tab = await get_page(world, "viewer", f"/sessions/{trio}/trajectory")
    assert 'aria-current="page" class="active">Trajectory</a>' in tab
    assert "Intact." in tab
    unchecked = await get_page(world, "viewer", f"/sessions/{trio}/trajectory?check=false")
    assert "Intact." not in unchecked
    assert "?check=true" in unchecked
    imported = await get_page(world, "admin", f"/trajectories/{GAME_2}")
    for part in (
        "Provenance",
        "quickstart/replay",
        "sha256-source-chain/1",
        "st-gaps",
        "not declared",
        "Intact.",
    ):
        assert part in imported, part


async def test_an_altered_record_shows_where_the_check_fails(world: World) -> None:
    trio = await trio_session(world)
    flip_payload_byte(world.store, trio, 7)
    text = await get_page(world, "viewer", f"/sessions/{trio}/trajectory")
    assert "Does not match its binding." in text
    assert "record seq 7" in text
    assert f'href="/sessions/{trio}/records/7"' in text


async def test_a_participant_sees_its_own_trajectories_and_nothing_of_the_others(
    world: World,
) -> None:
    text = await get_page(world, "alice", "/trajectories")
    async with world.client("alice") as client:
        own = {s["id"] for s in (await client.get("/api/sessions?limit=100")).json()["sessions"]}
    assert set(_rows(text)) == own
    assert GAME_1 not in text
    assert 'href="/snapshots"' not in text
    assert "Verified outcome</span>" not in text
    await get_page(world, "alice", "/trajectories?outcome=verified", 403)
    trio = await trio_session(world)
    tab = await get_page(world, "alice", f"/sessions/{trio}/trajectory")
    assert "Digest binding" not in tab
    assert "Reward chain" not in tab
    assert "Your part" in tab
    assert ">Progression</a>" not in tab
    assert ">Configuration</a>" not in tab
    solo = await solo_session(world)
    hidden = await get_page(world, "bob", f"/trajectories/{solo}", 404)
    missing = await get_page(world, "bob", "/trajectories/ses_00000000000000000000ff", 404)
    assert hidden.replace(solo, "X") == missing.replace("ses_00000000000000000000ff", "X")
    await get_page(world, "alice", f"/trajectories/{GAME_1}", 404)
    for path in ("/snapshots", "/datasets", "/sources", "/snapshots/snp_nope", "/datasets/x"):
        await get_page(world, "alice", path, 403)


async def test_snapshot_dataset_and_source_pages(world: World) -> None:
    snapshot, dataset = await frozen_names(world)
    listing = await get_page(world, "viewer", "/snapshots")
    assert f'href="/snapshots/{snapshot}"' in listing
    assert f'href="/api/snapshots/{snapshot}/export"' in listing
    assert "training-entitled" in listing
    one = await get_page(world, "viewer", f"/snapshots/{snapshot}")
    assert len(_rows(one)) == 10
    assert "Check its evidence now" in one
    assert dataset in one
    checked = await get_page(world, "viewer", f"/snapshots/{snapshot}?check=true")
    assert "Intact." in checked
    datasets = await get_page(world, "viewer", "/datasets")
    assert dataset in datasets
    assert 'metric <span class="mono">total</span>' in datasets
    shown = await get_page(world, "viewer", f"/datasets/{dataset}")
    assert "First rows" in shown
    assert shown.count('<a class="mono small" href="/trajectories/') == 3
    assert "/export" in shown
    assert snapshot in shown
    sources = await get_page(world, "viewer", "/sources")
    assert 'id="quickstart/replay"' in sources
    assert "1 capture failure(s)" in sources
    assert 'href="/trajectories?source=quickstart/replay"' in sources


async def test_unknown_things_are_404_pages_and_bad_parameters_422(world: World) -> None:
    for path in (
        "/trajectories/ses_00000000000000000000ff",
        "/trajectories/no/such:episode",
        "/snapshots/snp_nope",
        "/snapshots/garbage",
        "/datasets/nope",
        "/sessions/ses_00000000000000000000ff/trajectory",
        "/trajectories?page=9",
    ):
        assert "Not found" in await get_page(world, "viewer", path, 404), path
    for path, parameter in (
        ("/trajectories?page=0", "page"),
        ("/trajectories?execution=sideways", "execution"),
        ("/snapshots/snp_x?check=maybe", "check"),
        ("/trajectories?shape=round", "shape"),
    ):
        text = await get_page(world, "viewer", path, 422)
        assert f"&#x27;{parameter}&#x27;" in text, path


async def test_what_agents_and_sources_wrote_is_escaped(world: World) -> None:
    trio = await trio_session(world)
    async with world.client("admin") as client:
        made = await client.post(
            "/api/snapshots", json={"sessions": [trio], "label": "<script>alert(1)</script>"}
        )
    snapshot = made.json()["id"]
    for path in ("/snapshots", f"/snapshots/{snapshot}"):
        text = await get_page(world, "viewer", path)
        assert "<script>alert" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


async def test_links_to_an_episode_with_url_characters_in_its_id_reach_it(world: World) -> None:
    # An episode id is the source's own text: unencoded, '?' and '#' cut the link short.
    from envharness.trajectories.sources import SourceChain, import_records

    episode = "run 1/ä?x=1#y%2F"
    chain = SourceChain("acme/odd")
    rows = [
        chain.seal(episode, "episode.started", {}),
        chain.seal(episode, "episode.ended", {"status": "completed"}),
    ]
    await import_records(world.store, "acme/odd", rows)
    text = await get_page(world, "viewer", "/trajectories?source=acme/odd")
    [href] = re.findall(r'<a class="mono" href="(/trajectories/[^"]+)">', text)
    assert href == "/trajectories/acme/odd:run%201/%C3%A4%3Fx%3D1%23y%252F"
    page = await get_page(world, "viewer", href)
    assert '<h1><span class="mono">acme/odd:run 1/ä?x=1#y%2F</span>' in page
    unchecked = await get_page(world, "viewer", f"{href}?check=false")
    assert f'href="{href}?check=true"' in unchecked


async def test_a_ten_thousand_turn_session_s_trajectory_page_stays_small(
    long_observed_world: tuple[World, str],
) -> None:
    world, session = long_observed_world
    for role in ("viewer", "alice"):
        text = await get_page(world, role, f"/sessions/{session}/trajectory")
        assert len(text) < 20_000  # a summary, never the records
    text = await get_page(world, "viewer", f"/sessions/{session}/trajectory")
    assert "20,006 records" in text
    assert "Intact." in text
    listing = await get_page(world, "viewer", "/trajectories")
    assert _rows(listing) == [session]
    assert len(listing) < 20_000
