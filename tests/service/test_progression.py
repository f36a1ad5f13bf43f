"""A session's Progression tab: outcome signals plotted over a chosen turn range, as inline
SVG drawn by the server, bounded in size however many turns the session has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envharness.service.pages.plot import HEIGHT, LANE, Mark, Point, Series, line_chart, nice_ticks
from envharness.service.pages.progression import MAX_SERIES, POINTS, Signals, _Outcome
from tests.service._support import World, get_page, make_world
from tests.service._trajectory_support import trio_session, write_signal_session

pytestmark = pytest.mark.anyio


def _points(text: str, signal: str) -> list[tuple[float, float]]:
    """The (x, y) points of a signal's line, or of its dots when it has a single point."""
    group = text.split(f'data-signal="{signal}">', 1)[1].split("</g>", 1)[0]
    lines = re.findall(r'<polyline class="line [^"]+" points="([^"]+)"', group)
    found = [tuple(map(float, pair.split(","))) for line in lines for pair in line.split()]
    if not found:
        found = [(float(x), float(y)) for x, y in re.findall(r'cx="([^"]+)" cy="([^"]+)"', group)]
    return found  # type: ignore[return-value]


async def test_the_tab_plots_the_quickstart_s_signals_with_a_legend(world: World) -> None:
    trio = await trio_session(world)
    text = await get_page(world, "viewer", f"/sessions/{trio}/progression")
    assert 'aria-current="page" class="active">Progression</a>' in text
    main = text.split("<main>")[1].split("</main>")[0]
    assert '<svg class="chart"' in main
    assert "<script" not in main
    assert 'data-signal="total"' in text
    assert "<b>total</b>" in text
    assert len(_points(text, "total")) == 5  # turns 1 to 5: checkpointed after 3, continued
    assert "one point per turn" in text
    assert "recorded: turns 1 to 5" in text
    narrow = await get_page(world, "viewer", f"/sessions/{trio}/progression?from=2&to=3")
    assert "Signals, turns 2 to 3" in narrow
    assert len(_points(narrow, "total")) == 2
    swapped = await get_page(world, "viewer", f"/sessions/{trio}/progression?from=3&to=2")
    assert "Signals, turns 2 to 3" in swapped
    hidden = await get_page(world, "viewer", f"/sessions/{trio}/progression?signal=nothing")
    assert "Not recorded in this range: nothing." in hidden
    assert "None of the chosen signals has a value in this range." in hidden


async def test_it_is_for_admin_and_viewer_tokens_and_checks_its_parameters(world: World) -> None:
    trio = await trio_session(world)
    path = f"/sessions/{trio}/progression"
    await get_page(world, "admin", path)
    for role in ("alice", "bob"):  # outcomes are session level: about every participant
        assert "Not allowed" in await get_page(world, role, path, 403)
    await get_page(world, "none", path, 401)
    await get_page(world, "viewer", "/sessions/ses_00000000000000000000ff/progression", 404)
    for query, parameter in (
        ("from=-1", "from"),
        ("to=x", "to"),
        ("turns=3", "turns"),
        ("from=1&from=2", "from"),
    ):
        text = await get_page(world, "viewer", f"{path}?{query}", 422)
        assert f"&#x27;{parameter}&#x27;" in text, query


@pytest.fixture
def quiet(tmp_path: Path) -> tuple[World, str, str]:
    """A session whose outcomes carry no signals, and one that resolved no turn."""
    store = tmp_path / "store"
    silent = write_signal_session(store, 5, lambda turn: {})
    empty = write_signal_session(store, 0)
    return make_world(store), silent, empty


async def test_no_signals_and_no_outcomes_say_so(quiet: tuple[World, str, str]) -> None:
    world, silent, empty = quiet
    text = await get_page(world, "viewer", f"/sessions/{silent}/progression")
    assert "The environment recorded no signals" in text
    assert "<svg" not in text
    text = await get_page(world, "viewer", f"/sessions/{empty}/progression")
    assert "No outcome records in this range" in text
    assert "<svg" not in text


@pytest.fixture
def long_world(tmp_path: Path) -> tuple[World, str]:
    """One session of 10,000 turns: ``total`` = the turn, ``parity`` alternates 0/1, and every
    100th turn's parity is not a number (recorded as null)."""
    session = write_signal_session(tmp_path / "store", 10_000)
    return make_world(tmp_path / "store"), session


async def test_ten_thousand_turns_are_summarised_never_drawn_point_by_point(
    long_world: tuple[World, str],
) -> None:
    world, session = long_world
    text = await get_page(world, "viewer", f"/sessions/{session}/progression")
    assert len(text) < 80_000
    total = _points(text, "total")
    assert len(total) == POINTS
    assert "one point per 25 turns" in text
    assert total == sorted(total)
    assert total[0][1] > total[-1][1]
    assert 'class="band series-1"' in text  # parity's range in each bucket: 0 to 1
    legend = text.split('<table class="table compact legend">', 1)[1]
    cells = re.findall(r'<td class="num">([^<]*)</td>', legend.split("<b>total</b>")[1])[:4]
    assert cells == ["10000", "1", "10000", "5000"]  # last, lowest, highest, mean (4 digits)
    window = await get_page(world, "viewer", f"/sessions/{session}/progression?from=9990&to=10000")
    assert len(_points(window, "total")) == 11
    assert "one point per turn" in window
    assert window.count("<circle") == 11 + 10  # parity is null at turn 10000: no dot there
    assert "← Earlier" in window
    assert "Later →" not in window
    assert "Zoom out" in window
    only = await get_page(world, "viewer", f"/sessions/{session}/progression?signal=parity")
    assert 'data-signal="parity"' in only
    assert 'data-signal="total"' not in only


def test_buckets_cover_every_turn_once_and_keep_mean_low_and_high() -> None:
    found = Signals(first=1, last=1001)
    for turn in range(1, 1002):
        found.add(turn, _Outcome(signals={"x": float(turn), "gap": None}))
    [series] = [s for s in found.series() if s.name == "x"]
    assert len(series.points) == found.count == POINTS
    covered = [turn for p in series.points for turn in range(p.first, p.last + 1)]
    assert covered == list(range(1, 1002))
    for point in series.points:
        assert (point.low, point.high) == (point.first, point.last)
        assert point.mean == (point.first + point.last) / 2
    assert found.overall["gap"].count == 0
    assert found.latest["gap"] is None
    many = Signals(first=1, last=2)
    many.add(1, _Outcome(signals={f"s{n}": 1.0 for n in range(MAX_SERIES + 3)}))
    assert len(many.series()) == MAX_SERIES
    assert len(many.names) == MAX_SERIES + 3


def test_the_chart_is_self_contained_svg_with_round_ticks() -> None:
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(-4, -2) == [-4, -3.5, -3, -2.5, -2]
    series = Series("a<b", 0, (Point(1, 1, 1.0, 1.0, 1.0), Point(3, 3, 2.0, 2.0, 2.0)))
    svg = line_chart([series], first=1, last=3, done=3, label="a<b over turns 1 to 3")
    assert svg.startswith('<svg class="chart"')
    assert "style=" not in svg
    assert "a&lt;b" in svg
    assert "<b" not in svg.replace("<br", "")
    assert 'class="done-line"' in svg
    assert svg.count("<polyline") == 0


def test_markers_sit_in_lanes_under_the_axis_and_link_escaped() -> None:
    series = Series("total", 0, (Point(1, 1, 1.0, 1.0, 1.0), Point(4, 4, 2.0, 2.0, 2.0)))
    plain = line_chart([series], first=1, last=4)
    marks = [
        Mark(2, "checkpoint", "⚑", "checkpoint <x>", "/sessions/s/turns?turn=2#r9"),
        Mark(3, "blocked", "✕", "blocked", "/sessions/s/turns?turn=3&a=<b>#r12"),
        Mark(4, "blocked", "✕", "blocked", "/sessions/s/turns?turn=4#r20"),
    ]
    svg = line_chart([series], first=1, last=4, marks=marks)
    heights = [re.findall(r'viewBox="0 0 \d+ (\d+)"', drawn) for drawn in (plain, svg)]
    assert heights == [[str(HEIGHT)], [str(HEIGHT + 2 * LANE + 6)]]  # a lane per kind
    assert re.findall(r'data-kind="(\w+)"', svg) == ["checkpoint", "blocked"]
    assert svg.count("<a href=") == 3
    assert "checkpoint &lt;x&gt;" in svg
    assert "a=&lt;b&gt;" in svg
    assert "style=" not in svg
