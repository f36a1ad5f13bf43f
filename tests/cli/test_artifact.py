"""``envharness artifact``: list a session's files, write one's bytes out — checked against
their sha256, never raw onto a terminal unless they are plain text — and bad input refused with
a message that says what to do. The store is the card table of ``tests/service/_views_support``.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envharness.cli import app
from tests.service._support import SessionWriter, write_store
from tests.service._views_support import HTML_PAGE, OFFENDING, board, png, write_views_store


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The store, the table session's id and the violations session's."""
    store = tmp_path_factory.mktemp("artifact-cli") / "store"
    table_id, violations_id = write_views_store(store)
    return store, table_id, violations_id


def run(store: Path, *args: str | Path) -> Result:
    return CliRunner().invoke(app, ["--store", str(store), *map(str, args)])


def test_without_a_name_it_lists_the_sessions_files(table: tuple[Path, str, str]) -> None:
    store, session_id, violations_id = table
    listed = run(store, "artifact", session_id[:-3])  # a unique prefix
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["seq", "turn", "participant", "name", "bytes", "sha256"]
    names = [(row.split()[1], row.split()[2]) for row in rows]
    assert names == [
        ("1", "board.txt"), ("2", "board.txt"), ("2", "frame.png"), ("2", "page.html"),
        ("2", "drawing.svg"), ("3", "board.txt"),
    ]  # fmt: skip
    assert hashlib.sha256(png()).hexdigest()[:16] in listed.stdout
    violations = [
        row.split()[:4] for row in run(store, "artifact", violations_id).stdout.split("\n")[1:-1]
    ]
    assert violations == [
        ["3", "1", "alice", "offending-bytes-3.bin"], ["4", "1", "bob", "offending-bytes-4.bin"]
    ]  # fmt: skip
    one_turn = run(store, "artifact", session_id, "--turn", "3").stdout.splitlines()
    assert len(one_turn) == 2


def test_a_name_writes_that_files_bytes(table: tuple[Path, str, str]) -> None:
    store, session_id, violations_id = table
    frame = run(store, "artifact", session_id, "frame.png")
    assert frame.exit_code == 0
    assert frame.stdout_bytes == png()
    second = run(store, "artifact", session_id, "board.txt", "--turn", "2")
    assert second.stdout_bytes == board(2)
    by_sha = run(store, "artifact", session_id, hashlib.sha256(HTML_PAGE).hexdigest()[:10])
    assert by_sha.stdout_bytes == HTML_PAGE
    offending = run(store, "artifact", violations_id, "offending-bytes-4.bin")
    assert offending.stdout_bytes == OFFENDING["bob"]


def test_o_writes_a_file(table: tuple[Path, str, str], tmp_path: Path) -> None:
    store, session_id, _ = table
    written = run(store, "artifact", session_id, "frame.png", "-o", tmp_path / "f.png")
    assert written.exit_code == 0
    assert (tmp_path / "f.png").read_bytes() == png()
    assert written.stdout_bytes == b""
    assert f"wrote {len(png())} bytes to" in written.stderr
    nowhere = run(store, "artifact", session_id, "frame.png", "-o", tmp_path / "no" / "f.png")
    assert nowhere.exit_code == 2
    assert "error: cannot write" in nowhere.stderr


def test_a_terminal_gets_only_plain_text(
    table: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, session_id, violations_id = table
    monkeypatch.setattr("envharness.cli.artifacts._terminal", lambda: True)
    image = run(store, "artifact", session_id, "frame.png")
    assert image.exit_code == 2
    assert image.stdout_bytes == b""
    assert "is not plain text (73 bytes) and would garble this terminal" in image.stderr
    assert "-o FILE" in image.stderr
    coloured = run(store, "artifact", session_id, "board.txt", "--turn", "1")
    assert coloured.exit_code == 2  # escape sequences would act on the terminal
    text = run(store, "artifact", violations_id, "offending-bytes-3.bin")
    assert text.exit_code == 0
    assert text.stdout_bytes == OFFENDING["alice"]
    asked = run(store, "artifact", session_id, "frame.png", "-o", "-")
    assert asked.exit_code == 0
    assert asked.stdout_bytes == png()


def test_bad_names_say_what_there_is(table: tuple[Path, str, str]) -> None:
    store, session_id, _ = table
    several = run(store, "artifact", session_id, "board.txt")
    assert several.exit_code == 2
    assert "3 different artifacts of session" in several.stderr
    assert "turn 1 (seq 7)" in several.stderr
    assert "--turn N" in several.stderr
    missing = run(store, "artifact", session_id, "nope.png")
    assert missing.exit_code == 2
    assert "has no artifact named 'nope.png': it has board.txt, drawing.svg, frame.png" in (
        missing.stderr
    )
    elsewhere = run(store, "artifact", session_id, "frame.png", "--turn", "1")
    assert elsewhere.exit_code == 2
    assert "no artifact named 'frame.png' in turn 1" in elsewhere.stderr
    short = run(store, "artifact", session_id, hashlib.sha256(png()).hexdigest()[:6])
    assert short.exit_code == 2  # too short a prefix to name anything
    unknown = run(store, "artifact", "ses_nope")
    assert unknown.exit_code == 2
    assert "ses_nope" in unknown.stderr
    assert "Traceback" not in unknown.output


def test_a_session_without_files_says_so(tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = SessionWriter(["alice"])
    write_store(store, [(writer, 1)])
    listed = run(store, "artifact", writer.id)
    assert listed.exit_code == 0
    assert "kept no artifacts" in listed.stderr


def test_modified_bytes_are_refused(table: tuple[Path, str, str], tmp_path: Path) -> None:
    store = Path(shutil.copytree(table[0], tmp_path / "store"))
    digest = hashlib.sha256(png()).hexdigest()
    (store / "artifacts" / digest[:2] / digest).write_bytes(b"changed")
    changed = run(store, "artifact", table[1], "frame.png")
    assert changed.exit_code == 2
    assert changed.stdout_bytes == b""
    assert f"artifact {digest} in the store at" in changed.stderr
    assert "was modified" in changed.stderr
    assert "envharness verify" in changed.stderr
