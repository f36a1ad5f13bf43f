"""Live by default: a running session's Turns page opens on its latest turns under a banner with
follow mode (working without script), a failed turn's error where every reader looks, the
Progression chart's event markers and its live redraw, and what was frozen from an experiment
on its page."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from envharness.records import (
    TERMINAL_STATUSES,
    Checkpoint,
    ErrorInfo,
    Outcome,
    SegmentEnded,
    SessionStatus,
)
from envharness.service.pages import live_view
from envharness.service.pages.chart_events import MAX_EVENTS, ChartEvent, ChartEvents
from envharness.service.pages.turns import TURNS_PER_PAGE, withheld_failure_note
from envharness.store import open_store
from tests.service._support import ExperimentWriter, SessionWriter, World, get_page, make_world
from tests.service._support import write_session as write_turns
from tests.service._trajectory_support import trio_session

pytestmark = pytest.mark.anyio

VIEWER_JS = Path(live_view.__file__).parent / "static" / "viewer.js"
PLANNED, WRITTEN = 30, 25


@dataclass(frozen=True)
class Live:
    world: World
    running: str
    completed: str
    failed: str
    cut: str
    experiment: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    """A running session (25 of 30 turns), a completed one, one that failed with an error,
    one checkpointed and cut short (truncated), and an experiment with nothing frozen."""
    path = tmp_path_factory.mktemp("live") / "store"
    running = SessionWriter(["alice", "bob"], turns=PLANNED)
    completed = SessionWriter(["alice", "bob"])
    failed = SessionWriter(["alice", "bob"])
    cut = SessionWriter(["alice", "bob"], turns=3)
    experiment = ExperimentWriter(("alpha",), trials=1)

    async def write() -> None:
        async with open_store(path) as store:
            await write_turns(store, running, WRITTEN, finish=False)
            await write_turns(store, completed, 3)
            await write_turns(store, failed, 2, finish=False)
            await store.append([
                failed.chain.seal(SessionStatus(
                    status="failed", reason="agent bob crashed",
                    error=ErrorInfo(type="ValueError", message="boom <b>here</b>"),
                )),
                failed.chain.seal(SegmentEnded(segment=0, status="failed")),
            ])  # fmt: skip
            await write_turns(store, cut, 2, finish=False)
            state = hashlib.sha256(b"cut").hexdigest()
            chain = cut.chain
            cut_short = Outcome(state=state, signals={"total": 3.0}, truncated=True)
            await store.append(
                [
                    chain.seal(Checkpoint(label="midway", state=state, turn=2)),
                    chain.seal(cut_short, turn=3),
                ],
                {state: b"cut"},
            )
            await store.append(cut.finish())
            await store.append(experiment.start())

    anyio.run(write)
    return Live(make_world(path), running.id, completed.id, failed.id, cut.id, experiment.id)


def _banner(text: str) -> str:
    return text.split('id="live-banner"', 1)[1].split("</div>", 1)[0]


def _turns(text: str) -> list[int]:
    return [int(n) for n in re.findall(r'<section class="turn card" id="turn-(\d+)"', text)]


async def test_a_running_session_opens_on_its_latest_turns_under_a_banner(live: Live) -> None:
    text = await get_page(live.world, "viewer", f"/sessions/{live.running}/turns")
    shown = _turns(text)
    assert shown == list(range(WRITTEN + 2 - TURNS_PER_PAGE, WRITTEN + 1))  # room for the next
    banner = _banner(text)
    assert 'data-state="live"' in banner
    assert 'data-follow="off"' in banner
    assert f'data-planned="{PLANNED}"' in banner
    assert 'data-verdict="none"' in banner
    assert f'<b id="live-status">running</b> · turn <span id="live-turn">{WRITTEN}</span>' in banner
    assert f" of {PLANNED}</span>" in banner
    assert f'<a id="live-follow" href="/sessions/{live.running}/turns?follow=1" ' in banner
    assert 'aria-pressed="false">follow</a>' in banner
    assert "<noscript>" not in banner  # without follow, nothing reloads
    assert f'data-live="{live.running}"' in text
    assert "← Turns 1&ndash;6" in text
    first = await get_page(live.world, "viewer", f"/sessions/{live.running}/turns?turn=1")
    assert _turns(first) == list(range(1, TURNS_PER_PAGE + 1))
    assert 'id="live-banner"' not in first  # an earlier window is not the live end
    assert "data-live" not in first


async def test_follow_mode_works_without_script_as_a_query_parameter(live: Live) -> None:
    base = f"/sessions/{live.running}/turns"
    text = await get_page(live.world, "viewer", f"{base}?turn=1&follow=1")
    assert _turns(text)[-1] == WRITTEN  # following opens the latest turns, whatever turn says
    banner = _banner(text)
    assert 'data-follow="on"' in banner
    assert f'<a id="live-follow" href="{base}" aria-pressed="true">following · stop</a>' in banner
    assert (
        f'<noscript><meta http-equiv="refresh" content="{live_view.FOLLOW_RELOAD}; '
        f'url={base}?follow=1#live-end"></noscript>'
    ) in banner  # a real reload: not this address plus a fragment (a jump), but the other one
    again = await get_page(live.world, "viewer", f"{base}?follow=1")
    first = WRITTEN + 2 - TURNS_PER_PAGE
    assert f"url={base}?turn={first}&amp;follow=1#live-end" in again
    assert '<div id="live-end"></div>' in text
    chips = await get_page(live.world, "viewer", f"{base}?follow=true&participant=bob")
    assert f"{base}?turn={first}&amp;participant=bob&amp;follow=1#live-end" in chips
    for bad in ("follow=maybe", "follow=1&follow=0"):
        refused = await get_page(live.world, "viewer", f"{base}?{bad}", 422)
        assert "&#x27;follow&#x27;" in refused, bad


async def test_an_ended_session_says_how_it_ended_to_whoever_was_following(live: Live) -> None:
    base = f"/sessions/{live.completed}/turns"
    plain = await get_page(live.world, "viewer", base)
    assert _turns(plain) == [1, 2, 3]  # an ended session opens at its start
    assert 'id="live-banner"' not in plain
    followed = await get_page(live.world, "viewer", f"{base}?follow=1")
    banner = _banner(followed)
    assert 'data-state="ended"' in banner
    assert 'data-verdict="passed"' in banner
    assert '<b id="live-status">completed</b> at turn <span id="live-turn">3</span> · passed' in (
        banner
    )
    assert "<noscript>" not in followed
    assert "live-follow" not in banner
    alice = await get_page(live.world, "alice", f"{base}?follow=1")
    assert "data-verdict" not in _banner(alice)  # scores are session level: withheld
    assert "passed" not in _banner(alice)


async def test_a_participant_s_banner_and_timeline_tell_nothing_of_everyone(live: Live) -> None:
    text = await get_page(live.world, "alice", f"/sessions/{live.running}/turns")
    banner = _banner(text)
    assert 'data-state="live"' in banner
    assert "data-verdict" not in banner
    assert 'data-reasons="withheld"' in text
    assert 'data-participant="bob"' not in text
    await get_page(live.world, "bob", f"/sessions/{live.running}/turns?participant=alice", 404)


async def test_a_failed_turn_shows_its_error_to_each_reader_as_far_as_it_may_know(
    live: Live,
) -> None:
    base = f"/sessions/{live.failed}/turns"
    full = await get_page(live.world, "viewer", base)
    last = full.split('id="turn-2"', 1)[1]
    assert "failed here" in last
    assert "agent bob crashed" in last
    assert "ValueError" in last
    assert "boom &lt;b&gt;here&lt;/b&gt;" in last
    narrowed = await get_page(live.world, "admin", f"{base}?participant=alice")
    assert "boom &lt;b&gt;here" in narrowed.split('id="turn-2"', 1)[1]
    for role in ("alice", "bob"):
        own = await get_page(live.world, role, base)
        mine = own.split('id="turn-2"', 1)[1]
        assert "failed here" in mine
        assert "why is not shown to a participant" in mine
        for secret in ("crashed", "boom", "ValueError"):
            assert secret not in own, (role, secret)


async def test_the_chart_marks_checkpoints_blocked_actions_findings_and_truncation(
    live: Live,
) -> None:
    text = await get_page(live.world, "viewer", f"/sessions/{live.cut}/progression")
    svg = text.split('<svg class="chart"', 1)[1].split("</svg>", 1)[0]
    lanes = re.findall(r'<g class="event event-(\w+)" data-kind="\1">', svg)
    assert lanes == ["checkpoint", "blocked", "finding", "truncated"]
    base = f"/sessions/{live.cut}/turns?turn="
    assert f'href="{base}2#r' in svg  # the checkpoint after turn 2, at its marker
    assert f'href="{base}1#r' in svg  # bob's blocked action in turn 1
    assert f'href="{base}3#turn-3"' in svg  # cut short
    listed = text.split('<ul class="chart-events"', 1)[1].split("</ul>", 1)[0]
    assert "checkpoint “midway” after turn 2" in listed
    assert "action blocked in turn 1 (bob)" in listed
    assert "finding (medium): a finding, at turn 2" in listed
    assert "cut short at turn 3 (truncated)" in listed
    assert "style=" not in text.split("<main>", 1)[1]
    assert "<script" not in svg
    narrow = await get_page(live.world, "viewer", f"/sessions/{live.cut}/progression?from=3&to=3")
    assert re.findall(r'data-kind="(\w+)"', narrow) == ["truncated"]


async def test_the_quickstart_chart_marks_its_blocked_actions_and_finding(world: World) -> None:
    trio = await trio_session(world)
    text = await get_page(world, "viewer", f"/sessions/{trio}/progression")
    kinds = set(re.findall(r'<g class="event event-(\w+)"', text))
    assert kinds == {"checkpoint", "blocked", "finding"}


async def test_a_running_session_s_chart_is_drawn_again_as_outcomes_commit(live: Live) -> None:
    running = await get_page(live.world, "viewer", f"/sessions/{live.running}/progression")
    assert (f'<div id="progression-live" data-live="{live.running}" data-after="') in running
    assert 'data-refresh="progression-card"' in running
    assert 'data-kinds="outcome action.blocked checkpoint finding"' in running
    assert '<section class="card progression" id="progression-card">' in running
    ended = await get_page(live.world, "viewer", f"/sessions/{live.cut}/progression")
    assert "data-refresh" not in ended
    assert "data-live" not in ended


def test_blocked_actions_fold_into_one_marker_per_turn_and_the_strip_is_bounded() -> None:
    found = ChartEvents(first=1, last=10)
    assert not found.add(ChartEvent(11, "truncated", "out of range", "turn-11"))
    for turn in range(1, 11):
        found.truncated(turn)
    assert [event.turn for event in found.ordered()] == list(range(1, 11))
    many = ChartEvents(first=1, last=10_000)
    for turn in range(1, MAX_EVENTS + 6):
        many.truncated(turn)
    assert len(many.events) == MAX_EVENTS
    assert many.dropped == 5


async def test_the_experiment_page_lists_what_was_frozen_from_it(world: World) -> None:
    async with world.client("viewer") as client:
        [experiment] = (await client.get("/api/experiments")).json()["experiments"]
        [dataset] = (await client.get("/api/datasets")).json()["datasets"]
    text = await get_page(world, "viewer", f"/experiments/{experiment['id']}")
    card = text.split('id="frozen"', 1)[1].split("</section>", 1)[0]
    [snapshot] = dataset["snapshots"]
    assert f'href="/snapshots/{snapshot}"' in card
    assert f'href="/datasets/{dataset["id"]}"><b>{dataset["name"]}</b>' in card
    assert re.search(r'<td class="num">(\d+) of \1</td>', card)  # every session frozen
    alice = await get_page(world, "alice", f"/experiments/{experiment['id']}")
    assert 'id="frozen"' not in alice  # snapshots hold everyone's trajectories


async def test_an_experiment_with_nothing_frozen_says_how_to_freeze_it(live: Live) -> None:
    text = await get_page(live.world, "viewer", f"/experiments/{live.experiment}")
    card = text.split('id="frozen"', 1)[1].split("</section>", 1)[0]
    assert f"envharness snapshot create --experiment {live.experiment}" in card


def test_viewer_js_says_what_the_server_says() -> None:
    script = VIEWER_JS.read_text()
    terminal = re.search(r"const TERMINAL = \[([^\]]*)\];", script)
    assert terminal is not None
    assert set(re.findall(r'"(\w+)"', terminal.group(1))) == TERMINAL_STATUSES
    verdicts = re.search(r"const VERDICT_TEXT = \{([^}]*)\};", script)
    assert verdicts is not None
    pairs = dict(re.findall(r'(\w+): "([^"]+)"', verdicts.group(1)))
    assert pairs == live_view.VERDICT_TEXT
    for contract in ("live-banner", "live-turn", "live-status", "live-follow", "data-refresh"):
        assert contract.removeprefix("data-") in script, contract
    withheld = re.search(r'"kv-withheld">([^<]+)<', withheld_failure_note())
    assert withheld is not None
    assert f'"{withheld.group(1)}"' in script  # viewer.js draws the same note
