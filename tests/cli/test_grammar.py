"""One grammar: nouns with the same verbs (``sessions list|show``, ``experiments list|show``,
``token issue|list|revoke``), the older forms kept as aliases that say so on stderr, help that
is never cut mid-phrase, and every argument named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer import _click as click  # the click typer's commands are made of
from typer.core import TyperArgument, TyperGroup
from typer.testing import CliRunner

from envharness.cli import app
from tests.cli._support import Invoke

ROOT = typer.main.get_command(app)


def groups(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every group in the command tree, the root first."""
    if isinstance(command, TyperGroup):
        yield path
        for name, sub in command.commands.items():
            yield from groups(sub, (*path, name))


def commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


@pytest.mark.parametrize("path", list(groups(ROOT)), ids=lambda p: " ".join(p) or "root")
def test_help_lists_whole_first_sentences(path: tuple[str, ...]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"])
    assert shown.exit_code == 0, shown.output
    listing = shown.stdout.partition("Commands:")[2]
    assert listing, f"{path}: no Commands section"
    assert not [line for line in listing.splitlines() if line.rstrip().endswith("...")]


def test_every_argument_is_named() -> None:
    unnamed = [
        f"{' '.join(path)} {param.name}"
        for path, command in commands(ROOT)
        for param in command.params
        if isinstance(param, TyperArgument) and param.metavar is None
    ]
    assert unnamed == []


def test_the_new_commands_are_listed() -> None:
    listing = CliRunner().invoke(app, ["--help"]).stdout
    for name in ("checkpoint", "branch", "continue", "compare", "stop", "pause"):
        assert f"\n  {name} " in listing
    assert "\n  show " not in listing  # the old root form is an alias, not advertised


def old_and_new(invoke: Invoke, store: Path, old: list[str], new: list[str]) -> str:
    """Run both forms; they answer the same on stdout, and only the old one adds a note.
    Returns the note."""
    before, after = invoke("--store", store, *old), invoke("--store", store, *new)
    assert before.exit_code == after.exit_code == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout
    assert after.stdout
    assert "note:" not in after.stderr
    notes = [line for line in before.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1
    return notes[0]


def test_sessions_list_and_show(invoke: Invoke, quickstart_master: Path) -> None:
    note = old_and_new(invoke, quickstart_master, ["sessions"], ["sessions", "list"])
    assert note.startswith("note: `envharness sessions` is now `envharness sessions list`")
    listed = invoke("--store", quickstart_master, "sessions", "list", "--json").stdout
    first = json.loads(listed.splitlines()[0])["id"]
    note = old_and_new(
        invoke, quickstart_master, ["show", first, "--turn", "1"],
        ["sessions", "show", first, "--turn", "1"],
    )  # fmt: skip
    assert "`envharness sessions show`" in note
    old_and_new(
        invoke, quickstart_master, ["sessions", "--status", "completed", "--json"],
        ["sessions", "list", "--status", "completed", "--json"],
    )  # fmt: skip


def test_options_of_the_old_form_before_a_verb_are_refused(
    invoke: Invoke, quickstart_master: Path
) -> None:
    refused = invoke("--store", quickstart_master, "sessions", "--json", "list")
    assert refused.exit_code == 2
    assert "--status and --json go after the subcommand" in refused.stderr
    token = invoke("--store", quickstart_master, "token", "--role", "viewer", "list")
    assert token.exit_code == 2
    assert "go after `token issue`" in token.stderr


def test_experiments_list(invoke: Invoke, quickstart_master: Path) -> None:
    note = old_and_new(invoke, quickstart_master, ["experiments"], ["experiments", "list"])
    assert "`envharness experiments list`" in note


def test_token_issue(invoke: Invoke, quickstart_store: Path) -> None:
    issued = invoke("--store", quickstart_store, "token", "issue", "--role", "viewer")
    assert issued.exit_code == 0, issued.stderr
    assert issued.stdout.startswith("eht_")
    assert "note:" not in issued.stderr
    old = invoke("--store", quickstart_store, "token", "--role", "viewer", "--label", "old")
    assert old.exit_code == 0
    assert old.stdout.startswith("eht_")
    assert "`envharness token issue --role ...`" in old.stderr
    listed = invoke("--store", quickstart_store, "token", "list", "--json").stdout.splitlines()
    assert len(listed) == 2
    no_role = invoke("--store", quickstart_store, "token", "issue")
    assert no_role.exit_code == 2
    assert "--role admin|viewer|participant" in no_role.stderr
    bare = invoke("--store", quickstart_store, "token")
    assert bare.exit_code == 2
    assert "`token issue --role" in bare.stderr
