"""End to end in a real browser: ``envharness serve`` (the command itself, in its own process)
over a quickstart store, and Debian's Chromium driven by Playwright.

The browser signs in through the one-time link ``serve`` prints, visits every destination —
overview, experiments, an experiment, sessions, each tab of a session and of its branch,
lineage, a record, compare, verify, the API reference; Trajectories with a trajectory,
snapshots, a snapshot, datasets, a dataset and sources; Harnesses with a version, its diff, its
optimizer run and a rerun experiment (over a copy of the store where the real optimizer then
accepted two versions) — and each page must render with no console error, no failed request and
no 4xx/5xx answer; patch code that holds ``<script>`` must show as text. A session written by
another process while its Turns page is open must show its new records in that page without a
reload (EventSource), and its end too. Screenshots of every page go to the test's temporary
directory (printed with ``-s``).

Playwright's own browser download does not work here: the test drives ``/usr/bin/chromium``
(``apt-get install chromium``; ``python3 tools/dev.py test`` installs it when it can). Without
it, or without the ``playwright`` package (the dev extra), the test fails, never skips:
deselect it with ``-m "not browser"``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LIVE_TIMEOUT_MS = 5_000
"""How long a committed record may take to show in the open page (the server polls every
250 ms; this is a bound for a loaded CI machine, not a performance claim)."""
STOP_GRACE_S = 15


def _envharness(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "envharness.cli", *map(str, args)]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "the browser test needs Playwright's Python package: pip install -e '.[dev]' "
            "(or deselect it: -m 'not browser')"
        )
    if not CHROMIUM.exists():
        pytest.fail(
            f"the browser test drives Debian's Chromium at {CHROMIUM}, which is missing: "
            "apt-get install chromium (python3 tools/dev.py test does it as root), "
            "or deselect it: -m 'not browser'"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "store"
    subprocess.run(
        _envharness("--store", path, "quickstart", "--turns", "3"),
        check=True, capture_output=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def harness_store(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the quickstart's store, taken before any test changed it, where the real
    optimizer then accepted two harness versions (``tests/service/_harness_store.py``, in a
    process of its own, as a user's ``optimize`` would)."""
    path = Path(shutil.copytree(store, tmp_path_factory.mktemp("browser-harnesses") / "store"))
    subprocess.run(
        [sys.executable, "-m", "tests.service._harness_store", str(path)],
        check=True, capture_output=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return path


@dataclass
class Served:
    base: str
    link: str


@pytest.fixture
def served(store: Path, tmp_path: Path) -> Iterator[Served]:
    with _serve(store, tmp_path) as found:
        yield found


@pytest.fixture
def served_harnesses(harness_store: Path, tmp_path: Path) -> Iterator[Served]:
    with _serve(harness_store, tmp_path) as found:
        yield found


@contextmanager
def _serve(
    store: Path, tmp_path: Path, *options: str, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """``envharness serve --port 0`` (a free loopback port), stopped with Ctrl-C afterwards."""
    log = tmp_path / "serve.stderr"
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            _envharness("--store", store, "serve", "--port", "0", *options),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        ) as process,  # fmt: skip
    ):
        assert process.stdout is not None
        try:
            lines = [process.stdout.readline() for _ in range(2)]
            found = re.search(r"(http://127\.0\.0\.1:\d+)/login\?code=\S+", lines[1])
            assert found, (lines, log.read_text())
            yield Served(base=found.group(1), link=found.group(0))
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_GRACE_S)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    errors = log.read_text()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors, errors


@dataclass
class Watch:
    """Everything that went wrong in a page since the last :meth:`check`."""

    problems: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("response", self._response)
        page.on("requestfailed", self._failed)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text} at {message.location}")

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status} for {response.request.method} {response.url}")

    def _failed(self, request: Request) -> None:
        # Leaving a page cancels what it still loads (its live stream, the icon): "aborted".
        # Anything the server refused shows as a response above; what CSP blocks, as a
        # console error.
        if request.failure == "net::ERR_ABORTED":
            return
        self.problems.append(f"request failed: {request.url} ({request.failure})")

    def check(self, where: str) -> None:
        found, self.problems = self.problems, []
        assert found == [], where


@dataclass
class Viewer:
    """A signed-in browser tab, its watch, and where its screenshots go."""

    page: Page
    watch: Watch
    base: str
    shots: Path
    taken: int = 0

    def visited(self, name: str, heading: str | None = None) -> None:
        """The page that is open now rendered, without errors: screenshot it."""
        self.page.wait_for_load_state("load")
        assert self.page.title().endswith("· envharness"), self.page.url
        if heading is not None:
            assert heading in self.page.locator("main h1").first.inner_text(), self.page.url
        self.taken += 1
        self.page.screenshot(path=self.shots / f"{self.taken:02d}-{name}.png", full_page=True)
        self.watch.check(f"{name}: {self.page.url}")

    def click(self, selector: str) -> None:
        with self.page.expect_navigation():
            self.page.locator(selector).first.click()

    def hrefs(self, selector: str) -> list[str]:
        found: list[str] = self.page.eval_on_selector_all(
            selector, "links => links.map(link => link.getAttribute('href'))"
        )
        return found


@pytest.fixture
def viewer(browser: Browser, served: Served, tmp_path: Path) -> Iterator[Viewer]:
    with _signed_in(browser, served, tmp_path) as found:
        yield found


@pytest.fixture
def harness_viewer(browser: Browser, served_harnesses: Served, tmp_path: Path) -> Iterator[Viewer]:
    with _signed_in(browser, served_harnesses, tmp_path) as found:
        yield found


@contextmanager
def _signed_in(browser: Browser, served: Served, tmp_path: Path) -> Iterator[Viewer]:
    """A fresh browser context (no cookies), signed in through the one-time link."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        watch = Watch()
        watch.attach(page)
        shots = tmp_path / "screenshots"
        shots.mkdir()
        viewer = Viewer(page, watch, served.base, shots)
        page.goto(served.link)  # the page posts the code by itself, then lands on /
        page.wait_for_url(f"{served.base}/")
        assert page.locator(".who .role").inner_text() == "viewer · read-only"
        viewer.visited("overview")
        yield viewer
        print(f"screenshots: {shots}")
    finally:
        context.close()


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
    with _serve(store, tmp_path, "--open", env={"BROWSER": f"{opener} %s"}) as served:
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
        viewer.visited(f"branch-{label.lower()}")
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
    viewer.visited("compare")
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
    viewer.visited("harness-version", "harness-v2")
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


def test_the_live_timeline_shows_records_as_another_process_writes_them(
    viewer: Viewer, store: Path, tmp_path: Path
) -> None:
    page = viewer.page
    log = tmp_path / "writer.log"
    with (
        log.open("w") as output,
        subprocess.Popen(
            [sys.executable, "-m", "tests.service._slow_session", str(store)],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        ) as writer,  # fmt: skip
    ):
        try:
            session_id = _running_session(viewer, writer, log)
            page.goto(f"{viewer.base}/sessions/{session_id}")
            viewer.visited("running-overview")
            viewer.click("nav.tabs a[href$='/turns']")
            if page.locator("nav.pager a", has_text="latest").count():
                viewer.click("nav.pager a:has-text('latest')")
            page.wait_for_selector(".live-note")  # viewer.js follows the session
            viewer.visited("running-turns")
            page.evaluate("window.loadedOnce = true")
            shown = _newest_record(page)
            page.wait_for_function(
                f"() => {_NEWEST_JS} > {shown}", timeout=LIVE_TIMEOUT_MS
            )  # a record committed after the page was rendered, added in place
            assert page.evaluate("window.loadedOnce") is True, "the page reloaded"
            assert page.locator("#timeline section.turn").count() >= 1
            viewer.visited("live-record")
        finally:
            writer.send_signal(signal.SIGINT)  # the session records `stopped`
            try:
                writer.wait(timeout=STOP_GRACE_S)
            finally:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()
    assert writer.returncode == 0, log.read_text()
    page.wait_for_selector(
        "#session-status .badge[data-status='stopped']", timeout=LIVE_TIMEOUT_MS
    )  # the end of the stream, shown in place too
    assert page.evaluate("window.loadedOnce") is True, "the page reloaded"
    viewer.visited("live-stopped")


def test_the_live_timeline_draws_text_views_private_outcomes_and_artifacts(
    viewer: Viewer, store: Path, tmp_path: Path
) -> None:
    """viewer.js draws what arrives live as the server draws it: a text view in its colours
    with the JSON behind a click, a private outcome with its reward, an artifact with its
    image, and the truncated end — with no console error (the CSP admits no inline style)."""
    page = viewer.page
    log = tmp_path / "table.log"
    with (
        log.open("w") as output,
        subprocess.Popen(
            [sys.executable, "-m", "tests.service._views_support", str(store)],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        ) as writer,  # fmt: skip
    ):
        completed = False
        try:
            session_id = _running_session(viewer, writer, log, scenario="slow-table")
            page.goto(f"{viewer.base}/sessions/{session_id}/turns")
            page.wait_for_selector(".live-note")
            shown = _newest_record(page)
            page.wait_for_selector(
                "#session-status .badge[data-status='completed']", timeout=LIVE_TIMEOUT_MS * 4
            )  # cut short by the table's time limit
            completed = True
        finally:
            if not completed and writer.poll() is None:
                writer.send_signal(signal.SIGINT)
            # The page may show the end before the writer has closed its store and exited.
            writer.wait(timeout=STOP_GRACE_S)
    assert writer.returncode == 0, log.read_text()
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
    assert page.locator(".artifact-preview img").count() >= 1  # as the server draws it
    viewer.visited("table-turns")


_NEWEST_JS = (
    "Math.max(-1, ...[...document.querySelectorAll('#timeline [id]')]"
    ".map(node => /^r(\\d+)$/.exec(node.id)).filter(Boolean).map(match => Number(match[1])))"
)
"""The highest record seq shown in the timeline."""


def _newest_record(page: Page) -> int:
    newest: Any = page.evaluate(_NEWEST_JS)
    return int(newest)


def _running_session(
    viewer: Viewer, writer: subprocess.Popen[bytes], log: Path, scenario: str | None = None
) -> str:
    """The id of the session the writer runs, once it is in the store (asked through the
    API with the browser's own sign-in)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert writer.poll() is None, log.read_text()
        answer = viewer.page.request.get(f"{viewer.base}/api/sessions?status=running")
        assert answer.ok, answer.status
        running = [
            found
            for found in answer.json()["sessions"]
            if scenario is None or found["scenario_id"] == scenario
        ]
        if running and running[0]["turns_completed"] >= 1:
            return str(running[0]["id"])
        time.sleep(0.1)
    raise AssertionError(f"the slow session never started: {log.read_text()}")
