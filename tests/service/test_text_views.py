"""Text views and the new record kinds in the viewer: ANSI colours drawn as classes (never as
escape codes), everything escaped, the JSON one click away; private outcomes, rewards,
truncation and per-participant scores shown as such.

The store is a real run of the card-table game of ``_views_support`` (one per module).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envharness._ansi import PLAIN, Style, nearest_basic, runs, strip
from envharness.service.pages.text_view import text_view
from tests.service._support import World, get_page, make_world
from tests.service._views_support import write_views_store

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, str]:
    """A service over the card table's store, and the table session's id."""
    store = tmp_path_factory.mktemp("text-views") / "store"
    session_id, _ = write_views_store(store)
    return make_world(store), session_id


# -- reading ANSI --------------------------------------------------------------------------------


def test_sgr_sequences_become_styles() -> None:
    found = runs("\x1b[1;31mR\x1b[0m: \x1b[38;5;208mo\x1b[48;2;1;2;3mk\x1b[39;49m.\x1b[7mi\x1b[m")
    assert found == [
        ("R", Style(fg=1, bold=True)),
        (": ", PLAIN),
        ("o", Style(fg=208)),
        ("k", Style(fg=208, bg=(1, 2, 3))),
        (".", PLAIN),
        ("i", Style(inverse=True)),
    ]
    assert runs("\x1b[38:2::255:0:0mr\x1b[38:5:12mb\x1b[92mg\x1b[22;24m")[:3] == [
        ("r", Style(fg=(255, 0, 0))),
        ("b", Style(fg=12)),
        ("g", Style(fg=10)),
    ]


def test_every_other_escape_sequence_is_dropped_and_controls_are_made_visible() -> None:
    text = "a\x1b]0;title\x07b\x1b]8;;http://x\x1b\\c\x1b[2Jd\x1b[?25le\x1bPdcs\x1b\\f\x1b(Bg\x1b"
    assert strip(text) == "abcdefg"
    assert strip("bell\x07 nul\x00 cr\r\nnext\x9b31m!\x7f") == "bell\\x07 nul\\x00 cr\nnext!\\x7f"
    assert strip("cut off \x1b[31") == "cut off "
    assert strip("unterminated \x1b]0;title") == "unterminated "
    assert strip("tabs\tand\nnewlines") == "tabs\tand\nnewlines"


def test_unknown_and_malformed_parameters_change_nothing() -> None:
    assert runs("\x1b[5;8;9mx") == [("x", PLAIN)]  # blink, conceal, strike: not drawn
    assert runs("\x1b[38;5mx\x1b[38;2;1;2mz") == [("xz", PLAIN)]
    assert runs("\x1b[31m\x1b[?1mx") == [("x", Style(fg=1))]


def test_colours_outside_the_basic_sixteen_are_shown_as_the_nearest_one() -> None:
    assert [nearest_basic(index) for index in (0, 9, 15)] == [0, 9, 15]
    assert nearest_basic(196) == 1  # the cube's pure red
    assert nearest_basic(232) == 0  # the darkest grey
    assert nearest_basic((250, 250, 250)) == 15


def test_a_text_view_is_escaped_markup_with_classes_and_no_escape_code() -> None:
    drawn = text_view("\x1b[1;31m<b>&</b>\x1b[0m \x1b[7mx\x1b[0m\x1b]0;t\x07")
    assert drawn == (
        '<pre class="textview"><span class="ansi-fg1 ansi-bold">&lt;b&gt;&amp;&lt;/b&gt;</span>'
        ' <span class="ansi-inverse">x</span></pre>'
    )
    cut = text_view("\x1b[31m" + "x" * 30, limit=10)
    assert '<span class="ansi-fg1">xxxxxxxxxx</span></pre><div class="cut">20 more' in cut


# -- the Turns page ------------------------------------------------------------------------------


async def test_an_observation_shows_its_text_view_with_the_json_one_click_away(
    table: tuple[World, str],
) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}/turns")
    assert "\x1b" not in page
    assert "\x9b" not in page
    assert "pwned" not in page  # the terminal title the view tried to set
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;view&#x27;)&lt;/script&gt;" in page
    observed = re.search(r'<div class="rec textual" id="r3">(.*?)</details></div>', page, re.S)
    assert observed is not None
    cell = observed[1]
    assert '<span class="ansi-fg1 ansi-bold">hand</span> secret-alice-view-0' in cell
    assert '<span class="ansi-fg9">chips</span> 0\t' in cell  # 208 is nearest bright red
    assert '<details class="as-json"><summary>JSON</summary>' in cell
    assert "secret-alice-hand-0" in cell  # the JSON, behind the summary


async def test_private_outcomes_rewards_and_truncation_are_drawn_as_such(
    table: tuple[World, str],
) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}/turns")
    bob_told = re.search(r'<div class="rec private-outcome" id="r6">(.*?)</div>', page, re.S)
    assert bob_told is not None
    assert 'class="tag tag-outcome"' in bob_told[1]
    assert "told-bob-1" in bob_told[1]
    assert '<span class="k">reward</span><span class="num">-2</span>' in bob_told[1]
    row = re.search(r'<tr data-participant="bob">(.*?)</tr>', page.split('id="turn-1"')[1], re.S)
    assert row is not None
    assert 'id="r6"' in row[1]
    executed = re.search(r'<div class="rec executed" id="r5">(.*?)</div>', page, re.S)
    assert executed is not None
    assert '<span class="k">reward</span><span class="num">2</span>' in executed[1]
    last = page.split('id="turn-3"')[1].split("</header>")[0]
    assert 'class="tag tag-truncated"' in last
    assert "tag-done" not in last
    first = page.split('id="turn-1"')[1].split("</header>")[0]
    assert "tag-truncated" not in first


async def test_the_overview_shows_each_participants_score(table: tuple[World, str]) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}")
    scores = re.search(r'<table class="table compact per-participant">(.*?)</table>', page, re.S)
    assert scores is not None
    assert re.search(r"<th scope=\"row\">alice</th><td class=\"num\">2</td>", scores[1])
    assert re.search(r"<th scope=\"row\">bob</th><td class=\"num\">-2</td>", scores[1])


async def test_a_records_own_page_shows_its_text_view_whole(table: tuple[World, str]) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}/records/3")
    assert "<h3>Text view</h3>" in page
    assert '<span class="ansi-fg1 ansi-bold">hand</span>' in page
    assert "\x1b" not in page


async def test_a_session_without_text_views_renders_as_before(world: World) -> None:
    async with world.client("admin") as client:
        first = (await client.get("/api/sessions")).json()["sessions"][0]["id"]
    page = await get_page(world, "viewer", f"/sessions/{first}/turns")
    assert "rec textual" not in page
    assert "as-json" not in page
    assert "tag-truncated" not in page
    assert "reward" not in page


def test_the_live_script_draws_the_same_classes() -> None:
    """viewer.js renders live records itself: it must know the new kinds and classes."""
    script = (
        Path(__file__).resolve().parents[2] / "envharness/service/pages/static/viewer.js"
    ).read_text()
    for needle in (
        '"outcome.participant": "result"',
        '"rec textual"',
        '"as-json"',
        '"tag-truncated"',
        '"rec private-outcome"',
        '"kv reward"',
        '"ansi-inverse"',
        "/artifact",
    ):
        assert needle in script, needle
