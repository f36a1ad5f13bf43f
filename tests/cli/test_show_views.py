"""``envharness show`` prints an observation's text view — in its colours on a terminal, plain
otherwise, never an escape code the environment wrote — and the new record kinds: rewards,
private outcomes, truncation and each participant's score."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

from envharness.cli import app
from envharness.cli.render import TEXT_VIEW_LINES, text_view_lines
from envharness.records import Observation
from envharness.store import open_store
from tests.service._support import SessionWriter
from tests.service._views_support import write_views_store

SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("show-views") / "store"
    session_id, _ = write_views_store(store)
    return store, session_id


def show(store: Path, *args: str, color: bool = False) -> Result:
    return CliRunner().invoke(app, ["--store", str(store), "show", *args], color=color)


def test_a_text_view_follows_its_observation_plain_when_not_a_terminal(
    table: tuple[Path, str],
) -> None:
    store, session_id = table
    shown = show(store, session_id, "--turn", "1")
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.output
    assert "\x9b" not in shown.output
    assert "pwned" not in shown.output
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "observed" in line)
    assert '"hand":"secret-alice-hand-0"' in lines[at]
    assert lines[at + 1].strip() == "hand secret-alice-view-0"
    assert lines[at + 2].strip() == "chips 0      <script>alert('view')</script>"  # tab expanded
    column = lines[at].index("{")
    assert lines[at + 1].index("hand") == column  # under the observation's value


def test_a_terminal_gets_the_colours_and_nothing_else(table: tuple[Path, str]) -> None:
    store, session_id = table
    shown = show(store, session_id, "--turn", "1", color=True)
    assert shown.exit_code == 0
    view = next(line for line in shown.stdout.splitlines() if "secret-alice-view-0" in line)
    assert "\x1b[38;5;1m\x1b[1mhand\x1b[0m" in view  # red and bold, as the environment wrote
    chips = next(line for line in shown.stdout.splitlines() if "alert('view')" in line)
    assert "\x1b[38;5;208mchips\x1b[0m" in chips
    assert SGR.sub("", shown.stdout).count("\x1b") == 0  # colours are the only escapes
    assert "pwned" not in shown.stdout


def test_rewards_private_outcomes_truncation_and_scores(table: tuple[Path, str]) -> None:
    store, session_id = table
    out = show(store, session_id).stdout
    assert re.search(r"alice\s+executed\s+\{\"chips\":2\} -> \{\"bet\":2\}  reward 2\n", out)
    assert re.search(
        r"bob\s+outcome\s+\{\"told\":\"told-bob-1\"\}  reward -2  \(did not act this step\)", out
    )
    assert re.search(r"outcome\s+\(no signals\) truncated  state [0-9a-f]{12}", out)
    assert " done" not in out
    assert re.search(r"score 1: no pass/fail  moves=3\n\s+alice: chips=2\n\s+bob: chips=-2", out)
    only_bob = show(store, session_id, "--kind", "outcome.participant", "--participant", "bob")
    assert only_bob.stdout.count("did not act this step") == 2
    assert "told-alice" not in only_bob.stdout


def test_a_long_view_is_cut_unless_full(tmp_path: Path) -> None:
    writer = SessionWriter(["alice"], turns=1)
    text = "".join(f"\x1b[3{i % 8}mline {i}\x1b[0m\n" for i in range(TEXT_VIEW_LINES + 5))

    async def write() -> None:
        async with open_store(tmp_path / "store") as store:
            rows, blobs = writer.start()
            seen = Observation(observation={"n": 1}, text=text)
            rows.append(writer.chain.seal(seen, turn=1, participant="alice"))
            await store.append(rows, blobs)

    anyio.run(write)
    cut = show(tmp_path / "store", writer.id).stdout
    assert f"line {TEXT_VIEW_LINES - 1}\n" in cut
    assert f"line {TEXT_VIEW_LINES}\n" not in cut
    assert "… 5 more lines (--full shows all)" in cut
    whole = show(tmp_path / "store", writer.id, "--full").stdout
    assert f"line {TEXT_VIEW_LINES + 4}\n" in whole
    assert "more lines" not in whole


def test_text_view_lines_keep_lines_and_escape_the_rest() -> None:
    assert list(text_view_lines("a\r\nb\n\nc\n")) == ["a", "b", "", "c"]
    assert list(text_view_lines("x\x07\u2028y")) == ["x\\x07\\u2028y"]
    assert list(text_view_lines("")) == []
