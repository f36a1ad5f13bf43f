"""Driving ``envharness serve`` and Debian's Chromium for the browser tests
(``tests/service/test_browser.py``): the server in a process of its own, a signed-in tab that
records everything that went wrong in it, its screenshots, and another process writing a
session while a page watches it.

Screenshots of every page visited go to the test's temporary directory, whole pages. With
:data:`SCREENSHOTS_ENV` set to a directory (``docs/images``), the pages a test marks as
published are also written there, as the viewport shows them (:data:`VIEWPORT`): the pictures
the README and ``docs/viewer.md`` embed.
"""

from __future__ import annotations

import os
import re
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

from envharness.service.link_codes import issue_stored_code

if TYPE_CHECKING:
    from playwright.sync_api import (
        APIResponse,
        Browser,
        ConsoleMessage,
        Page,
        Request,
        Response,
    )

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
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS_ENV = "ENVHARNESS_SCREENSHOTS_DIR"
"""Where published screenshots go as well (``docs/images`` keeps the latest)."""
_HIDE_STORE_PATH_JS = (
    "visibility => document.querySelectorAll('footer code')"
    ".forEach(node => { node.style.visibility = visibility; })"
)
LIVE_TIMEOUT_MS = 5_000
"""How long a committed record may take to show in the open page (the server polls every
250 ms; this is a bound for a loaded CI machine, not a performance claim)."""
STOP_GRACE_S = 15
SLOW_SESSION = "tests.service._slow_session"
"""A synthetic session, a turn about every 0.3 s, until Ctrl-C (``stopped``)."""
CARD_TABLE = "tests.service._views_support"
"""A card game with text views, private outcomes and artifacts that ends by itself."""


def envharness(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "envharness.cli", *map(str, args)]


@contextmanager
def launched_browser() -> Iterator[Browser]:
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
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Served:
    """A running ``serve``: its address, and one-time sign-in links for fresh browsers."""

    base: str
    printed: str
    store: Path
    used_printed: bool = False

    def sign_in_link(self) -> str:
        """The link ``serve`` printed, the first time; then a fresh one, as ``envharness
        login-link`` makes it (a code left in the store), so one server serves many tests."""
        if not self.used_printed:
            self.used_printed = True
            return self.printed
        return f"{self.base}/login?code={issue_stored_code(self.store)}"


@contextmanager
def serving(
    store: Path, logs: Path, *options: str, env: dict[str, str] | None = None
) -> Iterator[Served]:
    """``envharness serve --port 0`` (a free loopback port), stopped with Ctrl-C afterwards."""
    log = logs / "serve.stderr"
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            envharness("--store", store, "serve", "--port", "0", *options),
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
            yield Served(base=found.group(1), printed=found.group(0), store=store)
        finally:
            stop(process)
    errors = log.read_text()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors, errors


def stop(process: subprocess.Popen[Any]) -> None:
    """Ctrl-C, as a user stops it; killed only if it does not stop in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=STOP_GRACE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


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
        assert found == [], f"{where}: {found}"

    def take(self) -> list[str]:
        """What went wrong so far, forgotten: for a page whose error status is its point."""
        found, self.problems = self.problems, []
        return found


@dataclass
class Viewer:
    """A browser tab (signed in, unless :func:`fresh_tab` made it), its watch, and where its
    screenshots go."""

    page: Page
    watch: Watch
    base: str
    shots: Path
    taken: int = 0

    def visited(self, name: str, heading: str | None = None, *, publish: str = "") -> None:
        """The page that is open now rendered, without errors: screenshot it (and, when
        ``publish`` names it and :data:`SCREENSHOTS_ENV` is set, keep it for the docs)."""
        self.page.wait_for_load_state("load")
        assert self.page.title().endswith("· envharness"), self.page.url
        if heading is not None:
            assert heading in self.page.locator("main h1").first.inner_text(), self.page.url
        self.taken += 1
        self.page.screenshot(path=self.shots / f"{self.taken:02d}-{name}.png", full_page=True)
        published = os.environ.get(SCREENSHOTS_ENV)
        if publish and published:
            # The store's path is the test's temporary directory: not for the docs. (Set
            # through the CSSOM: the CSP refuses an injected stylesheet.)
            self.page.evaluate(_HIDE_STORE_PATH_JS, "hidden")
            self.page.screenshot(path=Path(published) / f"{publish}.png", animations="disabled")
            self.page.evaluate(_HIDE_STORE_PATH_JS, "")
        self.watch.check(f"{name}: {self.page.url}")

    def click(self, selector: str) -> None:
        with self.page.expect_navigation():
            self.page.locator(selector).first.click()

    def hrefs(self, selector: str) -> list[str]:
        found: list[str] = self.page.eval_on_selector_all(
            selector, "links => links.map(link => link.getAttribute('href'))"
        )
        return found


@contextmanager
def fresh_tab(browser: Browser, base: str, shots: Path) -> Iterator[Viewer]:
    """A tab in a fresh browser context: no cookies, not signed in."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        watch = Watch()
        watch.attach(page)
        shots.mkdir(exist_ok=True)
        yield Viewer(page, watch, base, shots)
        print(f"screenshots: {shots}")
    finally:
        context.close()


@contextmanager
def signed_in(browser: Browser, served: Served, shots: Path) -> Iterator[Viewer]:
    """A fresh tab, signed in through a one-time link."""
    with fresh_tab(browser, served.base, shots) as viewer:
        viewer.page.goto(served.sign_in_link())  # the page posts the code, then lands on /
        viewer.page.wait_for_url(f"{served.base}/")
        assert viewer.page.locator(".who .role").inner_text() == "viewer · read-only"
        viewer.visited("overview")
        yield viewer


# -- another process writing a session while a page shows it ----------------------------------


@dataclass
class Writer:
    """A process running a session in the served store; ``session_id`` once it has a turn."""

    process: subprocess.Popen[bytes]
    log: Path
    session_id: str = ""

    def stop(self) -> None:
        """Ctrl-C: the session records ``stopped`` and the process exits 0."""
        stop(self.process)


@contextmanager
def running_session(
    viewer: Viewer,
    store: Path,
    log: Path,
    *,
    module: str = SLOW_SESSION,
    scenario: str | None = None,
    ends_by_itself: bool = False,
) -> Iterator[Writer]:
    """``python -m MODULE STORE`` in a process of its own, yielded once its session (of
    ``scenario``, when given) is running with a completed turn.

    Afterwards it is stopped with Ctrl-C unless it ``ends_by_itself`` (then it is only awaited,
    and stopped only when the test failed first); the caller checks its exit status. This is
    where a test of the Turns page's live behaviour starts: open :func:`open_live_turns`.
    """
    with (
        log.open("w") as output,
        subprocess.Popen(
            [sys.executable, "-m", module, str(store)],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        ) as process,  # fmt: skip
    ):
        writer = Writer(process, log)
        finished = False
        try:
            writer.session_id = _running_session_id(viewer, writer, scenario)
            yield writer
            finished = True
        finally:
            if not (finished and ends_by_itself):
                writer.stop()
            else:  # the page may show the end before the process has closed its store
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    writer.stop()
                    raise


def open_live_turns(viewer: Viewer, session_id: str) -> None:
    """Open the running session's Turns page on its latest turns, followed live (viewer.js
    shows its live note once it listens)."""
    page = viewer.page
    page.goto(f"{viewer.base}/sessions/{session_id}/turns")
    if page.locator("nav.pager a", has_text="latest").count():
        viewer.click("nav.pager a:has-text('latest')")
    page.wait_for_selector(".live-note")


NEWEST_JS = (
    "Math.max(-1, ...[...document.querySelectorAll('#timeline [id]')]"
    ".map(node => /^r(\\d+)$/.exec(node.id)).filter(Boolean).map(match => Number(match[1])))"
)
"""The highest record seq shown in the timeline."""


def newest_record(page: Page) -> int:
    newest: Any = page.evaluate(NEWEST_JS)
    return int(newest)


def api_get(viewer: Viewer, path: str) -> APIResponse:
    """GET ``path`` with the browser's own sign-in, as a browser would: a request sent on a
    kept-alive connection the server closed meanwhile (uvicorn closes one idle for 5 s) is sent
    once more on a new one; Playwright's request API does not retry (read ECONNRESET)."""
    from playwright.sync_api import Error as PlaywrightError

    try:
        return viewer.page.request.get(viewer.base + path)
    except PlaywrightError as exc:
        if "ECONNRESET" not in str(exc):
            raise
        return viewer.page.request.get(viewer.base + path)


def _running_session_id(viewer: Viewer, writer: Writer, scenario: str | None) -> str:
    """Asked through the API with the browser's own sign-in."""
    deadline = time.monotonic() + 30  # a hang, not a measure
    while time.monotonic() < deadline:
        assert writer.process.poll() is None, writer.log.read_text()
        answer = api_get(viewer, "/api/sessions?status=running")
        assert answer.ok, answer.status
        running = [
            found
            for found in answer.json()["sessions"]
            if scenario is None or found["scenario_id"] == scenario
        ]
        if running and running[0]["turns_completed"] >= 1:
            return str(running[0]["id"])
        time.sleep(0.1)
    raise AssertionError(f"the session never started: {writer.log.read_text()}")
