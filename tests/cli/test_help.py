"""Every command's ``--help``, walked: ranges print only bounds a user could meet, and no
line is cut off mid-phrase."""

from __future__ import annotations

import re

import pytest
from typer import _click
from typer.main import get_command

from envharness.cli import app
from envharness.cli.help_ranges import UNREACHABLE

RANGE = re.compile(r"(-?\d+(?:\.\d+)?)?(<=?)?x(?:(<=?|>=?)(-?\d+(?:\.\d+)?))?\]")
CUT = ("...", "…")


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """Each command's help as ``--help`` prints it, formatted from one command tree."""
    shown: dict[str, str] = {}

    def walk(command: _click.Command, context: _click.Context, name: str) -> None:
        shown[name] = command.get_help(context)
        for sub_name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                inner = _click.Context(sub, info_name=sub_name, parent=context)
                walk(sub, inner, f"{name} {sub_name}".strip())

    root = get_command(app)
    walk(root, _click.Context(root, info_name="envharness"), "")
    return shown


def test_every_command_is_walked(helps: dict[str, str]) -> None:
    for name in ("run", "continue", "stop", "pause", "sessions list", "token issue"):
        assert name in helps


def test_no_range_prints_a_bound_nobody_could_meet(helps: dict[str, str]) -> None:
    found = []
    for name, text in helps.items():
        flat = " ".join(text.split())  # a range may wrap over two lines
        for match in RANGE.finditer(flat):
            bounds = [float(b) for b in (match.group(1), match.group(4)) if b is not None]
            if any(abs(bound) >= UNREACHABLE for bound in bounds):
                found.append(f"{name}: {match.group(0)}")
    assert found == []
    assert "[x>=1]" in " ".join(helps["continue"].split())


def test_no_help_line_is_cut_mid_phrase(helps: dict[str, str]) -> None:
    cut = [
        f"{name}: {line.strip()}"
        for name, text in helps.items()
        for line in text.splitlines()
        if line.rstrip().endswith(CUT) and not line.lstrip().startswith("Usage:")
    ]
    assert cut == []
