"""Every snippet in the docs runs as shown, and every command line in them is one the CLI takes.

Each ```` ```python ```` block of ``README.md`` and ``docs/*.md`` runs here, a page's blocks in
order in one fresh namespace, in an empty working directory — unless an HTML comment on the
line just before the fence says otherwise, in one of three forms:

- ``<!-- run by tests/PATH.py -->``: a dedicated test runs it (against a fake model endpoint,
  say); that file, or a ``tests`` module it imports from, must name the page;
- ``<!-- saved as NAME; run by tests/PATH.py -->``: a program the page asks the reader to save
  as NAME (an agent, say): it is written to the working directory for the blocks after it, and
  the test named runs it;
- ``<!-- not run: WHY -->``: it cannot run offline (it needs an API key, say); WHY says so.

Pages are written for a reader in a checkout of this repository, so the working directory
links to its ``agents/``, ``environments/`` and ``examples/``.

Every ``envharness …`` line of a shell block (```` ```bash ````, ``sh``, ``console``, and the
``$ …`` lines of plain blocks) is parsed by the real command tree, without running it: its
command path and option names must exist, and it may not have more arguments than the command
takes.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core

from envharness.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_MARKER = re.compile(r"<!--\s*(.*?)\s*-->\s*\Z", flags=re.DOTALL)
_SHELLS = ("bash", "sh", "shell", "console")
_SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "(", ")"}


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    marker: str | None
    """The HTML comment on the line before the fence, without ``<!--`` and ``-->``."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group(1),
                code=match.group(2),
                marker=marker.group(1) if marker and before.lstrip().startswith("<!--") else None,
            )
        )
    return found


def _runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language == "python" and _runs_here(b)]


def _runs_here(block: Block) -> bool:
    return block.marker is None or block.marker.startswith("saved as ")


def _saved_as(block: Block) -> str | None:
    marker = block.marker or ""
    if not marker.startswith("saved as "):
        return None
    return marker.removeprefix("saved as ").split(";")[0].strip()


def _runner_problems(block: Block, marker: str) -> list[str]:
    """What is wrong with a marker that names the test running ``block``."""
    runner = re.search(r"run by (\S+)", marker)
    if marker.startswith("saved as ") and not _saved_as(block):
        return [f"{block.where}: name the file after 'saved as'"]
    if runner is None:
        return [f"{block.where}: name the test that runs it: 'run by tests/….py'"]
    target = runner.group(1)
    test_file = ROOT / target
    if not (target.startswith("tests/") and test_file.is_file()):
        return [f"{block.where}: {target} is not a test file"]
    text = test_file.read_text()
    helpers = re.findall(r"^from (tests(?:\.\w+)+) import", text, flags=re.MULTILINE)
    for module in helpers:
        helper = ROOT / (module.replace(".", "/") + ".py")
        text += helper.read_text() if helper.is_file() else ""
    if block.page.name not in text:
        return [f"{block.where}: {target} does not name {block.page.name}"]
    return []


def marker_problems(block: Block) -> list[str]:
    """What is wrong with the marker before a Python block (nothing, without one)."""
    marker = block.marker
    if block.language != "python" or marker is None:
        return []
    if marker.startswith("not run:"):
        if marker.removeprefix("not run:").strip():
            return []
        return [f"{block.where}: say why it cannot run after 'not run:'"]
    if marker.startswith(("run by ", "saved as ")):
        return _runner_problems(block, marker)
    return [
        f"{block.where}: <!-- {marker} --> is none of '<!-- run by tests/… -->', "
        "'<!-- saved as NAME; run by tests/… -->' and '<!-- not run: why -->'"
    ]


def test_every_marker_is_one_the_runner_knows() -> None:
    wrong = [
        problem for page in PAGES for block in blocks(page) for problem in marker_problems(block)
    ]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize(
    ("marker", "problem"),
    [
        ("not run:", "say why it cannot run"),
        ("run by tests/no_such_test.py", "tests/no_such_test.py is not a test file"),
        ("run by tests/test_layers.py", "tests/test_layers.py does not name llm.md"),
        ("saved as my_agent.py", "name the test that runs it"),
        ("skip this", "is none of"),
    ],
)
def test_a_wrong_marker_is_caught(marker: str, problem: str) -> None:
    block = Block(page=ROOT / "docs" / "llm.md", line=1, language="python", code="", marker=marker)
    [found] = marker_problems(block)
    assert problem in found


def test_a_marker_that_names_a_real_runner_passes() -> None:
    block = Block(
        page=ROOT / "docs" / "llm.md", line=1, language="python", code="",
        marker="run by tests/llm/test_docs.py",
    )  # fmt: skip
    assert marker_problems(block) == []


@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if _runnable(page)],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_the_python_blocks_of_a_page_run(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if any('"node"' in block.code for block in _runnable(page)) and not shutil.which("node"):
        pytest.skip(f"{page.name} runs Node.js programs, and node is not on PATH")
    for checkout in ("agents", "environments", "examples"):
        (tmp_path / checkout).symlink_to(ROOT / checkout, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # `examples.…` imports, as from a checkout
    namespace: dict[str, object] = {"__name__": "docs"}
    for block in _runnable(page):
        if (name := _saved_as(block)) is not None:
            (tmp_path / name).write_text(block.code)
            continue
        # Compiled as a reader runs it: not under this module's __future__ imports.
        code = compile(block.code, block.where, "exec", dont_inherit=True)
        exec(code, namespace)


def command_lines(block: Block) -> list[str]:
    """The shell command lines of ``block``, continuation lines joined: every line of a shell
    block, the ``$ …`` lines of a console or plain one (the rest is output)."""
    if block.language not in (*_SHELLS, ""):
        return []
    joined = block.code.replace("\\\n", " ").splitlines()
    if block.language in ("console", ""):
        return [line.removeprefix("$ ") for line in joined if line.startswith("$ ")]
    return joined


def envharness_calls(line: str) -> list[list[str]]:
    """Each ``envharness`` call on ``line``: its arguments (``$(…)``, pipes and environment
    assignments taken apart)."""
    lexer = shlex.shlex(line.replace("$(", " ( "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    calls: list[list[str]] = []
    segment: list[str] = []
    for token in [*lexer, ";"]:
        if token not in _SEPARATORS:
            segment.append(token)
            continue
        words = [w for w in segment if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", w)]
        if segment and words[:1] == ["envharness"]:
            calls.append(words[1:])
        segment = []
    return calls


def _documented_calls() -> list[tuple[str, list[str]]]:
    return [
        (f"{block.where}: {line.strip()}", call)
        for page in PAGES
        for block in blocks(page)
        for line in command_lines(block)
        for call in envharness_calls(line)
    ]


def parse_error(command: Any, args: list[str]) -> str | None:
    """Why the CLI would refuse ``args`` before running anything, or ``None``: each group's
    options are parsed and its command looked up as the CLI does it, with nothing invoked."""
    context: Any = None
    name = "envharness"
    try:
        while True:
            context = command.make_context(name, [], parent=context, resilient_parsing=True)
            context.resilient_parsing = False  # parse strictly; a callback is never invoked
            _, rest, _ = command.make_parser(context).parse_args(list(args))
            if not isinstance(command, typer.core.TyperGroup):
                return f"{name} takes no more arguments: {rest}" if rest else None
            if not rest:
                return None
            found, sub, args = command.resolve_command(context, rest)
            if sub is None or found is None:
                return f"{name} has no command {rest[0]!r}"
            command, name = sub, found
    except typer.TyperException as error:  # the CLI's own refusal, as it would print it
        return f"{name}: {error.format_message()}"


def test_documented_command_lines_parse() -> None:
    calls = _documented_calls()
    assert len(calls) > 40  # the extraction found the docs' commands
    cli = typer.main.get_command(app)
    wrong = [f"{where}\n    {why}" for where, args in calls if (why := parse_error(cli, args))]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["no-such-command"], "No such command"),
        (["--store", "S", "token", "issue", "--rol", "viewer"], "No such option"),
        (["verify", "extra"], "takes no more arguments"),
    ],
)
def test_a_wrong_command_line_is_caught(args: list[str], problem: str) -> None:
    why = parse_error(typer.main.get_command(app), args)
    assert why is not None
    assert problem in why


def test_calls_are_found_inside_substitutions_and_after_assignments() -> None:
    line = 'TOKEN=$(envharness --store S token issue --role viewer)  # "once"'
    assert envharness_calls(line) == [["--store", "S", "token", "issue", "--role", "viewer"]]
    assert envharness_calls("A=1 envharness verify | head") == [["verify"]]
    assert envharness_calls("pip install envharness") == []
