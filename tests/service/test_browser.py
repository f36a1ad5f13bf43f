"""End to end in a real browser: ``envharness serve`` (the command itself, in its own process)
over a quickstart store, and Debian's Chromium driven by Playwright (``_browser.py`` drives
both).

The browser signs in through the one-time link ``serve`` prints, visits every destination —
overview, experiments, an experiment, sessions, each tab of a session and of its branch,
lineage, a record, compare, verify, the API reference; Trajectories with a trajectory,
snapshots, a snapshot, datasets, a dataset and sources; Harnesses with a version, its diff, its
optimizer run and a rerun experiment (over a copy of the store where the real optimizer then
accepted two versions) — and each page must render with no console error, no failed request and
no 4xx/5xx answer; patch code that holds ``<script>`` must show as text. Then what a user reads
off the results-first views: an experiment's results and its verdict-coloured grid; the
sessions list searched, filtered and two sessions ticked and compared; a fresh link from
``envharness login-link`` signing a browser in once, and "Link expired" after. A session
written by another process while its Turns page is open must show its new records in that page
without a reload (EventSource), and its end too; the card game's artifacts must be previewed.

One server per store serves the whole module; each test signs a fresh browser context in with
a fresh one-time link. Screenshots of every page go to the test's temporary directory (printed
with ``-s``); with ``ENVHARNESS_SCREENSHOTS_DIR=docs/images`` a handful are also kept there
for the docs.

Playwright's own browser download does not work here: the test drives ``/usr/bin/chromium``
(``apt-get install chromium``; ``python3 tools/dev.py test`` installs it when it can). Without
it, or without the ``playwright`` package (the dev extra), the test fails, never skips:
deselect it with ``-m "not browser"``.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.service._browser import (
    CARD_TABLE,
    LIVE_TIMEOUT_MS,
    NEWEST_JS,
    ROOT,
    Served,
    Viewer,
    Watch,
    api_get,
    envharness,
    fresh_tab,
    launched_browser,
    newest_record,
    open_live_turns,
    running_session,
    serving,
    signed_in,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's store as written, never served: the stores below start as copies (a
    store a running ``serve`` writes to, its sign-ins say, is not one to copy)."""
    path = tmp_path_factory.mktemp("browser-quickstart") / "store"
    subprocess.run(
        envharness("--store", path, "quickstart", "--turns", "3"),
        check=True, capture_output=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def store(quickstart: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(shutil.copytree(quickstart, tmp_path_factory.mktemp("browser") / "store"))


@pytest.fixture(scope="module")
def harness_store(quickstart: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the quickstart's store where the real optimizer then accepted two harness
    versions (``tests/service/_harness_store.py``, in a process of its own, as a user's
    ``optimize`` would)."""
    path = Path(shutil.copytree(quickstart, tmp_path_factory.mktemp("browser-harnesses") / "store"))
    subprocess.run(
        [sys.executable, "-m", "tests.service._harness_store", str(path)],
        check=True, capture_output=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def served(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``serve`` of the quickstart store for the module: each test signs a fresh browser
    in with a fresh one-time link."""
    with serving(store, tmp_path_factory.mktemp("serve")) as found:
        yield found


@pytest.fixture(scope="module")
def served_harnesses(
    harness_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with serving(harness_store, tmp_path_factory.mktemp("serve-harnesses")) as found:
        yield found


@pytest.fixture
def viewer(browser: Browser, served: Served, tmp_path: Path) -> Iterator[Viewer]:
    with signed_in(browser, served, tmp_path / "screenshots") as found:
        yield found


@pytest.fixture
def harness_viewer(browser: Browser, served_harnesses: Served, tmp_path: Path) -> Iterator[Viewer]:
    with signed_in(browser, served_harnesses, tmp_path / "screenshots") as found:
        yield found


def test_serve_open_signs_the_browser_in_without_the_code_on_its_command_line(
    browser: Browser, store: Path, tmp_path: Path
) -> None:
    """``--open`` hands the browser a private page's path (a command line is readable by every
    local user); the page brings the code to the sign-in form as ``#code=``, never sent."""
    record = tmp_path / "browser-argv.json"
    opener = tmp_path / "browser"
    opener.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(record)!r}, 'w') as out:\n    json.dump(sys.argv, out)\n"
    )
    opener.chmod(0o700)
    with serving(store, tmp_path, "--open", env={"BROWSER": f"{opener} %s"}) as served:
        deadline = time.monotonic() + 60  # a hang, not a measure
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        [uri] = json.loads(record.read_text())[1:]
        assert uri.startswith("file:///"), uri
        assert "code" not in uri, uri
        context = browser.new_context()
        try:
            page = context.new_page()
            watch = Watch()
            watch.attach(page)
            page.goto(uri)  # what the real browser would open: a file, then the sign-in form
            page.wait_for_url(f"{served.base}/")
            assert page.locator(".who .role").inner_text() == "viewer · read-only"
            watch.check("signed in by --open")
        finally:
            context.close()


def test_every_destination_renders_without_errors(viewer: Viewer) -> None:
    page = viewer.page
    assert page.locator("main").get_by_text("Sessions").first.is_visible()

    viewer.click("nav.global a[href='/experiments']")
    viewer.visited("experiments", "Experiments")
    viewer.click("main a[href^='/experiments/exp_']")
    viewer.visited("experiment")
    assert page.locator("td.cell a.run").count() == 10  # five scenarios x two trials

    viewer.click("nav.global a[href='/sessions']")
    viewer.visited("sessions", "Sessions")
    sessions = viewer.hrefs("main a.mono[href^='/sessions/ses_']")
    assert len(sessions) == 14
    branch = None
    for href in sessions:  # every session's overview renders; one of them is the branch
        page.goto(viewer.base + href)
        viewer.watch.check(href)
        if page.locator("a.compare-link").count() and branch is None:
            branch = href
    assert branch is not None, "the quickstart has a branch"

    page.goto(viewer.base + branch)
    tabs = viewer.hrefs("nav.tabs a")
    labels = page.locator("nav.tabs a").all_inner_texts()
    assert {"Overview", "Turns", "Configuration"} <= set(labels)
    for label, href in zip(labels, tabs, strict=True):  # Progression too, once it exists
        page.goto(viewer.base + href)
        published = "session-turns" if label == "Turns" else ""
        viewer.visited(f"branch-{label.lower()}", publish=published)
    assert page.locator("main").get_by_text("Lineage").count()  # on Configuration

    page.goto(viewer.base + branch + "/turns")
    assert page.locator("#timeline section.turn").count() >= 1
    viewer.click("#timeline a.seq")
    viewer.visited("record")
    assert page.locator("main").get_by_text("Payload").count()

    page.goto(viewer.base + branch)
    assert page.locator("#lineage").is_visible()
    viewer.click("#lineage .branch-line a.mono")  # to the parent, whose lineage lists the branch
    viewer.visited("parent-lineage")
    assert page.locator("#lineage").is_visible()
    for href in viewer.hrefs("nav.tabs a")[1:]:
        page.goto(viewer.base + href)
        viewer.visited("parent-" + href.rsplit("/", 1)[-1])

    page.goto(viewer.base + branch)
    viewer.click("a.compare-link")
    viewer.visited("compare", publish="compare")
    assert "/compare?left=" in page.url

    page.goto(viewer.base + "/")
    viewer.click("main a[href='/verify']")
    viewer.visited("verify")

    viewer.click("header a.api")
    page.wait_for_selector("#api-docs h2")  # rendered from /openapi.json by docs.js
    viewer.visited("docs", "API reference")
    assert "/api/sessions/{session_id}/records" in page.locator("#api-docs").inner_text()

    page.locator("header form[action='/logout'] button").click()
    page.wait_for_url(f"{viewer.base}/login")
    viewer.visited("signed-out", "Sign in")


def test_trajectories_and_harnesses_render_without_errors(harness_viewer: Viewer) -> None:
    viewer, page = harness_viewer, harness_viewer.page

    viewer.click("nav.global a[href='/trajectories']")
    viewer.visited("trajectories", "Trajectories")
    assert page.locator("table.trajectories tbody tr").count() >= 16  # 14 sessions, 2 episodes
    viewer.click("table.trajectories a[href^='/trajectories/ses_']")
    viewer.visited("trajectory")
    assert page.locator("#check.callout.ok").count() == 1  # the digest check, run as it renders
    page.goto(viewer.base + "/trajectories")
    for tab, heading in (("snapshots", "Snapshots"), ("datasets", "Datasets"),
                         ("sources", "Sources")):  # fmt: skip
        viewer.click(f"nav.tabs a[href='/{tab}']")
        viewer.visited(tab, heading)
    page.goto(viewer.base + "/snapshots")
    viewer.click("main table a[href^='/snapshots/snp_']")
    viewer.visited("snapshot")
    page.goto(viewer.base + "/datasets")
    viewer.click("main table a[href^='/datasets/dst_']")
    viewer.visited("dataset")

    viewer.click("nav.global a[href='/harnesses']")
    viewer.visited("harnesses", "Harnesses")
    viewer.click("table.harness-versions a[href='/harnesses/versions/harness-v2']")
    viewer.visited("harness-version", "harness-v2", publish="harness-version")
    code = page.locator("figure.hook-code pre.code").first.inner_text()
    assert "<script>alert('patched')</script>" in code  # shown as text, never run
    assert page.locator("main script").count() == 0
    viewer.click("a.button[href^='/harnesses/diff']")
    viewer.visited("harness-diff", "Diff")
    assert page.locator("pre.diff .diff-add").count() >= 5
    page.goto(viewer.base + "/harnesses/versions/harness-v2")
    viewer.click("main .facts a[href^='/harnesses/runs/opt_']")
    viewer.visited("optimizer-run")
    assert page.locator("section.iteration").count() == 2
    assert page.locator("table.candidates .verdict").count() == 4
    page.locator("details.candidate-code summary").first.click()
    assert page.locator("details.candidate-code[open] pre.code").first.is_visible()
    viewer.click("table.candidates a[href^='/experiments/exp_']")
    viewer.visited("rerun-experiment")  # a rerun is an ordinary experiment
    page.goto(viewer.base + "/harnesses/runs")
    viewer.visited("optimizer-runs", "Optimizer runs")


def test_the_experiment_page_leads_with_its_results(viewer: Viewer) -> None:
    """How well the quickstart sweep went, before how it ran: none of the six judged sessions
    passed, so nothing about it may look green — not the pass rate, not a grid cell, not the
    *completed* its sessions ended with."""
    page = viewer.page
    viewer.click("nav.global a[href='/experiments']")
    row = page.locator("main table tbody tr", has_text="quickstart sweep")
    assert row.locator(".results-rate").inner_text() == "0 / 6"
    assert "results-none" in (row.locator(".results-rate").get_attribute("class") or "")
    assert row.locator("td.num").inner_text() == "6.2 total"  # the main metric's mean
    viewer.visited("experiments-results", "Experiments")

    viewer.click("main a[href^='/experiments/exp_']")
    viewer.visited("experiment-results", "quickstart sweep", publish="experiment-results")
    assert page.locator("main section.card").first.get_attribute("id") == "results"
    headline = page.locator("#results .results-headline .stat")
    assert headline.nth(0).locator(".stat-n").inner_text() == "0 / 6"
    assert headline.nth(0).locator(".stat-l").text_content() == "passed · 0% [0%, 39%]"
    assert headline.nth(1).locator(".stat-n").inner_text() == "6.2"
    assert headline.nth(1).locator(".stat-l").text_content() == "mean total [4.6, 7.8] n=10"
    scopes = page.locator("#results table tbody tr")
    assert scopes.locator("td:first-child").all_inner_texts() == [
        "warm-up", "count-down", "far-target", "below-zero", "overshoot", "all",
    ]  # fmt: skip
    assert scopes.last.locator("td").all_inner_texts() == [
        "all", "0 of 6 0% [0%, 39%]", "6.2 [4.6, 7.8] (10)", "3 [3, 3] (10)",
    ]  # fmt: skip

    cells = page.locator("#experiment-grid a.run").evaluate_all(
        """runs => runs.map(run => [run.dataset.verdict,
             run.querySelector('.results-verdict').textContent,
             run.querySelector('.badge').textContent,
             run.querySelector('.results-turn').textContent])"""
    )
    assert sorted(map(tuple, cells)) == sorted(
        [("failed", "not passed", "completed", "turn 3/3")] * 6
        + [("none", "no verdict", "completed", "turn 3/3")] * 4
    )
    drawn = page.evaluate(_COLOURS_JS)
    assert drawn["failedCell"] == drawn["bad"], drawn  # red, like every "not passed"
    assert drawn["passedCell"] == drawn["ok"], drawn  # how a passed cell would look
    green = {drawn["ok"], drawn["okText"]}
    assert green.isdisjoint(drawn["completedBadge"]), drawn  # the run ended: slate, not green
    assert green.isdisjoint(drawn["completedCount"]), drawn


_COLOURS_JS = """() => {
    const style = node => getComputedStyle(node);
    const probe = (tag, attributes) => {  // styled by the viewer's own CSS, never inline
        const node = document.createElement(tag);
        Object.entries(attributes).forEach(([name, value]) => node.setAttribute(name, value));
        document.querySelector('#experiment-grid').append(node);
        const found = [style(node).backgroundColor, style(node).color];
        node.remove();
        return found;
    };
    const [ok, okText] = probe('span', {class: 'tag tag-ok'});
    const [bad] = probe('span', {class: 'tag tag-blocked'});
    const [passedCell] = probe('a', {class: 'run', 'data-verdict': 'passed'});
    const badge = style(document.querySelector('#experiment-grid .run .badge'));
    const count = style(document.querySelector('.stat-n.status-completed'));
    return {
        ok, okText, bad, passedCell,
        failedCell: style(document.querySelector('.run[data-verdict=failed]')).backgroundColor,
        completedBadge: [badge.backgroundColor, badge.color],
        completedCount: [count.color],
    };
}"""
"""The colours the page draws, next to those of a passed and a not-passed verdict."""


_BADGE_AND_PASSED_JS = """() => {
    const colours = node => [getComputedStyle(node).backgroundColor, getComputedStyle(node).color];
    const rows = document.querySelectorAll('table.search-results tbody tr');
    const passed = [...rows].map(row => row.querySelector('td:nth-child(4) .tag'))
        .find(tag => tag && tag.textContent.trim() === 'passed');
    return [colours(rows[0].querySelector('.badge.status-completed')), colours(passed)];
}"""
"""A completed run's badge and a passed verdict's tag, as the sessions list draws them."""


def test_sessions_search_filters_and_compare_selected(viewer: Viewer) -> None:
    """Find the warm-up sessions that completed, tick one (Compare needs two: the list stays
    as it was, with a note), tick a second and compare them; a search with no match says so."""
    page = viewer.page
    viewer.click("nav.global a[href='/sessions']")
    form = page.locator("form.search-form")
    form.locator("input[name=q]").fill("warm-up")
    form.locator("select[name=status]").select_option("completed")
    viewer.click("form.search-form button[type=submit]")
    viewer.visited("sessions-search", "Sessions", publish="sessions-search")
    chosen = parse_qs(urlsplit(page.url).query)  # a plain GET form: a link to share
    assert (chosen["q"], chosen["status"]) == (["warm-up"], ["completed"]), page.url
    assert page.locator(".search-count").inner_text() == "3 of 14 sessions"
    assert form.locator("input[name=q]").input_value() == "warm-up"
    assert form.locator("select[name=status]").input_value() == "completed"
    rows = page.locator("table.search-results tbody tr")
    assert rows.locator(".search-title").all_inner_texts() == [
        "warm-up · alice, bob · quickstart sweep",
        "warm-up · alice, bob · quickstart sweep",
        "warm-up · alice · standalone",
    ]
    assert rows.locator(".badge").all_inner_texts() == ["completed"] * 3
    assert rows.locator("td:nth-child(4) .tag").all_text_contents() == [
        "not passed", "not passed", "passed",
    ]  # fmt: skip
    badge, passed = page.evaluate(_BADGE_AND_PASSED_JS)
    assert badge != passed, (badge, passed)  # "completed" beside "passed": never the same green
    left, right = (rows.nth(n).locator("input.search-pick") for n in (0, 2))
    left_id, right_id = left.get_attribute("value"), right.get_attribute("value")

    left.check()
    viewer.click("#search-compare button[type=submit]")
    viewer.visited("compare-one-ticked", "Sessions")
    note = page.locator(".search-compare-note").inner_text()
    assert note.startswith("Compare takes exactly two sessions; 1 was ticked."), note
    assert page.locator(".search-count").inner_text() == "3 of 14 sessions"  # filters kept
    assert page.locator(f"input.search-pick[value='{left_id}']").is_checked()

    page.locator(f"input.search-pick[value='{right_id}']").check()
    viewer.click("#search-compare button[type=submit]")
    viewer.visited("compare-selected", "Compare sessions")
    assert page.url == f"{viewer.base}/compare?left={left_id}&right={right_id}"
    assert page.locator(".side a.mono").all_inner_texts() == [left_id, right_id]
    assert "3 of 3 differ" in page.locator(".page-head .sub").inner_text()
    total = page.locator("table.scores-diff tbody tr", has_text="total")
    assert total.locator("td").all_inner_texts() == ["total", "5", "3", "-2"]
    assert total.locator(".delta .down").count() == 1  # drawn red: the right one is lower

    page.goto(f"{viewer.base}/sessions?q=no-such-scenario")
    viewer.visited("sessions-no-match", "Sessions")
    assert page.locator(".search-empty").inner_text() == (
        "No session matches “no-such-scenario” with these filters. Show every session."
    )
    assert page.locator(".search-count").inner_text() == "0 of 14 sessions"
    viewer.click(".search-empty a")
    viewer.visited("sessions-all", "Sessions")
    assert page.locator(".search-count").inner_text() == "14 of 14 sessions"


def test_login_link_signs_a_browser_in_once_while_serve_runs(
    browser: Browser, served: Served, store: Path, tmp_path: Path
) -> None:
    """``envharness login-link`` (the command, in its own process) finds the running server
    by itself; its link signs one browser in, and shows any later one "Link expired" with the
    command for a new link."""
    made = subprocess.run(
        envharness("--store", store, "login-link"),
        check=True, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    link = made.stdout.strip()
    assert re.fullmatch(rf"{re.escape(served.base)}/login\?code=\S+", link), made
    assert "one use" in made.stderr, made.stderr
    with fresh_tab(browser, served.base, tmp_path / "first") as first:
        first.page.goto(link)  # the page posts the code by itself, then lands on /
        first.page.wait_for_url(f"{served.base}/")
        assert first.page.locator(".who .role").inner_text() == "viewer · read-only"
        first.visited("signed-in-by-login-link", "Overview")
    with fresh_tab(browser, served.base, tmp_path / "again") as again:
        again.page.goto(link)
        again.page.wait_for_selector("main h1:has-text('Link expired')")
        # The refusal is the page's point: its 400 (which Chromium echoes to the console),
        # and nothing else, went wrong.
        refused = again.watch.take()
        assert refused[0] == f"400 for POST {served.base}/login", refused
        assert [problem.split(" at {")[0] for problem in refused[1:]] == [
            "console error: Failed to load resource: the server responded with a status of "
            "400 (Bad Request)"
        ], refused
        again.visited("link-expired", "Link expired")
        card = again.page.locator("main .signin").inner_text()
        assert "already used or has expired" in card, card
        assert again.page.locator("main .signin pre code").inner_text() == (
            f"envharness --store {shlex.quote(str(store))} login-link"
        )
        assert again.page.locator(".who .role").count() == 0  # not signed in


def test_the_live_timeline_shows_records_as_another_process_writes_them(
    viewer: Viewer, store: Path, tmp_path: Path
) -> None:
    page = viewer.page
    with running_session(viewer, store, tmp_path / "writer.log") as writer:
        page.goto(f"{viewer.base}/sessions/{writer.session_id}")
        viewer.visited("running-overview")
        open_live_turns(viewer, writer.session_id)
        viewer.visited("running-turns")
        banner = page.locator("#live-banner")
        assert banner.get_attribute("data-state") == "live"
        assert banner.get_attribute("data-follow") == "off"
        assert page.locator("#live-status").inner_text() == "running"
        page.evaluate("window.loadedOnce = true")
        # Follow: the toggle keeps the address in step (a link to share) and the newest turn
        # in view as records arrive, without a reload.
        page.locator("#live-follow").click()
        assert banner.get_attribute("data-follow") == "on"
        assert page.locator("#live-follow").get_attribute("aria-pressed") == "true"
        assert parse_qs(urlsplit(page.url).query).get("follow") == ["1"], page.url
        turn = int(page.locator("#live-turn").inner_text())
        shown = newest_record(page)
        page.wait_for_function(
            f"() => {NEWEST_JS} > {shown}", timeout=LIVE_TIMEOUT_MS
        )  # a record committed after the page was rendered, added in place
        page.wait_for_function(
            f"() => Number(document.getElementById('live-turn').textContent) > {turn}",
            timeout=LIVE_TIMEOUT_MS,
        )  # the banner counts the turns as they commit
        assert page.evaluate(_NEWEST_TURN_IN_VIEW_JS), "following, yet the newest turn is not shown"
        assert page.evaluate("window.loadedOnce") is True, "the page reloaded"
        assert page.locator("#timeline section.turn").count() >= 1
        viewer.visited("live-record", publish="session-live-follow")
        page.keyboard.press("Home")  # reading back up stops following
        assert banner.get_attribute("data-follow") == "off"
        assert "follow" not in parse_qs(urlsplit(page.url).query), page.url
    # Leaving the block stopped the writer with Ctrl-C: the session records `stopped`.
    assert writer.process.returncode == 0, writer.log.read_text()
    page.wait_for_selector(
        "#session-status .badge[data-status='stopped']", timeout=LIVE_TIMEOUT_MS
    )  # the end of the stream, shown in place too
    page.wait_for_selector("#live-banner[data-state='ended']", timeout=LIVE_TIMEOUT_MS)
    assert page.locator("#live-status").inner_text() == "stopped"
    assert page.evaluate("window.loadedOnce") is True, "the page reloaded"
    viewer.visited("live-stopped")


_NEWEST_TURN_IN_VIEW_JS = """() => {
    const turns = document.querySelectorAll('#timeline section.turn');
    const box = turns[turns.length - 1].getBoundingClientRect();
    return box.bottom <= window.innerHeight + 2 && box.bottom > 0;
}"""
"""Whether the bottom of the newest turn is on screen (follow mode scrolls it into view)."""


def test_the_live_timeline_draws_text_views_private_outcomes_and_artifacts(
    viewer: Viewer, store: Path, tmp_path: Path
) -> None:
    """viewer.js draws what arrives live as the server draws it: a text view in its colours
    with the JSON behind a click, a private outcome with its reward, an artifact with its
    image, and the truncated end — with no console error (the CSP admits no inline style)."""
    page = viewer.page
    with running_session(
        viewer, store, tmp_path / "table.log", module=CARD_TABLE, scenario="slow-table",
        ends_by_itself=True,
    ) as writer:  # fmt: skip
        page.goto(f"{viewer.base}/sessions/{writer.session_id}/turns")
        page.wait_for_selector(".live-note")
        shown = newest_record(page)
        page.wait_for_selector(
            "#session-status .badge[data-status='completed']", timeout=LIVE_TIMEOUT_MS * 4
        )  # cut short by the table's time limit
    assert writer.process.returncode == 0, writer.log.read_text()
    live = page.evaluate(
        """shown => [...document.querySelectorAll('#timeline [id]')]
             .filter(node => /^r(\\d+)$/.test(node.id) && Number(node.id.slice(1)) > shown)
             .map(node => node.className || node.tagName)""",
        shown,
    )
    assert "rec textual" in live, live
    assert "rec private-outcome" in live, live
    textual = page.locator("#timeline .rec.textual[id^='r']").last
    assert textual.locator("pre.textview span.ansi-fg1.ansi-bold").first.inner_text() == "hand"
    assert "alert('view')" in textual.locator("pre.textview").inner_text()
    assert not textual.locator("details.as-json").evaluate("node => node.open")
    assert page.locator("#timeline .kv.reward").count() >= 2
    assert page.locator("#timeline .tag-truncated").count() == 1
    for drawn in ("img", "pre.textview span.ansi-fg2"):  # previews of records added live
        page.wait_for_function(
            """([shown, drawn]) => [...document.querySelectorAll('#timeline li[id]')]
                 .filter(item => Number(item.id.slice(1)) > shown)
                 .some(item => [...item.querySelectorAll('.artifact-preview ' + drawn)]
                   .some(node => node.tagName !== 'IMG' || node.naturalWidth === 2))""",
            arg=[shown, drawn],
            timeout=LIVE_TIMEOUT_MS,
        )
    viewer.visited("live-table")
    page.reload()
    viewer.visited("table-turns", publish="text-views-artifacts")
    _artifact_previews_as_the_server_draws_them(viewer, writer.session_id)


def _artifact_previews_as_the_server_draws_them(viewer: Viewer, session_id: str) -> None:
    """An image drawn (and loaded: 2 pixels wide), a text by its first lines in its colours,
    markup in it as text; HTML and SVG never drawn, their links downloads; every Open link
    answers with the file."""
    page = viewer.page
    frame = page.locator("#timeline li:has(.artifact-link)", has_text="frame.png").first
    assert frame.locator(".artifact-preview img").evaluate("image => image.naturalWidth") == 2
    board = page.locator("#timeline li:has(.artifact-link)", has_text="board.txt").first
    text = board.locator(".artifact-preview pre.textview")
    assert text.locator("span.ansi-fg2").first.inner_text().startswith("table after move")
    assert "<b>not markup</b>" in text.inner_text()  # escaped, shown as typed
    for name in ("page.html", "drawing.svg"):
        kept = page.locator("#timeline li:has(.artifact-link)", has_text=name).first
        assert kept.locator(".artifact-preview").count() == 0, name
    assert page.locator("main script, main iframe, main object, main embed").count() == 0
    served_as = {"frame.png": "inline", "board.txt": "inline", "page.html": "attachment",
                 "drawing.svg": "attachment"}  # fmt: skip
    for name, disposition in served_as.items():
        item = page.locator("#timeline li:has(.artifact-link)", has_text=name).first
        href = item.locator("a.artifact-link").get_attribute("href")
        assert href is not None, name
        assert href.startswith(f"/api/sessions/{session_id}/records/"), href
        answer = api_get(viewer, href)  # what Open fetches, with this sign-in
        assert answer.ok, (name, answer.status)
        assert answer.headers["content-disposition"].startswith(disposition), name
    viewer.watch.check("artifact links")
